"""Checks a pipeline command runs before it starts Spark, so a refused command fails in a second.

Everything here reads only the arguments, the configuration and (on a local lake) the Delta logs'
directory listings: no Spark, no JVM, no table data. What a stage needs is :data:`STAGE_INPUTS`;
on a Unity Catalog or remote lake only the names are checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError, TableNotFoundError
from gpope.shell.lake.names import (
    TableRef,
    check_name,
    creator_hint,
    local_root,
    table_path,
)

if TYPE_CHECKING:
    from gpope.config import DatasetSettings, GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["STAGE_INPUTS", "check_dataset_unique", "check_lake", "check_load", "check_stage"]

#: The tables each stage reads, per dataset (layer, table).
STAGE_INPUTS: dict[str, tuple[tuple[str, str], ...]] = {
    "simulate": (),
    "ingest": (("bronze", "observations"), ("bronze", "treatments"), ("bronze", "outcomes")),
    "stats": (("silver", "transitions"),),
    "evaluate": (("gold", "trajectory_stats"),),
}


def check_lake(config: GpopeConfig) -> None:
    """Refuse a local lake root that the Delta storage path cannot address (the character named).

    Raises:
        ConfigError: the root holds a character delta-rs cannot address, or is a file.
    """
    if config.lake.catalog is not None:
        return
    root = local_root(str(config.lake.root))
    if root is not None:
        from gpope.shell.lake.local import check_local_root

        check_local_root(str(root))


def check_dataset_unique(config: GpopeConfig, dataset: str) -> None:
    """Refuse a dataset name that differs only in case from a dataset the local lake holds (SQL
    identifiers are case-insensitive, so ``Base`` and ``base`` would share views).

    Raises:
        ConfigError: another dataset of the lake has the same name up to case (both quoted).
    """
    from gpope.shell.lake.local import dataset_folders

    if config.lake.catalog is not None:
        return
    root = local_root(str(config.lake.root))
    if root is None:
        return
    for layer, name in dataset_folders(root):
        if name != dataset and name.lower() == dataset.lower():
            raise ConfigError(
                f"Dataset {dataset!r} differs only in case from dataset {name!r}, which the "
                f"lake {root} already holds ({layer}/{name}); SQL views and Unity Catalog "
                "table names ignore case, so the two would read each other's tables. Use "
                f"--dataset {name} for that dataset, or a name that differs in more than case."
            )


def check_stage(
    config: GpopeConfig, stage: str, dataset: str, spec: EvaluationSpec | None = None
) -> None:
    """Everything about ``stage`` on ``dataset`` that can be checked without Spark.

    Guarantees: the dataset name is valid and unique up to case in a local lake, the lake root
    is addressable, a ``spec`` matches the actions and state columns of the dataset's
    ``datasets:`` entry (when the conf has one), and on a local lake every input table of the
    stage exists (for ``evaluate`` with ``spec``: with statistics of that spec).

    Raises:
        ConfigError: one of these fails.
        TableNotFoundError: an input table is missing; the message names the command that
            creates it.
    """
    check_name("dataset", dataset)
    check_lake(config)
    check_dataset_unique(config, dataset)
    if spec is not None and dataset in config.datasets:
        _check_actions(spec, dataset, config.datasets[dataset].actions)
        _check_state_width(spec, dataset, config.datasets[dataset])
    root = None if config.lake.catalog is not None else local_root(str(config.lake.root))
    if root is None:
        return
    from gpope.shell.lake.local import latest_version

    for layer, table in STAGE_INPUTS[stage]:
        ref = TableRef(layer, table, dataset)  # type: ignore[arg-type]
        path = table_path(root, ref)
        if latest_version(path) is None:
            raise TableNotFoundError(
                f"Delta table {ref} does not exist at {path}, so `gpope {stage}` cannot run "
                f"(checked before starting Spark). {creator_hint(ref)}"
            )
        if stage == "evaluate" and spec is not None and not any(
                _has_partition(path, i) for i in _statistics_ids(spec)):
            raise TableNotFoundError(
                f"{ref} at {path} has no statistics for spec {spec.name!r} (spec_id "
                f"{spec.spec_id}), so `gpope evaluate` cannot run (checked before starting "
                f"Spark). Compute them with `gpope stats --dataset {dataset} --spec FILE` "
                "using the same spec file."
            )


def check_load(config: GpopeConfig, dataset: str, files: dict[str, str], *, fmt: str = "auto",
               columns: Any = None, time_zone: str | None = None) -> None:
    """Everything about ``gpope load`` that can be checked without Spark: the dataset name, the
    lake root and :func:`gpope.shell.pipeline.load.check_files` (ConfigError, SchemaError)."""
    from gpope.shell.pipeline.load import check_files

    check_name("dataset", dataset)
    check_lake(config)
    check_dataset_unique(config, dataset)
    check_files(files, fmt=fmt, columns=columns,  # type: ignore[arg-type]
                time_zone=time_zone)


def _check_actions(spec: EvaluationSpec, dataset: str, actions: tuple[str, ...]) -> None:
    """Refuse a target policy whose action count differs from the dataset's declared actions:
    the action index of a transition is its position in ``actions``."""
    n_actions = getattr(spec.target_policy, "n_actions", None)
    if actions and isinstance(n_actions, int) and n_actions != len(actions):
        raise ConfigError(
            f"Spec {spec.name!r}: its target_policy gives probabilities for {n_actions} "
            f"action(s), but dataset {dataset!r} declares {len(actions)} under 'datasets:' "
            f"({', '.join(actions)}); give one probability per declared action, in that order "
            "(checked before starting Spark).")


def _check_state_width(spec: EvaluationSpec, dataset: str, settings: DatasetSettings) -> None:
    """Refuse a feature map (the spec's or its target policy's action values') whose public
    ranges ``low``/``high`` describe another number of state columns than ingest writes: one per
    declared variable, twice that with ``missing_indicators``."""
    if not settings.variables:
        return
    width = len(settings.variables) * (2 if settings.missing_indicators else 1)
    q = getattr(spec.target_policy, "q", None)
    maps = {"feature_map": spec.feature_map,
            "target_policy.q.feature_map": getattr(q, "feature_map", None)}
    for where, fmap in maps.items():
        low = getattr(fmap, "low", None)
        if low is not None and len(low) != width:
            columns = ", ".join(settings.variables)
            extra = " and one 0/1 missing indicator per variable" if settings.missing_indicators else ""
            raise ConfigError(
                f"Spec {spec.name!r}: its {where} has public ranges for {len(low)} state "
                f"column(s) (low/high), but dataset {dataset!r} has {width}: its 'variables' "
                f"({columns}){extra}, in that order; give one low and one high per column "
                "(checked before starting Spark).")


def _statistics_ids(spec: EvaluationSpec) -> tuple[str, ...]:
    """The spec ids ``spec``'s statistics may be stored under: its own (logged propensities) or
    its state-action spec's (none logged: :mod:`gpope.shell.pipeline.propensities`)."""
    from gpope.core.state_action import state_action_spec

    return (spec.spec_id, state_action_spec(spec).spec_id)


def _has_partition(path: str, spec_id: str) -> bool:
    """True when the table's live files include the ``spec_id`` partition (or are unpartitioned)."""
    from gpope.shell.lake.local import local_tables

    try:
        return local_tables().has_partition(path, "spec_id", spec_id)
    except Exception:  # an unreadable log is reported by the stage itself, with its context
        return True

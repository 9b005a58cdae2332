"""A simulated cohort as plain files: the stand-in for an analyst's own event extract.

:func:`write_cohort_files` writes the bronze rows ``gpope simulate`` would write for a seed as
Parquet (as pandas writes them) or CSV files, plus the ``conf.yaml`` that ingests them; for a
generated MDP also ``spec.yaml`` (an own-data spec) and ``truth.json`` (the exact values at its
reference states). ``variables`` charts a tabular state as several discrete measurements and
``propensity=False`` leaves the behaviour probabilities out. No Spark is involved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import yaml

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.shell.pipeline.simulate import SimulateOptions

__all__ = ["write_cohort_files"]


def write_cohort_files(
    domain: str,
    patients: int,
    seed: int | None,
    out: str | Path,
    *,
    options: SimulateOptions | None = None,
    fmt: Literal["parquet", "csv"] = "parquet",
    dataset: str = "mydata",
    progress: bool = False,
    variables: Mapping[str, int] | None = None,
    propensity: bool = True,
) -> dict[str, Any]:
    """Write the cohort's files under ``out`` (existing files of these names replaced).
    ``variables`` (a tabular ``random_mdp/<seed>`` only) writes each state row-major as those
    discrete variables, the product of the levels equal to its number of states.

    Returns:
        ``{"files": {table: path}, "conf": path, "spec": path or None, "truth": path or None,
        "rows": {table: n}}``.

    Raises:
        ConfigError: ``variables`` for another domain, or levels whose product is not the
            number of states.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from gpope.core.envs.registry import get_domain
    from gpope.shell.pipeline.simulate import iter_simulated_tables, tables_to_arrow

    entry = get_domain(domain)
    levels = _check_variables(domain, variables) if variables else None
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    parts: dict[str, list[pa.Table]] = {}
    for _, tables in iter_simulated_tables(domain, patients, seed, options, progress=progress):
        for name, table in tables_to_arrow(tables).items():
            parts.setdefault(name, []).append(table)
    files, rows = {}, {}
    for name, tables in parts.items():
        table = pa.concat_tables(tables)
        if levels is not None and name == "observations":
            table = _charted_as(table, levels)
        if not propensity and "propensity" in table.column_names:
            table = table.drop_columns(["propensity"])
        path = folder / f"{name}.{fmt}"
        if fmt == "csv":  # ISO 8601 UTC times ("Z")
            times = pa.compute.strftime(table["time"], format="%Y-%m-%dT%H:%M:%SZ")
            table = table.set_column(table.schema.get_field_index("time"), "time", times)
            pacsv.write_csv(table, path)
        else:  # as an analyst's pandas frame would be written: nanosecond times
            table.to_pandas(coerce_temporal_nanoseconds=True).to_parquet(path)
        files[name], rows[name] = str(path), table.num_rows
    cap = options.n_steps if options is not None and options.n_steps else None
    conf = folder / "conf.yaml"
    mapping = entry.dataset_mapping(cap)
    if levels is not None:
        mapping["variables"] = list(levels)
    conf.write_text(yaml.safe_dump({"datasets": {dataset: mapping}}, sort_keys=False))
    result: dict[str, Any] = {"files": files, "conf": str(conf), "spec": None, "truth": None,
                              "rows": rows}  # fmt: skip
    if domain.startswith("random_mdp"):
        from gpope.core.envs.registry import random_mdp_of

        mdp = random_mdp_of(domain)
        spec = folder / "spec.yaml"
        name = domain.replace("/", "_")
        mapping = mdp.spec_mapping(name)
        if levels is not None:
            mapping = _named_spec(mapping, levels)
        spec.write_text(yaml.safe_dump(mapping, sort_keys=False))
        truth = folder / "truth.json"
        values: dict[str, Any] = {"domain": domain, "values": mdp.reference_values()}
        if levels is not None:
            values["states"] = mapping["reference_states"]
        truth.write_text(json.dumps(values, indent=1))
        result.update(spec=str(spec), truth=str(truth))
    return result


def _check_variables(domain: str, variables: Mapping[str, int]) -> dict[str, int]:
    """``variables`` as an ordered dict, checked against the domain's tabular states."""
    from gpope.core.envs.registry import random_mdp_of

    if not domain.startswith("random_mdp/"):
        raise ConfigError(f"--variables charts a tabular generated MDP's state as discrete "
                          f"measurements; {domain!r} is not one (use random_mdp/<seed>).")
    levels = {str(k): int(v) for k, v in variables.items()}
    mdp = random_mdp_of(domain)
    states = mdp.n_states + mdp.config.n_terminal
    if any(v < 2 for v in levels.values()) or int(np.prod(list(levels.values()))) != states:
        raise ConfigError(
            f"{domain} has {states} states (terminal ones included); the levels of --variables "
            f"({', '.join(f'{k}={v}' for k, v in levels.items())}) must each be >= 2 and "
            f"multiply to {states}.")
    return levels


def _charted_as(table: Any, levels: Mapping[str, int]) -> Any:
    """The observations with each ``state`` row replaced by one row per variable (same patient
    and time): the levels of the product map's state at that index
    (:meth:`gpope.core.features.TabularFeatures.states`, the order the spec's map reads), the
    other rows (e.g. the episode end) kept; sorted by patient and time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpope.core.features import TabularFeatures

    is_state = pc.equal(table["variable"], "state")
    states, others = table.filter(is_state), table.filter(pc.invert(is_state))
    grid = TabularFeatures(variables=dict(levels)).states()
    digits = grid[np.round(states["value"].to_numpy()).astype(np.int64)]
    charted = [states.set_column(states.schema.get_field_index("variable"), "variable",
                                 pa.array([name] * states.num_rows, pa.string()))
               .set_column(states.schema.get_field_index("value"), "value", pa.array(digits[:, j]))
               for j, name in enumerate(levels)]
    whole = pa.concat_tables([*charted, others])
    return whole.sort_by([("patient_id", "ascending"), ("time", "ascending")])


def _named_spec(spec: dict[str, Any], levels: Mapping[str, int]) -> dict[str, Any]:
    """The generated spec over the declared variables: the product map, the tabular policy's
    rows and the reference states named by their variables (the same arithmetic)."""
    from gpope.core.features import DiscreteVariables

    grid = dict(levels)
    names = DiscreteVariables.parse(grid).state_names()  # index order, as the map reads them
    policy = dict(spec["target_policy"])
    if policy.get("kind") == "tabular":
        policy = {"kind": "tabular", "variables": dict(grid),  # no YAML alias in the file
                  "probs": dict(zip(names, policy["probs"], strict=True))}
    return {**spec, "feature_map": {"kind": "tabular", "variables": grid},
            "target_policy": policy,
            "reference_states": {k: names[round(v[0])]
                                 for k, v in spec["reference_states"].items()}}

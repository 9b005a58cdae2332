"""``gpope track``: log a released run to MLflow again, from what the lake holds.

An evaluation commits its release before it logs to MLflow, so a tracking failure never undoes a
release. This module rebuilds the run's MLflow record from the released tables alone (pinned, no
JVM): nothing here reads private data or draws noise, so re-logging spends no budget. Settings
that live only in the evaluating process are not in the lake; a re-logged run carries the tag
``gpope.relogged=lake``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpope.core.accounting.registry import not_a_valid_bound
from gpope.errors import ConfigError
from gpope.shell import mlflow_names as names

if TYPE_CHECKING:
    from gpope.config import GpopeConfig

__all__ = ["RELOGGED_TAG", "TrackReport", "relog_release", "tracked_runs"]

#: Tag of MLflow runs rebuilt from the lake by ``gpope track``.
RELOGGED_TAG = "gpope.relogged"
_RUN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


@dataclass(frozen=True)
class TrackReport:
    """What ``gpope track`` did (``created`` False: a finished run already held it)."""

    run_id: str
    mlflow_run_id: str
    tracking_uri: str
    created: bool

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "mlflow_run_id": self.mlflow_run_id,
                "tracking_uri": self.tracking_uri, "created": self.created}

    def summary(self) -> str:
        if not self.created:
            return (f"run {self.run_id} is already tracked: MLflow run {self.mlflow_run_id} at "
                    f"{self.tracking_uri} (nothing logged; --force logs it again)")
        return (f"run {self.run_id} logged from the lake to MLflow run {self.mlflow_run_id} at "
                f"{self.tracking_uri} (no budget spent)")


def tracked_runs(run_id: str, tracking_uri: str, experiment: str) -> list[Any]:
    """FINISHED MLflow runs of ``experiment`` tagged ``gpope.run_id = run_id`` (none: empty)."""
    import mlflow

    from gpope.shell.tracking import ensure_store

    exp_id = ensure_store(tracking_uri, experiment)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    runs = client.search_runs([exp_id], filter_string=f"tags.`gpope.run_id` = '{run_id}'")
    return [r for r in runs if r.info.status == "FINISHED"
            and r.data.tags.get(names.STAGE) == "evaluate"]


def _released(config: GpopeConfig, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's released_estimates row and released_values rows, as every reader sees them."""
    from gpope.shell.query import query

    where = f"WHERE run_id = '{run_id}'"
    try:
        estimates = query(f"SELECT * FROM released_estimates {where}", lake=config).to_pylist()
    except Exception as exc:  # no such table: nothing was ever released in this lake
        raise ConfigError(
            f"Run {run_id} has no release in the lake {config.lake.root} ({exc}); only released "
            "runs can be tracked. `gpope query \"SELECT run_id FROM released_estimates\"` lists them."
        ) from None
    if not estimates:
        raise ConfigError(
            f"Run {run_id} has no release in the lake {config.lake.root}: released_estimates has "
            "no visible row with that run_id (a failed or killed run releases nothing). "
            "`gpope query \"SELECT run_id, dataset, created_at FROM released_estimates\"` lists "
            "the released runs."
        )
    try:
        values = query(f"SELECT * FROM released_values {where} ORDER BY state",
                       lake=config).to_pylist()
    except Exception:  # lakes from before released_values: the estimates row carries the values
        values = []
    return estimates[0], values


def relog_release(
    config: GpopeConfig, run_id: str, *, tracking_uri: str | None = None, force: bool = False
) -> TrackReport:
    """Log released run ``run_id`` to MLflow from the lake (idempotent unless ``force``).

    Guarantees: logs only released numbers (the rows of ``released_estimates`` and
    ``released_values``), never reads private tables, never touches the ledger. When a FINISHED
    MLflow run already holds ``run_id`` and ``force`` is False, nothing is logged.

    Raises:
        ConfigError: a malformed run id, or no release of ``run_id`` in the lake.
    """
    import mlflow

    from gpope.shell.evaluate.record import json_end, unbounded_tags
    from gpope.shell.tracking import code_version, resolve_tracking_uri, start_run

    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise ConfigError(f"--run-id must be a gpope run id (letters, digits, '-', '_'); got {run_id!r}.")
    estimate, values = _released(config, run_id)
    uri = resolve_tracking_uri(tracking_uri, config.tracking.uri, config.lake.root)
    experiment = config.tracking.experiment
    existing = tracked_runs(run_id, uri, experiment)
    if existing and not force:
        return TrackReport(run_id, existing[0].info.run_id, uri, created=False)
    spec_name = values[0]["spec_name"] if values else estimate["spec_id"]
    value_of = ({r["state"]: r["value"] for r in values} if values
                else dict(zip(estimate["reference_states"], estimate["values"], strict=True)))
    tags = {
        names.RUN_ID: run_id, names.STAGE: "evaluate", names.DATASET: estimate["dataset"],
        names.SPEC: spec_name, names.SPEC_ID: estimate["spec_id"],
        names.ESTIMATOR: estimate["estimator"],
        names.PRIVATE: str(bool(estimate["private"])).lower(),
        names.VALID_BOUND: str(not not_a_valid_bound(estimate["accountant"])).lower(),
        RELOGGED_TAG: "lake", **code_version(),
        **unbounded_tags({r["state"]: (r["lower"], r["upper"], r["lower_bound"])
                          for r in values}),
    }
    metrics = {names.METRIC_RESERVED_EPSILON: float(estimate["epsilon"]),
               names.METRIC_SPENT_DELTA: float(estimate["delta"])}
    metrics.update({f"value.{k}": float(v) for k, v in value_of.items()})
    for r in values:
        for column in ("lower", "upper", "lower_bound"):
            if r[column] is not None:
                metrics[f"value_{column}.{r['state']}"] = float(r[column])
    created = estimate["created_at"]
    name = (f"{estimate['dataset']} | {spec_name} | {estimate['estimator']} | "
            f"eps={estimate['epsilon']:g} | {created:%Y-%m-%d %H:%M:%S} (re-logged)")
    with start_run(tracking_uri=uri, experiment=experiment, run_name=name, tags=tags) as run:
        mlflow.log_params({"dataset": estimate["dataset"], "spec": spec_name,
                           "spec_id": estimate["spec_id"], "estimator": estimate["estimator"],
                           "policy": estimate["policy"], "epsilon": estimate["epsilon"],
                           "delta": estimate["delta"], "accountant": estimate["accountant"],
                           "private": bool(estimate["private"]),
                           "ci_level": values[0]["ci_level"] if values else None})
        mlflow.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        mlflow.log_dict({"run_id": run_id, "dataset": estimate["dataset"],
                         "spec_id": estimate["spec_id"],
                         "theta": [float(v) for v in estimate["theta"]],
                         "reference_values": value_of, "epsilon": estimate["epsilon"],
                         "delta": estimate["delta"], "private": bool(estimate["private"])},
                        "theta.json")
        if values:
            mlflow.log_dict({"columns": ["state", "value", "lower", "upper", "lower_bound"],
                             "data": [[r["state"], r["value"], json_end(r["lower"]),
                                       json_end(r["upper"]), json_end(r["lower_bound"])]
                                      for r in values]}, "values.json")
        return TrackReport(run_id, run.info.run_id, uri, created=True)


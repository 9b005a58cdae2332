"""Writing released estimates: one row per private run, in one atomic append.

Only differentially private outputs go to ``<lake>/gold/released_estimates`` (shared across
datasets, schema :data:`gpope.shell.schemas.RELEASED_ESTIMATES`): theta (the averaged iterate when
averaging is on) and the values theta . phi(s) / reward_scale at the spec's named public reference
states, which are post-processing of theta. Runs made with a fixed seed carry ``private = false``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["read_releases", "release_row", "value_rows", "write_release"]


def release_row(
    *,
    run_id: str,
    dataset: str,
    spec: EvaluationSpec,
    policy: str,
    epsilon: float,
    delta: float,
    accountant: str,
    created_at: datetime,
    theta: np.ndarray,
    values: np.ndarray,
    private: bool,
    estimator: str = "gpope",
) -> dict[str, Any]:
    """The released_estimates row of one run (plain Python values)."""
    return {
        "run_id": run_id,
        "dataset": dataset,
        "spec_id": spec.spec_id,
        "policy": policy,
        "epsilon": float(epsilon),
        "delta": float(delta),
        "accountant": accountant,
        "created_at": created_at,
        "theta": [float(v) for v in np.asarray(theta, dtype=np.float64)],
        "reference_states": list(spec.reference_names),
        "values": [float(v) for v in np.asarray(values, dtype=np.float64)],
        "private": bool(private),
        "estimator": str(estimator),
    }


def value_rows(row: dict[str, Any], *, spec_name: str, interval: Any | None) -> list[dict[str, Any]]:
    """The released_values rows of one run: one per reference state, with the interval's
    ``lower``, ``upper``, ``lower_bound`` and ``level`` (:class:`gpope.core.intervals.Interval`),
    or nulls when the run has no interval."""
    out = []
    for i, (state, value) in enumerate(zip(row["reference_states"], row["values"], strict=True)):
        out.append({
            "run_id": row["run_id"], "dataset": row["dataset"], "spec_id": row["spec_id"],
            "spec_name": spec_name, "estimator": row["estimator"], "state": state,
            "value": float(value),
            "lower": None if interval is None else float(interval.lower[i]),
            "upper": None if interval is None else float(interval.upper[i]),
            "lower_bound": None if interval is None else float(interval.lower_bound[i]),
            "ci_level": None if interval is None else float(interval.level),
            "epsilon": row["epsilon"], "delta": row["delta"], "accountant": row["accountant"],
            "private": row["private"], "created_at": row["created_at"],
        })
    return out


def write_release(spark: SparkSession, config: GpopeConfig, row: dict[str, Any],
                  values: list[dict[str, Any]] | None = None) -> None:
    """Append the run's row to released_estimates and its per-state rows to released_values.

    Each table gets one atomic commit, released_estimates first. (Until the lake's
    ``pipeline_runs`` manifest lands the two commits are not one transaction: a crash between them
    leaves a released_estimates row without its released_values rows, never the reverse.)
    """
    from gpope.shell import lake
    from gpope.shell.schemas import RELEASED_ESTIMATES, RELEASED_VALUES

    df = spark.createDataFrame(
        [tuple(row[f.name] for f in RELEASED_ESTIMATES.fields)], schema=RELEASED_ESTIMATES
    )
    lake.write_shared_table(df, config.lake, "released_estimates", mode="append")
    if values:
        vdf = spark.createDataFrame(
            [tuple(r[f.name] for f in RELEASED_VALUES.fields) for r in values], schema=RELEASED_VALUES
        )
        lake.write_shared_table(vdf, config.lake, "released_values", mode="append")


def read_releases(spark: SparkSession, config: GpopeConfig) -> Any:
    """The released_estimates table as a DataFrame (TableNotFoundError before the first release)."""
    from gpope.shell import lake

    return lake.read_shared_table(spark, config.lake, "released_estimates")

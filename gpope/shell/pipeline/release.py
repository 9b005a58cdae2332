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

__all__ = ["read_releases", "release_row", "write_release"]


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
    }


def write_release(spark: SparkSession, config: GpopeConfig, row: dict[str, Any]) -> None:
    """Append one row to released_estimates in one atomic commit."""
    from gpope.shell import lake
    from gpope.shell.schemas import RELEASED_ESTIMATES

    df = spark.createDataFrame(
        [tuple(row[f.name] for f in RELEASED_ESTIMATES.fields)], schema=RELEASED_ESTIMATES
    )
    lake.write_shared_table(df, config.lake, "released_estimates", mode="append")


def read_releases(spark: SparkSession, config: GpopeConfig) -> Any:
    """The released_estimates table as a DataFrame (TableNotFoundError before the first release)."""
    from gpope.shell import lake

    return lake.read_shared_table(spark, config.lake, "released_estimates")

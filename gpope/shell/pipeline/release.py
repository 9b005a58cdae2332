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

__all__ = ["RELEASE_TABLES", "policy_label", "release_row",
           "remove_failed_releases", "value_rows", "write_release"]

RELEASE_TABLES: tuple[str, ...] = ("released_estimates", "released_values")
"""The shared tables one release appends to (tagged with its run id, made valid by its manifest)."""


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


def value_rows(row: dict[str, Any], *, spec: EvaluationSpec, interval: Any | None) -> list[dict[str, Any]]:
    """The released_values rows of one run: one per reference state, with the interval's
    ``lower``, ``upper``, ``lower_bound`` and ``level`` (:class:`gpope.core.intervals.Interval`),
    or nulls when the run has no interval, and the estimand of the spec's feature map
    (:func:`gpope.core.policy_value_direct.value_estimand`)."""
    from gpope.core.policy_value_direct import value_estimand

    estimand, spec_name = value_estimand(spec.feature_map), spec.name
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
            "private": row["private"], "created_at": row["created_at"], "estimand": estimand,
        })
    return out


def write_release(spark: SparkSession, config: GpopeConfig, row: dict[str, Any],
                  values: list[dict[str, Any]] | None = None) -> None:
    """Release one run atomically: released_estimates and released_values, then the manifest.

    Both appends are tagged with the run id and invisible to readers until the ``release``
    manifest that follows them: a crash between the commits releases nothing, and an exception
    before the manifest deletes the rows already appended. The caller marks the ledger after
    this returns; a manifest without that mark is what ``budget reconcile`` settles as released.
    """
    from gpope.shell import faults
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import PipelineRuns
    from gpope.shell.schemas import RELEASED_ESTIMATES, RELEASED_VALUES

    run_id = row["run_id"]
    try:
        target = Lake.from_settings(spark, config.lake)
        df = spark.createDataFrame(
            [tuple(row[f.name] for f in RELEASED_ESTIMATES.fields)], schema=RELEASED_ESTIMATES
        )
        estimates = TableRef.shared("released_estimates")
        versions = {estimates: target.write(df, estimates, mode="append", run_id=run_id)}
        faults.point("release:released_estimates")
        if values:
            vdf = spark.createDataFrame(
                [tuple(r[f.name] for f in RELEASED_VALUES.fields) for r in values], schema=RELEASED_VALUES
            )
            value_ref = TableRef.shared("released_values")
            versions[value_ref] = target.write(vdf, value_ref, mode="append", run_id=run_id,
                                               merge_schema=True)  # older tables lack estimand
            faults.point("release:released_values")
        PipelineRuns(config.lake, spark=spark).commit(
            run_id=run_id, stage="release", dataset=row["dataset"], tables=versions,
            key=row["spec_id"], details={"estimator": row.get("estimator"), "values": len(values or [])},
        )  # fmt: skip
        faults.point("release:manifest")
    except BaseException:
        _remove_own_rows(spark, config, run_id)
        raise


def _remove_own_rows(spark: SparkSession, config: GpopeConfig, run_id: str) -> None:
    """Delete what a failed release appended (best effort: if the delete fails too, the ledger
    marks the run failed and ``budget reconcile`` deletes the rows)."""
    from gpope.errors import GpopeError

    try:
        remove_failed_releases(config, {run_id}, spark)
    except (GpopeError, OSError):
        pass


def remove_failed_releases(
    config: GpopeConfig, run_ids: set[str], spark: SparkSession | None = None
) -> dict[str, int]:
    """Delete the release rows of failed runs (without a committed release manifest), so a raw
    read at the latest version holds none of them; returns table -> its delete commit's version
    (:func:`~gpope.shell.lake.manifest.remove_incomplete`)."""
    from gpope.shell.lake import TableRef
    from gpope.shell.lake.local import local_store
    from gpope.shell.lake.manifest import remove_incomplete

    if not run_ids:
        return {}
    if spark is None and local_store(config.lake) is None:
        from gpope.shell.spark import get_spark

        spark = get_spark(config.spark)
    return remove_incomplete(config.lake, [TableRef.shared(t) for t in RELEASE_TABLES], run_ids,
                             spark=spark)  # fmt: skip


def policy_label(spec: EvaluationSpec) -> str:
    """Short public label of the target policy for released_estimates."""
    from gpope.core.spec import canonical_json

    if spec.policy_name:
        return spec.policy_name
    d = spec.target_policy.to_dict()
    text = canonical_json(d)
    if len(text) <= 80:
        return text
    import hashlib

    return f"{d.get('kind', 'policy')}:{hashlib.sha256(text.encode()).hexdigest()[:10]}"


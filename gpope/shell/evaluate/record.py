"""What one evaluation hands to tracking (:class:`EvaluationRecord`, built after the release was
committed) and the MLflow run made from that record only, so the stage runs without MLflow.

One MLflow run per released evaluation in ``tracking.experiment`` (the README's "MLflow:
comparing runs"). Everything in the record is public or released, except
``private_population``: values computed from the private statistics WITHOUT noise go only to
``<experiment>/private-diagnostics``, tagged ``diagnostic.private=true``, and only when the
operator asked. An unbounded interval end is never a metric: the ``gpope.unbounded*`` tags say
which ends are omitted. The sample plan and the seed are never logged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.accounting.registry import not_a_valid_bound
from gpope.shell import mlflow_names as names

if TYPE_CHECKING:
    from gpope.config import TrackingSettings
    from gpope.core.envs.cohort import PublicCohort
    from gpope.core.intervals import Interval
    from gpope.core.spec import EvaluationSpec

__all__ = ["UNBOUNDED_TAG", "EvaluationRecord", "StatisticsInput", "TrackingOutcome", "json_end",
           "log_evaluation", "private_diagnostics", "run_name", "tracking_failed_line",
           "unbounded_tags", "value_figure"]


@dataclass(frozen=True)
class StatisticsInput:
    """The statistics table a run read (MLflow dataset lineage); ``location`` is a path, or a
    Unity Catalog name when ``by_name``; ``version`` None when unknown."""

    table: str
    location: str
    version: int | None
    spec_id: str
    by_name: bool = False


@dataclass(frozen=True, kw_only=True)
class EvaluationRecord:
    """Everything one released evaluation reports to tracking, all public or released except
    ``private_population`` (only when the operator asked for private diagnostics)."""

    run_id: str
    dataset: str
    spec: EvaluationSpec
    estimator: str = "gpope"
    params: Mapping[str, Any]
    epsilon: float
    delta: float
    epsilon_certified: float
    accountant: str
    sigma: float
    m: int
    private: bool
    seeded: bool
    privacy_note: str
    theta: np.ndarray
    values: np.ndarray
    theta_final: np.ndarray | None = None
    trace_steps: np.ndarray | None = None
    trace_theta: np.ndarray | None = None
    intervals: Interval | None = None
    ci_level: float | None = None
    statistics: StatisticsInput | None = None
    public_cohort: PublicCohort | None = None
    truth: Mapping[str, float] | None = None
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    spec_text: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tuning: Mapping[str, Any] | None = None

    def state_intervals(self) -> dict[str, tuple[float, float, float]]:
        """Per reference state name, ``(lower, upper, lower_bound)`` of its released interval
        (empty without intervals)."""
        if self.intervals is None:
            return {}
        iv = self.intervals
        return {name: (float(iv.lower[i]), float(iv.upper[i]), float(iv.lower_bound[i]))
                for i, name in enumerate(self.spec.reference_names)}

    @property
    def reference_values(self) -> dict[str, float]:
        """Released value per reference state name."""
        return {k: float(v) for k, v in zip(self.spec.reference_names, self.values, strict=True)}


@dataclass(frozen=True)
class TrackingOutcome:
    """What the MLflow run recorded; ``error`` and ``failed_line`` (the line the command prints)
    when tracking failed after the release."""

    mlflow_run_id: str | None
    tracking_uri: str
    public_mspbe: float | None = None
    public_relative_mspbe: float | None = None
    private_diagnostics: dict[str, Any] = field(default_factory=dict)
    private_run_id: str | None = None
    error: str | None = None
    failed_line: str | None = None


def tracking_failed_line(run_id: str, tracking_uri: str, error: str) -> str:
    """What to tell the operator when MLflow logging failed after a release: the release stands,
    nothing is to be re-run, and the command that re-logs the run from the lake."""
    return (f"WARNING: run {run_id} WAS RELEASED and charged (released_estimates, "
            f"released_values, privacy_ledger), but MLflow tracking at {tracking_uri} failed "
            f"({error}). Do not re-run the evaluation (that would spend the budget again); "
            f"re-log it from the lake with: gpope track --run-id {run_id}")


def run_name(record: EvaluationRecord, when: datetime | None = None) -> str:
    """``<dataset> | <spec> | <estimator> | eps=<epsilon> | <UTC time>`` (unique per second)."""
    when = when or datetime.now(UTC)
    return (f"{record.dataset} | {record.spec.name} | {record.estimator} | "
            f"eps={record.epsilon:g} | {when:%Y-%m-%d %H:%M:%S}")


def value_figure(record: EvaluationRecord) -> Any:
    """Matplotlib figure: released values at the reference states with their intervals, and the
    simulator's true values when known."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpope.shell.evaluate.policy_value import plot_policy_values, released_from_metrics

    names = list(record.spec.reference_names)
    x = np.arange(len(names), dtype=float)
    values = np.asarray(record.values, dtype=np.float64)
    scalars = released_from_metrics(record.metrics)  # J(target), J(behaviour), contrast
    width = max(4.5, 1.6 * len(names) + 2.5)
    fig, axes = plt.subplots(1, 2 if scalars else 1, figsize=(width + (5.0 if scalars else 0), 3.6),
                             squeeze=False)
    ax = axes[0][0]
    if scalars:
        plot_policy_values(axes[0][1], scalars, epsilon=record.epsilon)
    label = f"{record.estimator} (released, eps={record.epsilon:g})"
    bounds = record.state_intervals()
    if bounds:
        lo = np.array([bounds[n][0] for n in names])
        hi = np.array([bounds[n][1] for n in names])
        level = f"{100 * record.ci_level:g}% " if record.ci_level else ""
        ax.errorbar(x, values, yerr=[values - lo, hi - values], fmt="o", capsize=6,
                    label=f"{label}, {level}interval")
    else:
        ax.plot(x, values, "o", label=f"{label} (no interval)")
    if record.truth:
        truth = [record.truth.get(n, math.nan) for n in names]
        ax.plot(x, truth, "k_", markersize=22, mew=2, label="true value (public simulator)")
    ax.set_xticks(x, names)
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_ylabel("V(s), raw reward unit")
    ax.set_title(f"{record.dataset} / {record.spec.name}: values at reference states", fontsize=9)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def private_diagnostics(
    spec: EvaluationSpec, theta: np.ndarray, population: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> dict[str, Any]:
    """MSPBE of the released theta and the LSTD fit argmin ||A theta - b|| on the PRIVATE
    statistics (not released)."""
    from gpope.core.metrics import mspbe

    A, b, C = population
    lstd_theta = np.linalg.lstsq(A, b, rcond=None)[0]
    zero = float(mspbe(np.zeros_like(theta), A, b, C))
    released = float(mspbe(theta, A, b, C))
    return {
        "mspbe_released_theta": released,
        "mspbe_zero": zero,
        "relative_mspbe": released / zero if zero > 0 else math.nan,
        "lstd_theta": [float(v) for v in lstd_theta],
        "lstd_values": {
            k: float(v)
            for k, v in zip(spec.reference_names, spec.reference_values(lstd_theta), strict=True)
        },
    }


def _params(record: EvaluationRecord) -> dict[str, Any]:
    spec = record.spec
    params: dict[str, Any] = {
        "dataset": record.dataset,
        "spec": spec.name,
        "spec_id": spec.spec_id, "estimator": record.estimator, "gamma": spec.gamma,
        "reward_scale": spec.reward_scale, "normalization": spec.normalization,
        "length_scale": spec.length_scale, "n_features": spec.n_features,
        "policy": spec.policy_name, "m": record.m, "sigma": record.sigma,
        "accountant": record.accountant, "private": record.private, "seeded": record.seeded,
    }
    params.update(record.params)
    if record.public_cohort is not None:
        params.update(public_trajectories=record.public_cohort.n_trajectories,
                      public_max_length=record.public_cohort.max_length,
                      public_seed=record.public_cohort.seed)
    if record.statistics is not None:
        params["statistics_table"] = _input_name(record.statistics)
    params.pop("seed", None)  # never logged (it would let anyone regenerate plan and noise)
    return params


def _input_name(stats: StatisticsInput) -> str:
    """``<layer>/<dataset>/<table>@v<version>``: the table and the Delta version a run read."""
    return f"{stats.table}@v{stats.version}" if stats.version is not None else stats.table


def _log_input(record: EvaluationRecord) -> None:
    import mlflow
    from mlflow.data.delta_dataset_source import DeltaDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    stats = record.statistics
    if stats is None:
        return
    source = (DeltaDatasetSource(delta_table_name=stats.location,
                                 delta_table_version=stats.version)
              if stats.by_name else
              DeltaDatasetSource(path=stats.location, delta_table_version=stats.version))
    mlflow.log_input(MetaDataset(source, name=_input_name(stats)), context=f"statistics spec_id={stats.spec_id}")


UNBOUNDED_TAG = names.UNBOUNDED
_END_METRICS = ("value_lower", "value_upper", "value_lower_bound")


def unbounded_tags(ends: Mapping[str, tuple[float | None, float | None, float | None]]) -> dict[str, str]:
    """``{"gpope.unbounded.<state>": "value_lower,...", "gpope.unbounded": "s0,s3"}`` for the
    states whose ``(lower, upper, lower_bound)`` has an infinite or NaN end."""
    tags: dict[str, str] = {}
    for state, row in ends.items():
        names = [n for n, v in zip(_END_METRICS, row, strict=True)
                 if v is not None and not math.isfinite(v)]
        if names:
            tags[f"{UNBOUNDED_TAG}.{state}"] = ",".join(names)
    if tags:
        tags[UNBOUNDED_TAG] = ",".join(k[len(UNBOUNDED_TAG) + 1:] for k in tags)
    return tags


def json_end(value: float | None) -> float | str | None:
    """An interval end for a JSON table: a finite number, None, or ``"-inf"``/``"inf"``."""
    if value is None or math.isfinite(value):
        return value
    if math.isnan(value):
        return "nan"
    return "inf" if value > 0 else "-inf"


def _value_rows(record: EvaluationRecord) -> dict[str, list[Any]]:
    from gpope.core.policy_value_direct import value_estimand

    names = list(record.spec.reference_names)
    table: dict[str, list[Any]] = {"state": names, "value": [float(v) for v in record.values]}
    bounds = record.state_intervals()
    if bounds:
        table["lower"] = [json_end(bounds[n][0]) for n in names]
        table["upper"] = [json_end(bounds[n][1]) for n in names]
        table["lower_bound"] = [json_end(bounds[n][2]) for n in names]
        table["ci_level"] = [record.ci_level] * len(names)
    if record.truth:
        table["true_value"] = [record.truth.get(n) for n in names]
    table["estimand"] = [value_estimand(record.spec.feature_map)] * len(names)
    return table


def log_evaluation(
    record: EvaluationRecord, *, tracking_uri: str, experiment: str,
    limits: TrackingSettings | None = None,
) -> TrackingOutcome:
    """Create the evaluation's MLflow run. Called after the release is committed, so it never
    raises an ``Exception``: a tracking failure (or ``limits.timeout_seconds`` passed) comes back
    as ``TrackingOutcome.error`` with how to re-log; ``KeyboardInterrupt`` still propagates."""
    from gpope.config import TrackingSettings
    from gpope.shell.tracking import bounded, http_limits

    limits = limits or TrackingSettings()
    try:
        with http_limits(limits):
            return bounded(lambda: _log_evaluation(record, tracking_uri=tracking_uri,
                                                   experiment=experiment),
                           seconds=limits.timeout_seconds, what="MLflow logging")
    except Exception as exc:  # the release stands; tracking is re-done by `gpope track`
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        return TrackingOutcome(None, tracking_uri, error=reason[:300],
                               failed_line=tracking_failed_line(record.run_id, tracking_uri,
                                                                reason[:300]))


def _log_evaluation(
    record: EvaluationRecord, *, tracking_uri: str, experiment: str
) -> TrackingOutcome:
    import mlflow

    from gpope.core.metrics import mspbe
    from gpope.jsonable import jsonable
    from gpope.shell.tracking import code_version, log_private_diagnostics, start_run

    spec = record.spec
    tags = {
        names.RUN_ID: record.run_id,
        names.STAGE: "evaluate",
        names.DATASET: record.dataset,
        names.SPEC: spec.name,
        names.SPEC_ID: spec.spec_id,
        names.ESTIMATOR: record.estimator,
        names.PRIVATE: str(bool(record.private)).lower(),
        names.SEEDED: str(bool(record.seeded)).lower(),
        names.PRIVACY_NOTE: record.privacy_note,
        names.VALID_BOUND: str(not not_a_valid_bound(record.accountant)).lower(),
        **code_version(),
        **dict(record.tags),
        **unbounded_tags(record.state_intervals()),
    }
    public_mspbe = relative = None
    diagnostics: dict[str, Any] = {}
    private_run_id = None
    with start_run(tracking_uri=tracking_uri, experiment=experiment,
                   run_name=run_name(record), tags=tags) as run:
        mlflow.log_params({k: ("None" if v is None else v) for k, v in _params(record).items()})
        _log_input(record)
        if record.tuning is not None:  # --tune private: DP outputs of the tuning (not diagnostics)
            from gpope.shell.pipeline.private_tune import log_tuning

            log_tuning(dict(record.tuning))
        metrics = {
            names.METRIC_SPENT_EPSILON: float(record.epsilon_certified),
            names.METRIC_SPENT_DELTA: float(record.delta),
            names.METRIC_RESERVED_EPSILON: float(record.epsilon),
        }
        metrics.update({f"value.{k}": v for k, v in record.reference_values.items()})
        for name, (lower, upper, lower_bound) in record.state_intervals().items():
            metrics.update({f"value_lower.{name}": lower, f"value_upper.{name}": upper,
                            f"value_lower_bound.{name}": lower_bound})
        for name, v in (record.truth or {}).items():
            metrics[f"true_value.{name}"] = float(v)
        metrics.update({k: float(v) for k, v in record.metrics.items()})
        if record.public_cohort is not None:
            A, b, C = record.public_cohort.population
            if record.trace_theta is not None and record.trace_steps is not None:
                trace = np.atleast_1d(mspbe(record.trace_theta, A, b, C))
                for step, value in zip(record.trace_steps, trace, strict=True):
                    mlflow.log_metric(names.METRIC_PUBLIC_MSPBE, float(value), step=int(step))
            public_mspbe = float(mspbe(record.theta, A, b, C))
            zero = float(mspbe(np.zeros_like(record.theta), A, b, C))
            metrics.update(public_mspbe_final=public_mspbe, public_mspbe_zero=zero)
            if zero > 0:
                relative = public_mspbe / zero
                metrics[names.METRIC_RELATIVE_MSPBE_PUBLIC] = relative
        mlflow.log_metrics({k: v for k, v in metrics.items() if math.isfinite(v)})
        mlflow.log_dict(
            {
                "run_id": record.run_id,
                "dataset": record.dataset,
                "spec_id": spec.spec_id,
                "theta": [float(v) for v in record.theta],
                "theta_final_iterate": None if record.theta_final is None
                else [float(v) for v in record.theta_final],
                "reference_values": record.reference_values,
                "epsilon": record.epsilon,
                "delta": record.delta,
                "private": bool(record.private),
            },
            "theta.json",
        )
        mlflow.log_dict(_jsonable_mapping(record.config, jsonable), "config.json")
        mlflow.log_dict(spec.to_dict(), "spec.json")
        mlflow.log_dict(_jsonable_mapping(_params(record), jsonable), "options.json")
        if record.spec_text is not None:
            mlflow.log_text(record.spec_text, "spec.yaml")
        if spec.reference_states:
            mlflow.log_table(_value_rows(record), "values.json")
            fig = value_figure(record)
            try:
                mlflow.log_figure(fig, "values.png")
            finally:
                import matplotlib.pyplot as plt

                plt.close(fig)
        if record.private_population is not None:
            diagnostics = private_diagnostics(spec, record.theta, record.private_population)
            flat = {k: diagnostics[k] for k in ("mspbe_released_theta", "mspbe_zero",
                                                "relative_mspbe")}
            flat.update({f"lstd_value.{k}": v for k, v in diagnostics["lstd_values"].items()})
            private_run_id = log_private_diagnostics(
                {k: v for k, v in flat.items() if math.isfinite(v)},
                note="computed WITHOUT noise from the private trajectory statistics (MSPBE of the "
                "released theta, LSTD fixed point): for operators only, never released",
                tags={names.RUN_ID: record.run_id, names.DATASET: record.dataset,
                      names.SPEC: spec.name, names.STAGE: "evaluate.private_diagnostics"},
                artifacts={"lstd.json": {"theta": diagnostics["lstd_theta"],
                                         "values": diagnostics["lstd_values"]}},
            )
        run_id_mlflow = run.info.run_id
    return TrackingOutcome(run_id_mlflow, tracking_uri, public_mspbe, relative, diagnostics,
                           private_run_id)


def _jsonable_mapping(obj: Any, default: Any) -> Any:
    import json

    return json.loads(json.dumps(obj, default=default))

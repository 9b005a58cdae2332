"""What one evaluation reports: :class:`EvaluationReport` (output, ``--json``, the demo), the
record for MLflow (:func:`build_record`) and the interrupt after a committed release. All of it
is public or released, except the private population tracking logs as a tagged diagnostic."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.accounting.registry import not_a_valid_bound
from gpope.shell.pipeline.interval_notes import format_span, unbounded_note

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.accounting.budget import BudgetStatus
    from gpope.core.envs.cohort import PublicCohort
    from gpope.core.estimators import Estimate
    from gpope.core.evaluation.plan import ReleasePlan
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.guard import Diagnostic, UtilityGuard
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.evaluate.inputs import PreparedRun
    from gpope.shell.evaluate.record import EvaluationRecord

__all__ = ["EvaluationReport", "InterruptedAfterRelease", "build_record",
           "interrupted_after_release", "privacy_label", "values_line"]


def privacy_label(*, private: bool, accountant: str, seeded: bool) -> str:
    """The one-line privacy label of a release (used in output, MLflow and tables)."""
    if not_a_valid_bound(accountant):
        return f"NOT PRIVATE: accountant {accountant!r} is not a valid bound"
    if seeded:
        return "NOT PRIVATE: fixed seed"
    return "PRIVATE" if private else "NOT PRIVATE"


class InterruptedAfterRelease(KeyboardInterrupt):
    """Ctrl-C after the release was committed: what was released (do not re-run and pay twice)."""

    def __init__(self, message: str, run_id: str, summary: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.summary = summary


def interrupted_after_release(run_id: str, *, dataset: str, label: str, cut: str,
                              values: str = "") -> InterruptedAfterRelease:
    """The Ctrl-C of a run whose release and charge stand: what ``cut`` cut short and the
    command that finishes it; never an invitation to re-run and pay twice."""
    return InterruptedAfterRelease(
        f"interrupted AFTER the release: run {run_id} of dataset {dataset} WAS RELEASED "
        f"({label}) and its charge stands in the ledger; {cut}. Do not re-run the evaluation "
        f"(that would spend the budget again); finish it with `gpope track --run-id {run_id}` "
        f"(logs it to MLflow from the lake unless a finished MLflow run already holds it).",
        run_id, values)


def values_line(values: Mapping[str, float]) -> str:
    """Released values at the reference states on one line (``V(s) = v; ...``)."""
    return "; ".join(f"V({k}) = {float(v):.6g}" for k, v in values.items())


@dataclass(frozen=True)
class EvaluationReport:
    """What one evaluation released and spent (all of it public or released)."""

    run_id: str
    mlflow_run_id: str | None
    dataset: str
    spec_id: str
    spec_name: str
    policy: str
    epsilon: float
    delta: float
    spent_epsilon: float | None
    accountant: str
    sigma: float
    m: int
    n: int
    iterations: int | None  # the GPOPE solver's; None for the estimators that run none
    sampling: str | None
    batch_rate: float | None
    private: bool
    path: str
    theta: np.ndarray
    reference_values: dict[str, float]
    public_mspbe: float | None
    remaining_epsilon: float
    remaining_delta: float
    public_relative_mspbe: float | None = None
    tables: dict[str, str] = field(default_factory=dict)
    private_diagnostics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    estimator: str = "gpope"
    intervals: dict[str, Any] | None = None
    policy_value: dict[str, dict[str, float]] | None = None  # the three released scalars
    theta_interval: dict[str, Any] | None = None
    private_mspbe: float | None = None
    private_relative_mspbe: float | None = None
    private_relative_mspbe_interval: list[float] | None = None  # the guard's 90% bootstrap [lo, hi]
    statistics_epsilon: float = 0.0
    statistics_sigma: float | None = None
    ssp_clip: float | None = None
    tuning: dict[str, Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    no_better_than_zero: bool = False
    #: is MSPBE(theta) below MSPBE(0)? "ok", "no_better_than_zero" or "unknown".
    utility_guard: str = "unknown"
    warnings: list[str] = field(default_factory=list)
    label: str = "PRIVATE"
    no_further_run: bool = False
    remaining_line: str = ""
    relation: str = "add_or_remove_one"
    #: the run's epsilon under each relation (None where not defined or not computed here).
    relation_epsilons: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self, *, include_private: bool = False) -> dict[str, Any]:
        """Plain form for ``--json``; private diagnostics only with ``include_private``, tagged
        ``diagnostic.private=true``."""
        d = dataclasses.asdict(self)
        d["theta"] = [float(v) for v in self.theta]
        if include_private and self.private_diagnostics:
            d["private_diagnostics"] = {"diagnostic.private": True, **self.private_diagnostics}
        else:
            d.pop("private_diagnostics", None)
        return d

    def relation_line(self) -> str:
        """The neighbouring relation the run is charged under and why it holds with what the run
        publishes (docs/ARCHITECTURE.md, "Neighbouring relation")."""
        said = {"add_or_remove_one": "add/remove-one", "replace_one": "replace-one"}
        line = f"charged under {said.get(self.relation, self.relation)} adjacency, which holds: "
        if self.relation == "add_or_remove_one":
            return line + "m is public only as the noisy count m~"
        return line + "both replace-one neighbours have the same m, which is public"

    def summary(self) -> str:
        """Human-readable lines; the solver's settings only for an estimator that runs it."""
        from gpope.core.estimators import get

        estimator = get(self.estimator)
        solver = estimator.uses_solver
        lines = [
            f"released run {self.run_id} ({self.label}) "
            f"dataset {self.dataset}, spec {self.spec_name} ({self.spec_id})",
            f"  epsilon {self.epsilon:g} (accountant {self.accountant} "
            f"{'claims, NOT a valid bound:' if self.accountant == 'paper' else 'certifies'} "
            f"{self.spent_epsilon if self.spent_epsilon is not None else float('nan'):.4g}), "
            f"delta {self.delta:g}; sigma {self.sigma:.4g}, "
            + (f"m~ {self.m} (released count), " if self.relation == "add_or_remove_one"
               else f"m {self.m}, ")
            + (f"N {self.iterations}, sampling {self.sampling}, " if solver else "")
            + f"statistics {self.path}",
            "  " + self.relation_line(),
            "  " + (self.remaining_line or f"remaining budget: epsilon "
                    f"{self.remaining_epsilon:.6g}, delta {self.remaining_delta:.3g}"),
        ]
        st = self.settings
        if st and solver:  # ssp and the tuning-free default run no solver
            lines.append(
                f"  operating point: {st.get('passes', float('nan')):.3g} passes "
                f"({st.get('touched_trajectories', float('nan')):.3g} trajectories touched), "
                f"q {st.get('batch_rate') if st.get('batch_rate') is not None else 'n/a'}, "
                f"clip {st.get('clip')}, step {st.get('step_size')} ({st.get('step_schedule')}), "
                f"averaging {st.get('averaging')}; from {st.get('origin')}"
            )
        lines.extend(f"  {w}" for w in self.warnings)
        lines.append(f"  estimator {self.estimator}"
                     + (f"; noisy statistics: epsilon {self.statistics_epsilon:.4g}, sigma "
                        f"{self.statistics_sigma:.4g}, clip {self.ssp_clip:.4g}"
                        if self.statistics_sigma is not None else "; no noisy-statistics release"))
        if st and self.intervals:
            lines.append(f"  interval: {estimator.interval_method(st)}")
            if st.get("interval_note"):
                lines.append(f"  NOTE: {st['interval_note']}")
        if self.tuning is not None:
            t = self.tuning
            lines.append(
                f"  tuned privately (inside epsilon): clip {t['clip']:.4g}, step size "
                f"{t['step_size']:.4g} (best of {t['runs']} runs by private MSPBE; private "
                f"relative MSPBE {t['relative_mspbe_private']:.3g})")
        iv = self.intervals
        for i, (name, value) in enumerate(self.reference_values.items()):
            if iv:
                if math.isfinite(iv["lower"][i]) and math.isfinite(iv["upper"][i]):
                    lines.append(
                        f"  V({name}) = {value:.6g}   {100 * iv['level']:g}% interval "
                        f"[{iv['lower'][i]:.4g}, {iv['upper'][i]:.4g}], at least {iv['lower_bound'][i]:.4g}")
                else:
                    lines.append(f"  V({name}) = {value:.6g}   {100 * iv['level']:g}% interval "
                                 f"{format_span(iv['lower'][i], iv['upper'][i])}")
            else:
                lines.append(f"  V({name}) = {value:.6g}")
        note = unbounded_note(iv, estimator=self.estimator)
        if note:
            lines.append(f"  {note}")
        from gpope.shell.evaluate.policy_value import summary_lines

        lines.extend(summary_lines(self.policy_value))
        if self.public_mspbe is not None:
            rel = ("" if self.public_relative_mspbe is None
                   else f" (relative to theta = 0: {self.public_relative_mspbe:.4g})")
            lines.append(f"  MSPBE on public simulated data: {self.public_mspbe:.4g}{rel}")
        if self.private_relative_mspbe is not None:
            lines.append(f"  private MSPBE (noisy statistics): {self.private_mspbe:.4g}, relative "
                         f"{self.private_relative_mspbe:.4g}")
        if self.utility_guard == "ok":
            lines.append("  guard: the released theta's MSPBE is below theta = 0's (it checks "
                         "only that, not the values' accuracy)")
        if self.mlflow_run_id:
            lines.append(f"  MLflow run {self.mlflow_run_id}")
        return "\n".join(lines)


def build_record(
    spark: SparkSession, config: GpopeConfig, *, run_id: str, dataset: str, spec: EvaluationSpec,
    prepared: PreparedRun, est: Estimate, cohort: PublicCohort | None, spec_text: str | None,
    truth: Mapping[str, float] | None, tuning: Mapping[str, Any] | None,
    tags: Mapping[str, str],
) -> EvaluationRecord:
    """The :class:`~gpope.shell.evaluate.record.EvaluationRecord` MLflow tracking reads, built
    once after the release was committed."""
    from gpope.config import to_mapping
    from gpope.core.estimators import get
    from gpope.shell import lake
    from gpope.shell import mlflow_names as names
    from gpope.shell.evaluate import policy_value as pv
    from gpope.shell.evaluate.record import EvaluationRecord, StatisticsInput

    plan, options, result, intervals = prepared.plan, est.settings, est.result, est.intervals
    stats = plan.statistics
    params = get(options.estimator).params(
        options, batch_rate=options.batch_rate, path="memory" if plan.in_memory else "stream",
        statistics=None if stats is None else {
            "statistics_sigma": stats.sigma, "ssp_clip": _statistics_clip(plan, est),
            "statistics_epsilon": stats.epsilon, "statistics_delta": stats.delta,
            "moments_share": options.moments_share, **_private_clip_rule(plan, options)})
    params.update(_chosen(est), relation=plan.relation)  # the relation it is charged under
    if intervals is not None:
        params["ci_level"] = float(intervals.level)
    metrics, clip_tags = _clip_tracking(plan, est)
    metrics.update(pv.mlflow_metrics(est.policy_values))
    if est.private_mspbe is not None:  # post-processing of the run's noisy-statistics release
        metrics |= {names.METRIC_MSPBE_PRIVATE: float(est.private_mspbe[0]),
                   names.METRIC_RELATIVE_MSPBE_PRIVATE: float(est.private_mspbe[1])}
    table = lake.Lake.from_settings(spark, config.lake)
    ref = lake.TableRef("gold", "trajectory_stats", dataset)
    try:
        version: int | None = table.version(ref)
    except Exception:  # lineage is best effort: never fail a committed release over it
        version = None
    statistics = StatisticsInput(table=str(ref), location=table.location(ref), version=version,
                                 spec_id=spec.spec_id, by_name=table.by_name)
    return EvaluationRecord(
        run_id=run_id, dataset=dataset, spec=spec, estimator=options.estimator, params=params,
        epsilon=options.epsilon, delta=options.delta, epsilon_certified=plan.spent_epsilon,
        accountant=plan.accountant, sigma=plan.sigma, m=prepared.m, private=bool(result.private),
        seeded=options.seed is not None, privacy_note=result.privacy_note,
        theta=np.asarray(est.theta, dtype=np.float64),
        values=np.asarray(est.values, dtype=np.float64),
        theta_final=np.asarray(result.theta, dtype=np.float64),
        trace_steps=result.trace_steps, trace_theta=result.trace_theta,
        statistics=statistics, public_cohort=cohort, truth=dict(truth) if truth else None,
        intervals=intervals, ci_level=None if intervals is None else float(intervals.level),
        private_population=est.private_population if options.private_diagnostics else None,
        spec_text=spec_text, config=to_mapping(config),
        metrics=metrics, tags={**clip_tags, **tags},
        tuning=None if tuning is None else dict(tuning),
    )


#: Above this many features the guard skips the private bootstrap (n^3 per draw).
_GUARD_MAX_FEATURES = 512


def _guard(cohort: PublicCohort | None, est: Estimate, *, n: int, seed: int | None,
           spec: EvaluationSpec) -> tuple[UtilityGuard, Diagnostic | None]:
    """The guard's verdict on the released theta (:mod:`gpope.core.guard`): MSPBE on a fresh
    public cohort, and the noisy statistics' MSPBE through its bootstrap interval only."""
    from gpope.core.guard import private_relative_mspbe, utility_guard

    public_rel = None
    if cohort is not None:
        from gpope.core.metrics import relative_mspbe

        try:
            public_rel = float(relative_mspbe(est.theta, *cohort.population))
        except Exception:  # a degenerate public cohort (MSPBE(0) = 0): no public verdict
            public_rel = None
    private_diag = None
    if est.private_mspbe is not None and est.noisy is not None and n <= _GUARD_MAX_FEATURES:
        # each draw costs an n x n eigendecomposition: fewer draws for wide feature maps
        private_diag = private_relative_mspbe(est.theta, est.noisy, np.random.default_rng(seed),
                                              draws=200 if n <= 128 else 40)
    # a released theta of exactly 0 has relative MSPBE exactly 1, whatever the noise
    exact = 1.0 if not np.any(np.asarray(est.theta)) else None
    return (utility_guard({"public": public_rel, "private": private_diag,
                           "the released theta is 0, exact": exact},
                          remedy=guard_remedy(spec)), private_diag)


def guard_remedy(spec: EvaluationSpec) -> str:
    """What helps a release no better than theta = 0: `gpope tune` only for a spec with a
    simulator (``domain``), the only kind it can tune."""
    if spec.domain is not None:
        return ("re-tune the spec on public data (`gpope tune --spec FILE`), raise epsilon or the "
                "number of trajectories")
    return "more trajectories or a larger epsilon help"


def approximation_note(spec: EvaluationSpec) -> str | None:
    """The NOTE of a release on a spec without a simulator whose feature map is not tabular: its
    intervals do not cover the map's approximation error; None otherwise."""
    kind = spec.feature_map.to_dict().get("kind")
    if kind == "state_action":  # the pair fit over a tabular map is the one-hot of (s, a): exact
        kind = spec.feature_map.base.to_dict().get("kind")
    if spec.domain is not None or kind == "tabular":
        return None
    return (f"NOTE: the intervals cover the privacy noise and sampling around the best fit of the "
            f"spec's {kind} feature map ({spec.n_features} features), not that map's "
            "approximation error, which no release measures (docs/OWN_DATA.md, 'Reading the "
            "output')")


def _chosen(est: Estimate) -> dict[str, float]:
    """The settings ``--tune private`` chose (released), recorded in place of the ones it tuned."""
    if est.tuned is None:
        return {}
    return {"clip": est.tuned.config.clip, "step_size": est.tuned.config.step_size}


def _private_clip(plan: ReleasePlan) -> bool:
    """Whether the run's statistics clip is a private release (no public clip)."""
    return plan.statistics_clip is None and plan.statistics is not None


def _statistics_clip(plan: ReleasePlan, est: Estimate) -> float | None:
    """The clip of the run's statistics release, public or released."""
    return float(est.result.clip) if _private_clip(plan) else plan.statistics_clip


def _private_clip_rule(plan: ReleasePlan, settings: RunSettings) -> dict[str, float]:
    """For a run whose clip is a private release, the quantile it read and its histogram's
    share of the privacy loss; else nothing."""
    if plan.private_clip_quantile is not None:
        return {"ssp_clip_quantile": float(plan.private_clip_quantile),
                "ssp_clip_share": float(settings.untuned.quantile_share)}
    return {}


def _clip_tracking(plan: ReleasePlan, est: Estimate) -> tuple[dict[str, float], dict[str, str]]:
    """MLflow metrics and tags of the clip the run's statistics release used: its value, and for
    a private one the quantile it was read at."""
    from gpope.shell import mlflow_names as names

    clip = _statistics_clip(plan, est) if plan.statistics is not None else None
    if clip is None:
        return {}, {}
    metrics = {names.METRIC_SSP_CLIP_USED: float(clip)}
    if not _private_clip(plan):
        return metrics, {names.SSP_CLIP_SOURCE: "public"}
    from gpope.core.estimators import get

    quantile = get(plan.estimator).clip_quantile(plan, est.settings)
    metrics[names.METRIC_SSP_CLIP_QUANTILE_USED] = float(quantile)
    return metrics, {names.SSP_CLIP_SOURCE: "private"}


def track_and_report(
    spark: SparkSession, config: GpopeConfig, *, run_id: str, dataset: str,
    spec: EvaluationSpec, prepared: PreparedRun, est: Estimate, label: str, budget: BudgetStatus,
    ledger_location: str,
    tracking_uri: str | None, spec_text: str | None, truth: Mapping[str, float] | None,
    start: float,
) -> EvaluationReport:
    """After a committed release: the MLflow record and its logging (a tracking failure never
    undoes the release), and the run's report."""
    from gpope.core.envs.cohort import public_cohort
    from gpope.core.estimators import get
    from gpope.shell import lake
    from gpope.shell.evaluate.policy_value import as_report
    from gpope.shell.evaluate.record import log_evaluation
    from gpope.shell.mlflow_names import GUARD, INTERVAL_NOTE, OUTSIDE_TUNED, STALE_STATS
    from gpope.shell.pipeline.release import policy_label
    from gpope.shell.tracking import resolve_tracking_uri

    plan, s, m, n = prepared.plan, est.settings, prepared.m, spec.n_features
    stats = plan.statistics
    tuning = None
    if est.tuned is not None:
        from gpope.shell.pipeline.private_tune import tuning_summary

        tuning = tuning_summary(est.tuned)
    cohort = public_cohort(spec, n_trajectories=s.public_trajectories,
                           max_length=s.public_max_length)
    guard, private_diag = _guard(cohort, est, n=n, seed=s.seed, spec=spec)
    stale = prepared.provenance.get("stale_stats")  # released with --allow-stale-stats
    tags = {GUARD: guard.verdict, STALE_STATS: str(stale is not None).lower()}
    iv_note = unbounded_note(None if est.intervals is None else est.intervals.to_dict(),
                             estimator=s.estimator)
    if iv_note:  # why a released interval is unbounded, one line (MLflow has no -inf metric)
        tags[INTERVAL_NOTE] = iv_note
    outside = None
    if spec.evaluation is not None:
        outside = spec.evaluation.outside_tuned(m, s.epsilon,
                                                max_length=prepared.recorded_max_length)
        if spec.evaluation.tuned:
            tags[OUTSIDE_TUNED] = str(bool(outside)).lower()
    record = build_record(spark, config, run_id=run_id, dataset=dataset, spec=spec,
                          prepared=prepared, est=est, cohort=cohort, spec_text=spec_text,
                          truth=truth, tuning=tuning, tags=tags)
    try:
        tracking = log_evaluation(
            record, tracking_uri=resolve_tracking_uri(tracking_uri, config.tracking.uri,
                                                      config.lake.root),
            experiment=config.tracking.experiment, limits=config.tracking)
    except KeyboardInterrupt as exc:
        raise interrupted_after_release(run_id, dataset=dataset, label=label,
                                        cut="MLflow logging was cut short") from exc
    warnings = [guard.message] if guard.message else []
    if stale is not None:
        warnings.insert(0, stale)
    if tracking.failed_line:  # the release stands; say so and how to re-log, never to re-run
        warnings.insert(0, tracking.failed_line)
    if outside:
        warnings.append(outside)
    estimator = get(s.estimator)
    warnings.extend(estimator.notes(spec, plan, prepared.provenance))
    warnings.extend(n for c in plan.auxiliary for n in c.notes())
    iv, tiv, pm = est.intervals, est.theta_interval, est.private_mspbe
    if iv is not None and (note := approximation_note(spec)):
        warnings.append(note)
    spent = plan.spent_epsilon
    solver = estimator.uses_solver
    return EvaluationReport(
        run_id=run_id, mlflow_run_id=tracking.mlflow_run_id, dataset=dataset,
        spec_id=spec.spec_id, spec_name=spec.name, policy=policy_label(spec),
        epsilon=s.epsilon, delta=s.delta, spent_epsilon=spent if math.isfinite(spent) else None,
        accountant=plan.accountant, sigma=plan.sigma, m=m, n=n,
        iterations=s.iterations if solver else None, sampling=s.sampling if solver else None,
        batch_rate=s.batch_rate if solver else None,
        private=bool(est.result.private),
        path="memory" if plan.in_memory else "stream",
        theta=np.asarray(est.theta, dtype=np.float64),
        reference_values={k: float(v) for k, v in zip(spec.reference_names, est.values,
                                                      strict=True)},
        public_mspbe=tracking.public_mspbe, public_relative_mspbe=tracking.public_relative_mspbe,
        remaining_epsilon=budget.remaining_epsilon, remaining_delta=budget.remaining_delta,
        tables={
            "trajectory_stats": str(lake.table_location(config.lake, "gold", dataset,
                                                        "trajectory_stats")),
            "released_estimates": str(lake.shared_table_location(config.lake,
                                                                 "released_estimates")),
            "released_values": str(lake.shared_table_location(config.lake, "released_values")),
            "privacy_ledger": ledger_location,
        },
        private_diagnostics=tracking.private_diagnostics, seconds=time.perf_counter() - start, estimator=s.estimator,
        intervals=iv.to_dict() if iv is not None else None,
        policy_value=as_report(est.policy_values),
        theta_interval=tiv.to_dict() if tiv is not None else None,
        private_mspbe=pm[0] if pm else None, private_relative_mspbe=pm[1] if pm else None,
        statistics_epsilon=0.0 if stats is None else float(stats.epsilon),
        statistics_sigma=None if stats is None else float(stats.sigma),
        ssp_clip=_statistics_clip(plan, est), tuning=tuning,
        settings={**estimator.summary(s, prepared.provenance, accountant=plan.accountant),
                  **_private_clip_rule(plan, s), **_chosen(est)},
        no_better_than_zero=guard.no_better_than_zero, utility_guard=guard.verdict,
        private_relative_mspbe_interval=None if private_diag is None
        else [private_diag.lower, private_diag.upper],
        warnings=warnings, label=label, no_further_run=budget.no_further_run,
        remaining_line=budget.remaining_line(), relation=plan.relation,
        relation_epsilons=plan.relation_epsilons())

"""Stage 4 of the pipeline: a differentially private evaluation of one spec on one dataset.

Order of operations (docs/ARCHITECTURE.md sections 3-4):

a. **Public inputs only.** m (the number of trajectories with statistics for the spec) is read
   from the gold table: it is public by definition (docs/ARCHITECTURE.md 4). Everything else (iterations,
   clip, step sizes, sampling, batch rate, epsilon, delta) comes from the command line and the
   configuration. The Poisson rate defaults to q = 1/m. sigma is calibrated by the accountant for
   (epsilon, delta, m, N, sampling). Nothing else is computed from the private tables.
   Refused before anything is read: the ``paper`` accountant (not a valid bound) unless
   ``allow_invalid_accounting``; a ``seed`` on a dataset not produced by ``gpope simulate``
   unless ``allow_not_private``; ``delta >= 1/m`` (a warning above ``1/(10 m)``).
b. **Reserve** the run's spend and its dp-accounting event in the privacy ledger (runs composed
   tightly by an RDP filter); a run that would exceed the dataset's budget stops with
   BudgetExceededError having written nothing (:mod:`gpope.shell.pipeline.ledger`). Stale
   reservations of killed runs are settled first. A ``paper`` run is charged a rigorous RDP bound
   of its mechanism and recorded as not a valid bound.
c. **Sample plan** on the driver from OS entropy, or from ``seed`` (then the run is marked NOT
   private in released_estimates and MLflow; the seed itself is never persisted). The plan is
   never logged or written.
d. **Statistics in sampled order**: in memory (all m rows) when their dense size, or else their
   nonzero entries (sparse layout, e.g. tabular specs), fit ``evaluation.in_memory_limit_mb``;
   otherwise fetched block by block through a Spark join of the plan with the statistics table
   (:mod:`gpope.shell.pipeline.sampled`).
e. **Solve**: in memory, the core's :func:`~gpope.core.gpope.run_gpope`; streamed, the driver loop
   :func:`~gpope.shell.pipeline.driver.run_gpope_streamed`, which consumes the same random streams
   and gives the same theta.
f. **Release** one row of released_estimates (theta and values at the spec's reference states) in
   one atomic append, then mark the reservation released. If anything fails after the
   reservation, the reservation is marked ``failed`` and stays counted (noise may have been drawn
   and the data touched: privacy spent is spent); no partial release is written.
g. **MLflow**: one run with params, metrics (spent epsilon/delta; MSPBE per traced step and final
   only on PUBLIC evaluation data, i.e. a fresh cohort from the simulator of a simulated dataset),
   artifacts (theta JSON, value plot, resolved config and spec) and, only when asked, private
   diagnostics (MSPBE and LSTD on the private statistics) tagged ``diagnostic.private=true``.

This module runs the stages in that order (:func:`run_evaluate`); the parts live beside it, one
concept each: the options and their resolution (:mod:`~gpope.shell.pipeline.evaluate_options`),
the estimator step (:mod:`~gpope.shell.pipeline.evaluate_solve`), the noisy-statistics release
and its intervals (:mod:`~gpope.shell.pipeline.evaluate_intervals`), the release tables
(:mod:`~gpope.shell.pipeline.release`), the report and the MLflow record
(:mod:`~gpope.shell.pipeline.evaluate_report`, logged by
:mod:`~gpope.shell.pipeline.evaluate_mlflow`). Their public names are re-exported here.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np

from gpope.errors import ConfigError
from gpope.shell.pipeline.evaluate_intervals import (
    noisy_statistics,
    release_intervals,
    statistics_clip,
)
from gpope.shell.pipeline.evaluate_options import (
    INVALID_ACCOUNTING_REFUSAL,
    EvaluateOptions,
    check_delta_against_m,
    check_seed_allowed,
)
from gpope.shell.pipeline.evaluate_report import (
    IDENTIFICATION_NOTE,
    NOT_A_VALID_BOUND,
    UNBOUNDED_NOTE,
    EvaluationReport,
    InterruptedAfterRelease,
    build_record,
    format_span,
    privacy_label,
    unbounded_note,
)
from gpope.shell.pipeline.evaluate_solve import (
    patient_groups,
    solve,
    solve_groups,
    solver_config,
    spark_population,
    ssp_result,
)
from gpope.shell.pipeline.release import policy_label

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = [
    "IDENTIFICATION_NOTE",
    "INTERVAL_NOTE_TAG",
    "INVALID_ACCOUNTING_REFUSAL",
    "NOT_A_VALID_BOUND",
    "OUTSIDE_TUNED_TAG",
    "UNBOUNDED_NOTE",
    "EvaluateOptions",
    "EvaluationReport",
    "InterruptedAfterRelease",
    "check_delta_against_m",
    "format_span",
    "policy_label",
    "privacy_label",
    "run_evaluate",
    "unbounded_note",
]

#: MLflow tag: why some released interval is unbounded (one line; absent when all are finite).
INTERVAL_NOTE_TAG = "gpope.interval_note"

#: MLflow tag: "true" when the run's (m, epsilon, episode cap) lie outside what the spec's
#: evaluation: block was tuned for (issue 15 section 4).
OUTSIDE_TUNED_TAG = "gpope.outside_tuned_range"


def _outside_tuned(spec: EvaluationSpec, *, m: int, epsilon: float,
                   max_length: int | None) -> str | None:
    """The warning when this run lies outside what the spec was tuned for (public inputs only:
    m, epsilon and, for a simulated dataset, its recorded episode cap ``max_length``)."""
    if spec.evaluation is None:
        return None
    return spec.evaluation.outside_tuned(m, epsilon, max_length=max_length)


def _simulated_max_length(config: GpopeConfig, dataset: str) -> int | None:
    """The episode cap recorded by ``gpope simulate`` for ``dataset`` (public), or None."""
    from gpope.shell.pipeline.simulate import read_simulation_record

    try:
        record = read_simulation_record(config, dataset)
    except Exception:  # the record is a convenience: never fail a run over it
        record = None
    return int(record["max_length"]) if record and record.get("max_length") is not None else None


#: Above this many features the guard skips the private diagnostic's bootstrap (its cost grows as
#: n^3 per draw) and decides on the public diagnostic alone.
_GUARD_MAX_FEATURES = 512


def run_evaluate(
    spark: SparkSession,
    config: GpopeConfig,
    *,
    dataset: str,
    spec: EvaluationSpec,
    options: EvaluateOptions,
    tracking_uri: str | None = None,
    spec_text: str | None = None,
    truth: Mapping[str, float] | None = None,
) -> EvaluationReport:
    """One private evaluation: ledger, released_estimates, MLflow (see the module docstring).

    Args:
        spark: the session.
        config: the configuration (lake, tracking, privacy defaults).
        dataset: the dataset evaluated.
        spec: the evaluation spec (its statistics must exist: ``gpope stats``).
        options: public settings of the run.
        tracking_uri: MLflow URI (None: by the precedence of :mod:`gpope.shell.tracking`).
        spec_text: the spec file's text, logged as an artifact when given.
        truth: true values at the reference states from the public simulator (simulated data
            only), shown beside the released values in MLflow.

    Raises:
        BudgetExceededError: the reservation would exceed the dataset's budget (nothing written).
        DataError: no statistics for the spec.
        ConfigError, AccountingError: invalid public settings (before anything is written).
    """
    from gpope.shell.pipeline.ledger import PrivacyLedger
    from gpope.shell.pipeline.release import release_row, value_rows, write_release
    from gpope.shell.pipeline.stats import (
        read_statistics,
        statistics_version,
        trajectory_count,
    )

    start = time.perf_counter()
    # (a) public inputs and calibration: nothing written yet.
    if options.accountant == "paper" and not options.allow_invalid_accounting:
        raise ConfigError(INVALID_ACCOUNTING_REFUSAL)  # options built by hand without the check
    seeded = options.seed is not None
    if seeded and not options.allow_not_private:
        check_seed_allowed(config, dataset)
    # m and the statistics come from one pinned version of trajectory_stats (issue 12.7): a
    # concurrent `gpope stats` cannot make the count and the rows disagree.
    stats_version = statistics_version(spark, config, dataset=dataset)
    m = trajectory_count(spark, config, dataset=dataset, spec=spec, version=stats_version)
    check_delta_against_m(options.delta, m)
    n = spec.n_features
    # command line > the spec's evaluation: block (tuned on public data) > conf evaluation:
    options, settings_info = options.resolve(m=m, spec=spec, settings=config.evaluation)
    # read once: it sets the public cohort's episode cap and the outside-tuned-range check below
    recorded_max_length = _simulated_max_length(config, dataset)
    if options.public_max_length is None:
        # the public cohort (SSP clip, residual bound, public MSPBE) has the episode cap the
        # simulated dataset recorded: a clip from 200-decision HIV episodes is about 5x too large
        # for the demo's 40-decision ones and buried every feature of the noisy statistics
        options = dataclasses.replace(options, public_max_length=recorded_max_length)
    q = options.batch_rate
    ssp_run = options.estimator == "ssp"
    ssp_clip = statistics_clip(spec, options, required=ssp_run)
    from gpope.core.evaluation import plan_loading, plan_release
    from gpope.core.evaluation.loading import is_one_hot

    # dense rows in memory when they fit evaluation.in_memory_limit_mb, else streamed: decided
    # from the public m and n only
    layout = plan_loading(m=m, n=n, path=options.path, limit_mb=options.in_memory_limit_mb,
                          one_hot=is_one_hot(spec.feature_map))
    plan = plan_release(
        options, m=m, spec=spec, layout=layout, statistics_clip=ssp_clip,
        groups_explicit=settings_info["source"].get("interval_groups") == "options",
        private_tuning=config.evaluation.private_tuning.to_core()
        if options.tune == "private" and not ssp_run else None)
    if plan.interval_note:
        settings_info["interval_note"] = plan.interval_note
    if not ssp_run and options.interval_groups != plan.interval_groups:
        options = dataclasses.replace(options, interval_groups=plan.interval_groups)
    in_memory = plan.in_memory
    stats_df = read_statistics(
        spark, config, dataset=dataset, spec_id=spec.spec_id, version=stats_version
    )
    from gpope.shell.pipeline import evaluate_policy_value as pv

    pv.check_policy_terms(stats_df, plan)
    groups = None  # --interval-groups: the group (0..K-1) of each traj_index, public hash
    if plan.interval_groups:
        groups = patient_groups(spark, config, dataset=dataset, m=m, groups=plan.interval_groups)
    tuning = plan.tuning
    accountant = plan.accountant
    sigma, spent = plan.sigma, plan.spent_epsilon
    stats_part = plan.statistics
    sigma_s = None if stats_part is None else stats_part.sigma
    stats_eps = 0.0 if stats_part is None else stats_part.epsilon
    stats_delta = 0.0 if stats_part is None else stats_part.delta
    solver = None
    if not ssp_run:
        trace_every = options.trace_every or max(1, options.iterations // 20)
        solver = solver_config(options, sigma=sigma, batch_rate=q, trace_every=trace_every,
                                delta=plan.gpope_delta)
    event, relation, valid_bound = plan.event, plan.relation, plan.valid_bound

    # (b) reserve.
    from gpope.shell import faults

    ledger = PrivacyLedger(spark, config)
    run_id = uuid.uuid4().hex
    ledger.reserve(
        dataset, run_id=run_id, epsilon=options.epsilon, delta=options.delta,
        accountant=accountant, event=event, relation=relation,
        label=plan.label, charged_epsilon=plan.charged_epsilon, valid_bound=valid_bound,
        note=plan.ledger_note,
    )
    faults.point("evaluate.after_reserve")
    released = False
    try:
        # (c)-(e) noisy statistics (Spark aggregate + one Gaussian draw), then the estimator.
        noisy = moments = None
        tuned = None
        if sigma_s is not None:
            from gpope.shell.pipeline.ssp import statistics_files

            # delta-rs storage: the same pinned rows as the version's files, read by the workers
            files = statistics_files(spark, config, dataset=dataset, spec_id=spec.spec_id,
                                     version=stats_version)
            noisy, moments = noisy_statistics(stats_df if files is None else files, options, spec,
                                               n=n, m=m, sigma=float(sigma_s), clip=float(ssp_clip))
        private_pop = None
        group_thetas = None
        if ssp_run:
            result = ssp_result(noisy, options, spec, accountant=accountant, spent=spent)
            if options.private_diagnostics:
                private_pop = spark_population(stats_df, n, m)
        elif groups is not None:
            result, group_thetas, private_pop = solve_groups(
                spark, stats_df, spec, solver, options, groups=groups, n=n, spent=spent,
                layout=layout)
        else:
            result, private_pop, tuned = solve(
                spark, stats_df, spec, solver, options, m=m, n=n, sigma=sigma, spent=spent,
                accountant=accountant, in_memory=in_memory, layout=layout, tuning=tuning)
            if tuned is not None:  # the chosen (DP) settings are what this run used
                options = dataclasses.replace(options, clip=tuned.config.clip,
                                              step_size=tuned.config.step_size)
        if not valid_bound:
            result = dataclasses.replace(result, private=False, privacy_note=NOT_A_VALID_BOUND)
        label = privacy_label(private=result.private, accountant=accountant, seeded=seeded)
        released_theta = result.theta_avg if result.theta_avg is not None else result.theta
        values = spec.reference_values(released_theta)
        intervals, theta_iv, priv_mspbe = release_intervals(
            noisy, moments, spec, released_theta, values, options=options, ssp_run=ssp_run,
            group_thetas=group_thetas)
        if priv_mspbe is None and tuned is not None:
            # no separate release: the tuning's noisy statistics give it (post-processing)
            from gpope.core.ssp import private_mspbe

            priv_mspbe = private_mspbe(released_theta, tuned.noisy)
        # (f) release, then mark released.
        created = datetime.now(UTC).replace(tzinfo=None)
        row = release_row(
            run_id=run_id, dataset=dataset, spec=spec, policy=policy_label(spec),
            epsilon=options.epsilon, delta=options.delta, accountant=accountant,
            created_at=created, theta=released_theta, values=values, private=result.private,
            estimator=options.estimator,
        )
        policy_values = pv.release_policy_values(stats_df, spec, plan, level=options.ci_level,
                                                 seed=options.seed)
        write_release(spark, config, row, value_rows(row, spec_name=spec.name, interval=intervals)
                      + pv.policy_value_rows(row, spec_name=spec.name, released=policy_values))
        released = True
        faults.point("evaluate.after_release")
        ledger.mark(dataset, run_id, "released")
    except KeyboardInterrupt as exc:
        if not released:
            ledger.mark(dataset, run_id, "failed")
            raise
        ledger.mark(dataset, run_id, "released")
        summary = "; ".join(f"V({k}) = {float(v):.6g}"
                            for k, v in zip(spec.reference_names, values, strict=True))
        raise InterruptedAfterRelease(
            f"interrupted AFTER the release: run {run_id} of dataset {dataset} was released "
            f"({label}; epsilon {options.epsilon:g}, delta {options.delta:g} charged) and "
            f"recorded in the ledger; MLflow logging was skipped. Do not re-run it (that would "
            f"spend the budget again); re-log it to MLflow with `gpope track --run-id {run_id}`.",
            run_id, summary,
        ) from exc
    except BaseException:
        if not released:
            ledger.mark(dataset, run_id, "failed")
        raise
    budget = ledger.status(dataset)

    tuning_summary = None
    if tuned is not None:
        from gpope.shell.pipeline.private_tune import tuning_summary as summarize_tuning

        tuning_summary = summarize_tuning(tuned)

    # (g) MLflow (after the release: tracking problems never undo a release).
    from gpope.shell.pipeline.evaluate_mlflow import log_evaluation
    from gpope.shell.tracking import resolve_tracking_uri

    record = build_record(
        spark, config, run_id=run_id, dataset=dataset, spec=spec, options=options, result=result,
        released_theta=released_theta, values=values, m=m, sigma=sigma, spent=spent,
        accountant=accountant, batch_rate=q, path="memory" if in_memory else "stream",
        spec_text=spec_text, private_population=private_pop if options.private_diagnostics
        else None, truth=truth, intervals=intervals, private_mspbe=priv_mspbe,
        ssp={"statistics_sigma": sigma_s, "ssp_clip": ssp_clip, "statistics_epsilon": stats_eps,
             "statistics_delta": stats_delta, "moments_share": options.moments_share}
        if sigma_s is not None else None, tuning=tuning_summary,
    )
    record = dataclasses.replace(record, metrics={**dict(record.metrics),
                                                  **pv.mlflow_metrics(policy_values)})
    # the loud guard: public (fresh simulated cohort) and private (noisy statistics) diagnostics
    from gpope.core.guard import GUARD_TAG, private_relative_mspbe, utility_guard

    public_rel = None
    if record.public_cohort is not None:
        from gpope.core.metrics import relative_mspbe

        try:
            public_rel = float(relative_mspbe(released_theta, *record.public_cohort.population))
        except Exception:  # a degenerate public cohort (MSPBE(0) = 0): no public verdict
            public_rel = None
    # the private one is noisy: it counts only through its bootstrap interval (gpope.core.guard)
    guard_noisy = noisy if noisy is not None else getattr(tuned, "noisy", None)
    private_diag = None
    if priv_mspbe is not None and guard_noisy is not None and n <= _GUARD_MAX_FEATURES:
        # each draw costs an n x n eigendecomposition: fewer draws for wide feature maps
        private_diag = private_relative_mspbe(released_theta, guard_noisy,
                                              np.random.default_rng(options.seed),
                                              draws=200 if n <= 128 else 40)
    guard = utility_guard({"public": public_rel, "private": private_diag})
    record = dataclasses.replace(record, tags={**dict(record.tags), GUARD_TAG: guard.verdict})
    iv_note = unbounded_note(None if intervals is None else intervals.to_dict())
    if iv_note:  # why a released interval is unbounded, one line (MLflow has no -inf metric)
        record = dataclasses.replace(record, tags={**dict(record.tags), INTERVAL_NOTE_TAG: iv_note})
    outside = _outside_tuned(spec, m=m, epsilon=options.epsilon, max_length=recorded_max_length)
    if spec.evaluation is not None and spec.evaluation.tuned:
        record = dataclasses.replace(record, tags={**dict(record.tags),
                                                   OUTSIDE_TUNED_TAG: str(bool(outside)).lower()})
    try:
        tracking = log_evaluation(
            record, tracking_uri=resolve_tracking_uri(tracking_uri, config.tracking.uri,
                                                      config.lake.root),
            experiment=config.tracking.experiment,
        )
    except KeyboardInterrupt as exc:
        raise InterruptedAfterRelease(
            f"interrupted AFTER the release: run {run_id} of dataset {dataset} was released "
            f"({label}) and recorded in the ledger; MLflow logging was cut short. Do not re-run "
            f"it; re-log it to MLflow with `gpope track --run-id {run_id}`.", run_id, "",
        ) from exc
    from gpope.shell import lake

    warnings = [guard.message] if guard.message else []
    if tracking.failed_line:  # the release stands; say so and how to re-log, never to re-run
        warnings.insert(0, tracking.failed_line)
    if outside:
        warnings.append(outside)
    if not settings_info["spec_has_evaluation_block"]:
        warnings.append(
            f"NOTE: spec {spec.name!r} has no evaluation: block, so the generic conf settings "
            "were used; tune it on public data with `gpope tune --spec FILE`."
        )
    settings = {
        "passes": options.passes, "iterations": options.iterations, "batch_rate": q,
        "batch_size": options.batch_size, "clip": options.clip, "step_size": options.step_size,
        "step_schedule": options.step_schedule, "step_offset": options.step_offset,
        "averaging": options.averaging, "tail_fraction": options.tail_fraction,
        "sampling": options.sampling, "accountant": accountant,
        "touched_trajectories": settings_info["touched_trajectories"],
        "source": settings_info["source"], "tuned_point": settings_info["tuned_point"],
        "tuning": settings_info["tuning"],
        "ssp_clip_quantile": options.ssp_clip_quantile,
        "interval_groups": 0 if options.estimator == "ssp" else options.interval_groups,
        "interval_note": settings_info["interval_note"],
        "origin": ("spec evaluation: block" if settings_info["spec_has_evaluation_block"]
                   else "conf evaluation: (generic)")
        + (" + command line" if "options" in settings_info["source"].values() else ""),
    }

    return EvaluationReport(
        run_id=run_id,
        mlflow_run_id=tracking.mlflow_run_id,
        dataset=dataset,
        spec_id=spec.spec_id,
        spec_name=spec.name,
        policy=policy_label(spec),
        epsilon=options.epsilon,
        delta=options.delta,
        spent_epsilon=spent if math.isfinite(spent) else None,
        accountant=accountant,
        sigma=sigma,
        m=m,
        n=n,
        iterations=options.iterations,
        sampling=options.sampling,
        batch_rate=q,
        private=bool(result.private),
        path="memory" if in_memory else "stream",
        theta=np.asarray(released_theta, dtype=np.float64),
        reference_values={k: float(v) for k, v in zip(spec.reference_names, values, strict=True)},
        public_mspbe=tracking.public_mspbe,
        public_relative_mspbe=tracking.public_relative_mspbe,
        remaining_epsilon=budget.remaining_epsilon,
        remaining_delta=budget.remaining_delta,
        tables={
            "trajectory_stats": str(lake.table_location(config.lake, "gold", dataset, "trajectory_stats")),
            "released_estimates": str(lake.shared_table_location(config.lake, "released_estimates")),
            "released_values": str(lake.shared_table_location(config.lake, "released_values")),
            "privacy_ledger": ledger.location,
        },
        private_diagnostics=tracking.private_diagnostics,
        seconds=time.perf_counter() - start,
        estimator=options.estimator,
        intervals=intervals.to_dict() if intervals is not None else None,
        policy_value=pv.as_report(policy_values),
        theta_interval=theta_iv.to_dict() if theta_iv is not None else None,
        private_mspbe=priv_mspbe[0] if priv_mspbe else None,
        private_relative_mspbe=priv_mspbe[1] if priv_mspbe else None,
        statistics_epsilon=float(stats_eps),
        statistics_sigma=None if sigma_s is None else float(sigma_s),
        ssp_clip=ssp_clip,
        tuning=tuning_summary,
        settings=settings,
        no_better_than_zero=guard.no_better_than_zero,
        utility_guard=guard.verdict,
        private_relative_mspbe_interval=None if private_diag is None
        else [private_diag.lower, private_diag.upper],
        warnings=warnings,
        label=label,
        no_further_run=budget.no_further_run,
        remaining_line=budget.remaining_line(),
    )


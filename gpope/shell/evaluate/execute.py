"""Executing a release plan on the private statistics (:func:`estimate`), and the executions of
GPOPE, SSP and the tuning-free default that the estimators' registry entries name. Noise is
drawn here or in the solver it calls, never elsewhere, at the multipliers the plan fixed; values
and intervals are post-processing, clamped into the range the spec's public bounds imply.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpope.core.estimators import Estimate
from gpope.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.estimators import RunSource
    from gpope.core.evaluation.plan import ReleasePlan
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.gpope.solver import GPOPEConfig, GPOPEResult
    from gpope.core.intervals import Interval
    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import NoisyMoments, NoisyStatistics
    from gpope.core.tuning.private import (
        PrivateTuningPlan,
        PrivateTuningResult,
        PrivateTuningSettings,
    )
    from gpope.shell.pipeline.ssp import StatisticsFiles

    #: The population (A, b, C) of the PRIVATE statistics (operators' diagnostics only).
    Population = tuple[np.ndarray, np.ndarray, np.ndarray]

__all__ = ["SparkStatistics", "estimate", "execute_gpope", "execute_ssp", "execute_untuned",
           "patient_groups", "solve", "solve_groups", "solver_config", "spark_population",
           "ssp_result"]


@dataclass(frozen=True, kw_only=True)
class SparkStatistics:
    """One pinned version of trajectory_stats as a
    :class:`gpope.core.estimators.StatisticsSource`. ``m`` is the exact number of rows,
    checked by aggregates and never released (released numbers use the plan's public m)."""

    spark: SparkSession
    config: GpopeConfig
    dataset: str
    spec: EvaluationSpec
    rows: DataFrame
    version: int
    m: int

    @property
    def n(self) -> int:
        return int(self.spec.n_features)

    @functools.cached_property
    def summable(self) -> DataFrame | StatisticsFiles:
        """What Spark aggregates sum: the version's files, else the DataFrame."""
        from gpope.shell.pipeline.ssp import statistics_files

        files = statistics_files(self.spark, self.config, dataset=self.dataset,
                                 spec_id=self.spec.spec_id, version=self.version)
        return self.rows if files is None else files

    def aggregate(self, kernel: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  width: int) -> np.ndarray:
        """``(width,)`` total of ``kernel`` over every row block; checks it summed m rows."""
        from gpope.shell.pipeline.ssp import _aggregate

        return _aggregate(self.summable, self.n, kernel, 1, width, self.m)[0]

    def population(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The PRIVATE population (A, b, C): operators' tagged diagnostics only."""
        return spark_population(self.rows, self.n, self.m)


def estimate(spark: SparkSession, config: GpopeConfig, *, dataset: str, spec: EvaluationSpec,
             plan: ReleasePlan, settings: RunSettings, stats_df: DataFrame, stats_version: int,
             rows: int | None = None) -> Estimate:
    """Execute ``plan`` on one pinned version of the statistics: the auxiliary releases before
    the estimator's, its execution, the auxiliary releases after it; a release whose accountant
    is not a valid bound is marked not private. ``rows``: the exact (unreleased) m."""
    from gpope.core.estimators import RunSource, execute
    from gpope.shell.evaluate.report import privacy_label

    source = SparkStatistics(spark=spark, config=config, dataset=dataset, spec=spec,
                             rows=stats_df, version=stats_version,
                             m=plan.m if rows is None else int(rows))
    run = RunSource(base=source, clip=plan.statistics_clip)
    for component in plan.auxiliary:
        run = component.prepare(run, plan=plan, settings=settings, spec=spec)
    est = execute(plan.estimator, run, plan=plan, settings=settings, spec=spec)
    if not plan.valid_bound:
        est = dataclasses.replace(est, result=dataclasses.replace(
            est.result, private=False, privacy_note=privacy_label(
                private=False, accountant=plan.accountant, seeded=False)))
    for component in plan.auxiliary:
        est = component.finish(run, est, plan=plan, settings=settings, spec=spec)
    return est


def _released(spec: EvaluationSpec, settings: RunSettings, result: GPOPEResult,
              noisy: NoisyStatistics | None, moments: NoisyMoments | None, *, bootstrap: bool,
              group_thetas: np.ndarray | None = None, tuned: PrivateTuningResult | None = None,
              population: Population | None = None) -> Estimate:
    """The values and intervals of ``result`` (post-processing), clamped into the spec's public
    range; ``bootstrap``: the interval is the noisy statistics' own, else anchored at theta."""
    from gpope.shell.evaluate.intervals import release_intervals

    theta = result.theta_avg if result.theta_avg is not None else result.theta
    values = spec.reference_values(theta)
    intervals, theta_iv, priv_mspbe = release_intervals(
        noisy, moments, spec, theta, values, options=settings, ssp_run=bootstrap,
        group_thetas=group_thetas)
    values, intervals = _in_public_range(spec, values, intervals)
    if priv_mspbe is None and tuned is not None:
        # no separate release: the tuning's noisy statistics give it (post-processing)
        from gpope.core.ssp import private_mspbe

        priv_mspbe = private_mspbe(theta, tuned.noisy)
    return Estimate(result=result, theta=theta, values=values, intervals=intervals,
                    theta_interval=theta_iv, private_mspbe=priv_mspbe,
                    noisy=noisy if noisy is not None else getattr(tuned, "noisy", None),
                    tuned=tuned, settings=settings, private_population=population)


def execute_ssp(run: RunSource, *, plan: ReleasePlan, settings: RunSettings,
                spec: EvaluationSpec) -> Estimate:
    """SSP's execution: its release IS the noisy statistics, solved."""
    from gpope.shell.evaluate.intervals import noisy_statistics_of

    noisy, moments = noisy_statistics_of(run, settings, spec, sigma=plan.main.sigma, m=plan.m)
    result = ssp_result(noisy, settings, spec, accountant=plan.accountant,
                        spent=plan.spent_epsilon)
    population = run.base.population() if settings.private_diagnostics else None
    return _released(spec, settings, result, noisy, moments, bootstrap=True,
                     population=population)


def execute_gpope(run: RunSource, *, plan: ReleasePlan, settings: RunSettings,
                  spec: EvaluationSpec) -> Estimate:
    """GPOPE's execution: the solver (in memory, streamed, tuned privately, or per disjoint
    patient group), with the run's noisy-statistics release for its interval."""
    source = run.base
    m, n, k = plan.m, source.n, plan.interval_groups
    # a Poisson step divides by a public count (m~, or m / K for K groups), never a group's
    # actual size, which the iterates would otherwise release
    solver = solver_config(
        settings, sigma=plan.sigma, batch_rate=settings.batch_rate,
        trace_every=settings.trace_every or max(1, settings.iterations // 20),
        delta=plan.main.delta,
        normalizing_size=m / k if k else (m if plan.count_sigma > 0 else None))
    tuned = group_thetas = None
    if plan.interval_groups:
        groups = patient_groups(source.spark, source.config, dataset=source.dataset, m=source.m,
                                groups=plan.interval_groups)
        result, group_thetas, population = solve_groups(
            source.spark, source.rows, spec, solver, settings, groups=groups, n=n, m=m,
            spent=plan.spent_epsilon, layout=plan.layout)
    else:
        result, population, tuned = solve(
            source.spark, source.rows, spec, solver, settings, m=source.m, n=n, sigma=plan.sigma,
            spent=plan.spent_epsilon, accountant=plan.accountant, in_memory=plan.in_memory,
            layout=plan.layout, tuning=plan.tuning)
    return _released(spec, settings, result, run.noisy, run.moments, bootstrap=False,
                     group_thetas=group_thetas, tuned=tuned, population=population)


def execute_untuned(run: RunSource, *, plan: ReleasePlan, settings: RunSettings,
                    spec: EvaluationSpec) -> Estimate:
    """The tuning-free default's execution: its releases through Spark sums."""
    from gpope.core.estimators.untuned import run_untuned, untuned_result
    from gpope.core.ssp import private_mspbe

    rel = run_untuned(run, spec, plan=plan, moments_share=settings.moments_share,
                      seed=settings.seed, level=settings.ci_level,
                      identification=settings.ssp_identification, settings=settings.untuned)
    result = untuned_result(rel, plan=plan, delta=settings.delta, seed=settings.seed)
    return Estimate(result=result, theta=rel.theta, values=rel.interval.value,
                    intervals=rel.interval, private_mspbe=private_mspbe(rel.theta, rel.noisy),
                    noisy=rel.noisy, release=rel, settings=settings,
                    private_population=run.base.population() if settings.private_diagnostics
                    else None)


def _in_public_range(spec: EvaluationSpec, values: np.ndarray, intervals: Interval | None
                     ) -> tuple[np.ndarray, Interval | None]:
    """The values and their interval's finite ends clamped into the spec's public value range:
    post-processing (no budget) that can only improve coverage; an unbounded end stays so."""
    from gpope.core.untuned.release import clamp_interval, value_range

    bounds = value_range(spec)
    values = np.clip(np.asarray(values, dtype=np.float64), *bounds)
    return values, None if intervals is None else clamp_interval(intervals, bounds)


def solver_config(options: RunSettings, *, sigma: float, batch_rate: float | None,
                  trace_every: int | None, delta: float | None = None,
                  normalizing_size: float | None = None) -> GPOPEConfig:
    """The solver's :class:`~gpope.core.gpope.solver.GPOPEConfig` at noise multiplier ``sigma``;
    ``normalizing_size``: the public count a Poisson step divides by (None: the rows held)."""
    from gpope.core.gpope.solver import GPOPEConfig

    o = options
    return GPOPEConfig(
        iterations=o.iterations, step_size=o.step_size, clip=o.clip, noise_multiplier=sigma,
        delta=o.delta if delta is None else delta, accountant=o.accountant, sampling=o.sampling,
        batch_rate=batch_rate, step_schedule=o.step_schedule, step_offset=o.step_offset,
        averaging=o.averaging, tail_fraction=o.tail_fraction, trace_every=trace_every,
        secure_noise=o.secure_noise, noise_grid=o.noise_grid,
        normalizing_size=normalizing_size if o.sampling == "poisson" else None,
    )


def ssp_result(noisy: NoisyStatistics, options: RunSettings, spec: EvaluationSpec, *, accountant: str,
               spent: float) -> GPOPEResult:
    """The SSP estimate as a solver result: the unregularised LSTD solve of the noisy sums."""
    from gpope.core.gpope.solver import GPOPEResult
    from gpope.core.intervals import ssp_values

    theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
    private = options.seed is None
    return GPOPEResult(
        theta=theta, w=np.zeros_like(theta), theta_avg=None, sigma=noisy.sigma, epsilon=spent,
        delta=options.delta, accountant=accountant, sampling="poisson", iterations=1,
        clip=noisy.clip, private=private,
        privacy_note=("one Gaussian release of jointly clipped sufficient statistics and one of "
                      "residual second moments, noise from OS entropy" if private
                      else "fixed seed: reproducible, NOT private"),
    )


def solve(
    spark: SparkSession, stats_df: DataFrame, spec: EvaluationSpec, solver: GPOPEConfig,
    options: RunSettings, *, m: int, n: int, sigma: float, spent: float, accountant: str,
    in_memory: bool, layout: str = "dense",
    tuning: tuple[PrivateTuningPlan, PrivateTuningSettings] | None = None,
) -> tuple[GPOPEResult, Population | None, PrivateTuningResult | None]:
    """Run the solver; also the private population when diagnostics are asked for (never
    released), and the private tuning's result (None without ``--tune private``)."""
    from gpope.core.gpope.solver import run_gpope
    from gpope.core.gpope.streamed import run_gpope_streamed
    from gpope.shell.pipeline.sampled import load_statistics, streamed_fetcher

    rng = options.seed  # None: OS entropy inside the solver (private); int: reproducible
    if tuning is not None:  # planned only with in-memory statistics (gpope.core.evaluation.plan_release)
        from gpope.core.tuning.private import tune_privately

        stats = load_statistics(stats_df, n, normalization=spec.normalization, layout=layout)
        tuned = tune_privately(stats, solver, tuning[0], tuning[1], rng)
        pop = stats.population() if options.private_diagnostics else None
        return tuned.result, pop, tuned
    if options.secure_noise and not in_memory:
        raise ConfigError(
            f"--secure-noise runs on the in-memory path only, but the sampled statistics exceed "
            f"in_memory_limit_mb={options.in_memory_limit_mb}; raise it (conf evaluation."
            "in_memory_limit_mb) or run without secure noise."
        )
    if in_memory:
        stats = load_statistics(stats_df, n, normalization=spec.normalization, layout=layout)
        result = run_gpope(stats, solver, rng)
        pop = stats.population() if options.private_diagnostics else None
        return result, pop, None
    with streamed_fetcher(spark, stats_df, n, m=m, normalization=spec.normalization) as fetch:
        result = run_gpope_streamed(
            fetch, solver, rng, m=m, n=n, sigma=sigma, epsilon=spent, accountant=accountant,
            max_rows_per_fetch=options.rows_per_fetch,
        )
    pop = spark_population(stats_df, n, m) if options.private_diagnostics else None
    return result, pop, None


def patient_groups(spark: SparkSession, config: GpopeConfig, *, dataset: str, m: int,
                   groups: int) -> np.ndarray:
    """(m,) group 0..groups-1 of each traj_index, from the public hash of its patient id."""
    from gpope.core.intervals import interval_groups
    from gpope.shell import lake
    from gpope.shell.lake.manifest import read_pinned

    target = lake.Lake.from_settings(spark, config.lake)
    transitions, _ = read_pinned(target, lake.TableRef("silver", "transitions", dataset))
    table = transitions.select("traj_index", "patient_id").distinct().toArrow()
    index = table.column("traj_index").to_numpy().astype(np.int64)
    if table.num_rows != m or not np.array_equal(np.sort(index), np.arange(m)):
        raise DataError(
            f"--interval-groups: the transitions of {dataset!r} hold {table.num_rows} "
            f"(traj_index, patient_id) pairs, the statistics {m} trajectories 0..{m - 1}; the "
            "statistics are older than the transitions. Re-run `gpope stats`, then evaluate again."
        )
    out = np.empty(m, dtype=np.int64)
    out[index] = interval_groups(table.column("patient_id").to_pylist(), groups)
    return out


def solve_groups(spark: SparkSession, stats_df: DataFrame, spec: EvaluationSpec,
                 solver: GPOPEConfig,
                 options: RunSettings, *, groups: np.ndarray, n: int, m: int, spent: float,
                 layout: str = "dense",
                 ) -> tuple[GPOPEResult, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """``--interval-groups K``: GPOPE once per disjoint group (each step normalised by the
    public expected group size); returns (the result whose iterates are the means over the
    groups, (K, n) group estimates, private population)."""
    from gpope.core.gpope.solver import run_gpope
    from gpope.shell.pipeline.sampled import load_group_statistics

    k = options.interval_groups  # every group, the last included: an empty one is an error
    # one Generator for all groups: each run spawns its own child streams (seeded: reproducible)
    rng = None if options.seed is None else np.random.default_rng(options.seed)
    for g in range(k):
        if not np.any(groups == g):
            raise DataError(
                f"--interval-groups {options.interval_groups}: group {g} has no patients; use "
                "fewer groups for this data set."
            )
    results = [run_gpope(part, solver, rng) for part in load_group_statistics(
        stats_df, n, groups, normalization=spec.normalization, layout=layout)]
    released = np.array([r.theta_avg if r.theta_avg is not None else r.theta for r in results])

    def mean(name: str) -> np.ndarray | None:
        parts = [getattr(r, name) for r in results]
        return None if parts[0] is None else np.mean(parts, axis=0)

    first = results[0]
    result = dataclasses.replace(
        first, theta=mean("theta"), w=mean("w"), theta_avg=mean("theta_avg"), epsilon=spent,
        trace_theta=mean("trace_theta"), trace_w=mean("trace_w"),
        private=all(r.private for r in results),
        privacy_note=f"{first.privacy_note}; mean of {len(results)} runs on disjoint patient "
        "groups (one run's cost: parallel composition)")
    pop = None
    if options.private_diagnostics:
        pop = spark_population(stats_df, n, len(groups))
    return result, released, pop


def spark_population(stats_df: DataFrame, n: int, m: int) -> Population:
    """Means of A, b, C over trajectories, aggregated in Spark (private; diagnostics only)."""
    from pyspark.sql import functions as F

    out = []
    for name, width in (("A", n * n), ("b", n), ("C", n * n)):
        sums = (stats_df.select(F.posexplode(name).alias("i", "v")).groupBy("i")
                .agg(F.sum("v").alias("s")).toArrow())
        vec = np.zeros(width)
        vec[sums.column("i").to_numpy()] = sums.column("s").to_numpy()
        out.append(vec / m)
    return out[0].reshape(n, n), out[1], out[2].reshape(n, n)

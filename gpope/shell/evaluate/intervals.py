"""The noisy-statistics release of an evaluation (the plan's ``noisy_statistics`` component,
:data:`NOISY_STATISTICS`, at the multiplier the plan fixed) and the intervals and private MSPBE
computed from it by post-processing (:mod:`gpope.core.intervals`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from gpope.core.estimators.execution import ReleaseExecution, RunSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from gpope.core.evaluation.components import ReleaseComponent
    from gpope.core.evaluation.plan import ReleasePlan
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.intervals import Interval
    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import NoisyMoments, NoisyStatistics
    from gpope.shell.pipeline.ssp import StatisticsFiles

__all__ = ["NOISY_STATISTICS", "noise_generators", "noisy_statistics", "noisy_statistics_of",
           "release_intervals"]


def noise_generators(seed: int | None) -> tuple[np.random.Generator, np.random.Generator]:
    """(noise generator, bootstrap generator): OS entropy, or derived from ``seed`` (NOT private)
    through streams independent of the solver's."""
    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x55_53_50])
    noise, boot = ss.spawn(2)
    return np.random.default_rng(noise), np.random.default_rng(boot)


def noisy_statistics(stats_df: DataFrame | StatisticsFiles, options: RunSettings,
                     spec: EvaluationSpec, *, n: int, m: int, rows: int, sigma: float,
                     clip: float) -> tuple[NoisyStatistics, NoisyMoments]:
    """The noisy-statistics release and its moments release of the rows ``stats_df``: the clipped
    sums plus noise at ``sigma / sqrt(1 - moments_share)``, then, at the resulting (public) SSP
    estimate, the clipped residual second moments plus noise at ``sigma / sqrt(moments_share)``:
    together exactly the Gaussian mechanism at ``sigma``. ``m``: the public count the release
    divides by; ``rows``: how many rows each aggregate must sum (never released)."""
    from gpope.core.intervals import ssp_values
    from gpope.core.ssp import release_moments, release_noisy_statistics, split_sigma
    from gpope.shell.pipeline.ssp import public_residual_bound, spark_group_sums, spark_moment_sum

    rng, _ = noise_generators(options.seed)
    s1, s2 = split_sigma(sigma, options.moments_share)
    sums = spark_group_sums(stats_df, n=n, clip=clip, expected_rows=rows)
    if options.secure_noise:
        noisy = _secure_noisy_statistics(sums, options, n=n, m=m, sigma=s1, clip=clip)
    else:
        noisy = release_noisy_statistics(sums, n=n, m=m, sigma=s1, clip=clip, rng=rng)
    theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
    bound = public_residual_bound(spec, theta, clip=clip, n_trajectories=options.public_trajectories,
                                  quantile=options.ssp_clip_quantile,
                                  max_length=options.public_max_length)
    msum = spark_moment_sum(stats_df, n=n, clip=clip, theta=theta, bound=bound,
                            expected_rows=rows)
    if options.secure_noise:
        from gpope.core.mechanisms.secure_noise import secure_perturb
        from gpope.core.ssp import NoisyMoments, moments_matrix

        scale = bound * bound
        msum, std = secure_perturb(msum, s2 * scale, scale, grid=options.noise_grid,
                                   dim=msum.shape[0])
        return noisy, NoisyMoments(matrix=moments_matrix(msum, n), theta=theta,
                                   sigma=float(std / scale), bound=float(bound))
    return noisy, release_moments(msum, n=n, theta=theta, sigma=s2, bound=bound, rng=rng)


def noisy_statistics_of(run: RunSource, settings: RunSettings, spec: EvaluationSpec, *,
                        sigma: float, m: int) -> tuple[NoisyStatistics, NoisyMoments]:
    """:func:`noisy_statistics` of the run's pinned rows at ``sigma`` and the run's clip."""
    source = run.base
    return noisy_statistics(source.summable, settings, spec, n=source.n, m=m, rows=source.m,
                            sigma=float(sigma), clip=float(run.clip))


class _NoisyStatistics(ReleaseExecution):
    """The ``noisy_statistics`` component, released before the estimator, which reads it."""

    def prepare(self, component: ReleaseComponent, run: RunSource, *, plan: ReleasePlan,
                settings: RunSettings, spec: EvaluationSpec) -> RunSource:
        noisy, moments = noisy_statistics_of(run, settings, spec, sigma=component.sigma,
                                             m=plan.m)
        return dataclasses.replace(run, noisy=noisy, moments=moments)


NOISY_STATISTICS = _NoisyStatistics()


def _secure_noisy_statistics(sums: np.ndarray, options: RunSettings, *, n: int, m: int,
                             sigma: float, clip: float) -> NoisyStatistics:
    """The noisy-statistics release with secure noise: each group's sum (a row) rounded to the
    public grid, plus OS-CSPRNG discrete Gaussian noise (std raised to cover the rounding)."""
    from gpope.core.mechanisms.secure_noise import secure_perturb
    from gpope.core.ssp import NoisyStatistics

    sums = np.asarray(sums, dtype=np.float64)
    noisy, _ = secure_perturb(sums, sigma * clip, clip, grid=options.noise_grid,
                              dim=sums.shape[1])
    return NoisyStatistics(sums=noisy, n=int(n), m=int(m), sigma=float(sigma), clip=float(clip))


def release_intervals(noisy: NoisyStatistics | None, moments: NoisyMoments | None,
                      spec: EvaluationSpec, theta: np.ndarray,
                      values: np.ndarray, *, options: RunSettings, ssp_run: bool,
                      group_thetas: np.ndarray | None = None,
                      ) -> tuple[Interval | None, Interval | None, tuple[float, float] | None]:
    """(value Interval, theta Interval, (private MSPBE, relative)) from the noisy releases; Nones
    without them. SSP: the parametric bootstrap with its identification test; GPOPE: that
    interval anchored at its estimate, or the Student-t interval of the ``group_thetas``."""
    from gpope.core.intervals import (
        anchored_interval,
        bootstrap_interval,
        group_interval,
        split_interval,
    )
    from gpope.core.ssp import private_mspbe

    if group_thetas is not None:  # --interval-groups: the spread of the K disjoint-group runs
        iv = group_interval(np.array([spec.reference_values(th) for th in group_thetas]),
                            level=options.ci_level)
        tiv = group_interval(group_thetas, level=options.ci_level)
        return iv, tiv, None if noisy is None else private_mspbe(theta, noisy)
    if noisy is None:
        return None, None, None

    from gpope.core.features import TabularFeatures
    from gpope.core.untuned.release import value_range

    k = len(values)
    _, boot = noise_generators(options.seed)
    _, both = bootstrap_interval(
        noisy, moments, lambda th: np.concatenate([spec.reference_values(th), th]),
        rng=boot, level=options.ci_level, regularize=False,
        identification=options.ssp_identification,
        value_bounds=value_range(spec) if isinstance(spec.feature_map, TabularFeatures) else None)
    iv, tiv = split_interval(both, k)
    if not ssp_run:
        iv, tiv = anchored_interval(values, iv), anchored_interval(theta, tiv)
    return iv, tiv, private_mspbe(theta, noisy)


"""The public rules of the tuning-free default (conf ``evaluation.untuned``): a light module the
settings resolver reads without importing the estimator (:mod:`gpope.core.untuned.release`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpope.core.validation import check_fields, check_int
from gpope.errors import ConfigError

__all__ = ["BehaviourSettings", "UntunedSettings"]


@dataclass(frozen=True)
class UntunedSettings:
    """Public rules of the default (conf ``evaluation.untuned``), not values tuned to a data set.

    Attributes:
        clip_quantile: the quantile of the trajectories' statistics norms used as the clip bound.
        quantile_share: share of the default's Gaussian privacy loss ``mu^2 = 1/sigma^2`` spent on
            each of the two quantiles (its releases compose exactly to one Gaussian mechanism,
            calibrated once: :func:`gpope.core.untuned.release.plan_untuned`).
        refine_share: share of ``mu^2`` spent on the residual release (sum and moments); the SSP
            sums take what the shares leave (:attr:`statistics_share`).
        probe_share: share of ``mu^2`` spent on the probe, the clipped residual sum at the
            refined estimate: with the residual release's sum it is the secant that shows whether
            the refinement's step overshot (a clip that shrank A) and by how much.
        secant_z: the probe's step is taken only where the overshoot it shows stands this many
            noise stds above none; else the refined estimate stands.
        residual_quantile: the quantile of the residual norms used as their clip bound, at most.
        residual_tail_stds: the residual clip is the upper quantile with at most
            ``min((1 - residual_quantile) m, residual_tail_stds sigma_q)`` rows above it
            (``sigma_q`` the noise std of its histogram's bins), so the clip's bias stays on the
            noise's scale as m grows (docs/RESULTS.md).
        residual_clip_ratio: the residual clip is at most this multiple of the same noisy
            histogram's ``residual_quantile`` quantile, so a tail hidden by the histogram's noise
            cannot lift the clip (and the residual noise) to the grid's public top.
        grid_decades: decades each quantile's log grid spans below its public top.
        bins_per_decade: resolution of those grids.
        second_moment_weight: weight w of the ``C_i`` block in ``[A_i, b_i, w C_i]``, the vector
            the clip quantile reads and the SSP release clips and noises (the released C is
            divided by w again). ``C_i`` only decides which features are supported, so w < 1
            lowers the clip and the noise on A and b at the cost of a noisier support test.
        unidentified_ridge: where the identification test fails (the interval is unbounded
            anyway), the released estimate is the ridge solve ``argmin ||A~ theta - b~||^2 +
            mu tau^2 ||theta||^2`` of the SSP sums, ``mu`` this value and ``tau`` the noise's
            spectral-norm bound (post-processing); 0 keeps the refined estimate.
        sparse_fraction, sparse_z: the noisy A is sparse when fewer than ``sparse_fraction`` of
            its entries exceed ``sparse_z`` noise stds (tabular features); then a feature whose
            noisy ``A_jj`` stands out of the noise is supported too, and an unidentified release's
            ridge solve zeroes the entries below ``sparse_z`` stds first (post-processing).
    """

    clip_quantile: float = 0.9
    quantile_share: float = 0.02
    refine_share: float = 0.2
    probe_share: float = 0.05
    secant_z: float = 3.0
    residual_quantile: float = 0.99
    residual_tail_stds: float = 3.0
    residual_clip_ratio: float = 2.0
    grid_decades: float = 6.0
    bins_per_decade: int = 8
    second_moment_weight: float = 0.3
    unidentified_ridge: float = 0.001
    sparse_fraction: float = 0.2
    sparse_z: float = 3.0

    def __post_init__(self) -> None:
        check_fields(self, ("clip_quantile", "residual_quantile"), gt=0.0, le=1.0)
        check_fields(self, ("quantile_share", "refine_share", "probe_share"), gt=0.0, lt=1.0)
        check_fields(self, ("grid_decades", "residual_tail_stds", "sparse_z", "secant_z"), gt=0.0)
        check_int("UntunedSettings", "bins_per_decade", self.bins_per_decade, ge=1)
        check_fields(self, ("residual_clip_ratio",), ge=1.0)
        check_fields(self, ("second_moment_weight",), gt=0.0, le=1.0)
        check_fields(self, ("unidentified_ridge",), ge=0.0)
        check_fields(self, ("sparse_fraction",), ge=0.0, le=1.0)
        if self.statistics_share <= 0.0:
            raise ConfigError("UntunedSettings shares leave nothing for the statistics release: 2 "
                              f"x quantile_share ({self.quantile_share}) + refine_share "
                              f"({self.refine_share}) + probe_share ({self.probe_share}) must be "
                              "< 1.")

    @property
    def statistics_share(self) -> float:
        """The SSP sums' share of ``mu^2``: what the two histograms, the probe and the residual
        release leave."""
        return 1.0 - 2.0 * self.quantile_share - self.refine_share - self.probe_share


@dataclass(frozen=True)
class BehaviourSettings:
    """Public rules of the behaviour estimate (conf ``evaluation.behaviour``).

    Attributes:
        share: share of the run's Gaussian privacy loss ``mu^2`` spent on the noisy counts.
        quantile_share: share spent on the histogram of the count rows' norms.
        clip_quantile: the quantile of the count rows' norms used as their clip.
        prior_stds: the pseudo-count per cell, in noise standard deviations of a cell.
        grid_decades, bins_per_decade: the histogram's public log grid below its top 1.
    """

    share: float = 0.05
    quantile_share: float = 0.02
    clip_quantile: float = 0.9
    prior_stds: float = 1.0
    grid_decades: float = 4.0
    bins_per_decade: int = 8

    def __post_init__(self) -> None:
        check_fields(self, ("share", "quantile_share"), gt=0.0, lt=1.0)
        check_fields(self, ("clip_quantile",), gt=0.0, le=1.0)
        check_fields(self, ("prior_stds",), ge=0.0)
        check_fields(self, ("grid_decades",), gt=0.0)
        if self.share + self.quantile_share >= 1.0:
            raise ConfigError("BehaviourSettings: share + quantile_share must be < 1; got "
                              f"{self.share} + {self.quantile_share}.")

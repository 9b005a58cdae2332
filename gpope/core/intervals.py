"""Confidence intervals for released values, from a noisy grouped statistics release.

Method: the **grouped (delete-a-group) jackknife** over the K disjoint random groups of a
:class:`gpope.core.ssp.NoisyStatistics` release (Quenouille 1956; Tukey 1958; for groups of
observations Shao and Tu 1995, "The Jackknife and Bootstrap", sec. 2.1 and 5.2; the same as the
batch-means / subsample-and-aggregate idea of Smith, "Privacy-preserving statistical estimation
with optimal convergence rates", STOC 2011). Each group's noisy sums carry that group's sampling
variability AND its own independent privacy noise, so the spread of the K delete-one estimates
estimates the variance of the pooled estimate due to both sources; nothing else is computed from
the data, so the interval costs no privacy beyond the release itself (post-processing). With K
groups the studentised estimate is referred to Student's t with K - 1 degrees of freedom.

For an estimate that is not the SSP solution itself (GPOPE's theta), :func:`anchored_interval`
widens the SSP interval by the observed distance between the two estimates: if the SSP interval
covers the estimand, so does ``centre +- (|centre - ssp| + half-width)`` (triangle inequality);
valid, conservative, and centred on the released value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpope.core.ssp import NOISE_BOUND_FAILURE, NoisyStatistics, solve_ssp
from gpope.core.validation import check_number

__all__ = ["Interval", "anchored_interval", "jackknife_interval", "ssp_values"]


@dataclass(frozen=True)
class Interval:
    """Intervals for a vector of released quantities (all arrays have the same shape (k,)).

    Attributes:
        value: the released estimates.
        lower, upper: the two-sided interval at ``level``.
        lower_bound: one-sided lower bound at ``level`` ("at least x with 95% confidence").
        se: the estimated standard error (privacy noise + sampling).
        level: confidence level, e.g. 0.95.
        df: degrees of freedom of the t reference distribution.
    """

    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    lower_bound: np.ndarray
    se: np.ndarray
    level: float
    df: int

    def to_dict(self) -> dict[str, object]:
        """Plain lists (for JSON and MLflow artifacts)."""
        return {
            "value": [float(v) for v in self.value],
            "lower": [float(v) for v in self.lower],
            "upper": [float(v) for v in self.upper],
            "lower_bound": [float(v) for v in self.lower_bound],
            "se": [float(v) for v in self.se],
            "level": float(self.level),
            "df": int(self.df),
        }


def _t(q: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def ssp_values(
    noisy: NoisyStatistics, transform: Callable[[np.ndarray], np.ndarray], *, drop: int | None = None,
    failure: float = NOISE_BOUND_FAILURE, regularize: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """(theta, transform(theta)) of the AdaSSP solve on the pooled sums (all groups or all but
    ``drop``)."""
    A, b, C = noisy.pooled(drop)
    k = noisy.groups - (0 if drop is None else 1)
    theta, _ = solve_ssp(A, b, C=C, noise_std=noisy.pooled_noise_std(k), failure=failure,
                         regularize=regularize)
    return theta, np.asarray(transform(theta), dtype=np.float64)


def jackknife_interval(
    noisy: NoisyStatistics, transform: Callable[[np.ndarray], np.ndarray], *, level: float = 0.95,
    regularize: bool = True,
) -> tuple[np.ndarray, Interval]:
    """SSP estimate and its grouped-jackknife interval: (theta, Interval of transform(theta)).

    ``transform`` maps theta (n,) to the released quantities (k,) (e.g. values at reference
    states; the identity for theta itself). Needs K >= 2 groups.

    Guarantee: post-processing of ``noisy`` only; ``lower <= value <= upper`` and
    ``lower_bound >= lower``.
    """
    level = check_number("jackknife_interval", "level", level, gt=0.0, lt=1.0)
    K = noisy.groups
    if K < 2:
        from gpope.errors import ConfigError

        raise ConfigError(f"The jackknife interval needs at least 2 groups. Got {K}; set ssp_groups >= 2.")
    theta, value = ssp_values(noisy, transform, regularize=regularize)
    loo = np.stack([ssp_values(noisy, transform, drop=k, regularize=regularize)[1] for k in range(K)])
    mean = loo.mean(axis=0)
    var = (K - 1) / K * ((loo - mean) ** 2).sum(axis=0)
    se = np.sqrt(var)
    t2, t1 = _t(0.5 + level / 2.0, K - 1), _t(level, K - 1)
    return theta, Interval(value=value, lower=value - t2 * se, upper=value + t2 * se,
                           lower_bound=value - t1 * se, se=se, level=level, df=K - 1)


def anchored_interval(centre: np.ndarray, reference: Interval) -> Interval:
    """An interval centred on another estimate of the same quantities, valid whenever
    ``reference`` is: half-width ``|centre - reference.value| + reference half-width``.

    ``lower_bound`` likewise: ``centre - |centre - reference.value| - (reference.value -
    reference.lower_bound)``.
    """
    c = np.asarray(centre, dtype=np.float64)
    gap = np.abs(c - reference.value)
    half = gap + (reference.upper - reference.value)
    one = gap + (reference.value - reference.lower_bound)
    return Interval(value=c, lower=c - half, upper=c + half, lower_bound=c - one,
                    se=np.sqrt(reference.se ** 2 + gap ** 2), level=reference.level, df=reference.df)

"""Identification judged per released value: a weakly visited state leaves the others bounded.

The identification test of :func:`gpope.core.untuned.release.release_untuned` reads the whole
supported block of the noisy A~; one weakly visited state makes it fail and every reference value
unbounded. With tabular features every coordinate of theta is a state's value, so it lies in the
public :func:`gpope.core.untuned.release.value_range` ``[lo, hi]`` whatever the data; that is
what lets the weak states be set aside without losing validity:

1. **Split.** Drop supported features in the order of their noisy ``C~_jj`` (post-processing),
   smallest first, until the strong block ``S`` passes the separation test
   (:func:`gpope.core.intervals.separation`) and the second-order bound holds. ``W`` is the rest.
2. **Solve S with W at the range's midpoint.** ``theta_S = theta0_S + A~_SS^-1 (R~_S + A~_SW
   (theta0_W - c))``, ``c = (lo + hi) / 2``: the default's refinement restricted to ``S``.
3. **Bound what W can do.** The population fixed point satisfies ``A_SS theta_S = b_S - A_SW
   theta_W`` with ``theta_W`` in the range, so ``g . theta_S`` differs from the estimand by at
   most ``h sum_j |u . A_Sj|`` (``u = A_SS^-T g``, ``h = (hi - lo) / 2``); ``A_SW`` is known
   only with noise, ``sum_j |u . E_Sj| <= e ||u||`` with probability ``1 - failure``
   (:func:`gpope.core.intervals.weak_bias`). That bound is added to both ends of the interval.

Values at reference states in ``W`` stay unbounded. Not applied for non-tabular features or
without finite reward bounds. The test is repeated along the greedy path at the interval's
level, not corrected for the repetition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpope.core.intervals import strong_candidates, weak_bias

__all__ = ["StrongBlock", "second_order_widths", "strong_block"]


@dataclass(frozen=True)
class StrongBlock:
    """The part of a release identified on its own (:func:`strong_block`): the features of ``S``,
    the (k,) reference values of the ``S`` solve with their standard errors, ``extra`` (the
    second-order width plus the weak states' ``bias_bound``, added to each end), which values are
    ``bounded`` (depend on ``S`` only), and the separation of ``A~_SS`` (> 1)."""

    strong: np.ndarray
    values: np.ndarray
    se: np.ndarray
    extra: np.ndarray
    bias_bound: np.ndarray
    bounded: np.ndarray
    separation: float


def strong_block(*, A: np.ndarray, C: np.ndarray, keep: np.ndarray, theta0: np.ndarray,
                 r_sum: np.ndarray, meat_r: np.ndarray, G_all: np.ndarray, noise_std: float,
                 residual_noise: float, value_bounds: tuple[float, float],
                 level: float) -> StrongBlock | None:
    """The strong block of an unidentified tabular release and its intervals (module docstring),
    or None when no non-empty block passes the test or the value range is not finite.

    ``A``, ``C``: the pooled noisy sums (n, n); ``keep``: the supported features; ``theta0``: the
    first solve; ``r_sum``: the released residual sum; ``meat_r``: the released residual moments'
    covariance (n, n); ``G_all``: (k, n) the reference rows; ``noise_std``: the noise std on A's
    entries; ``residual_noise``: the residual sum's noise std. Post-processing only.
    """
    lo, hi = value_bounds
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    centre, half = (lo + hi) / 2.0, (hi - lo) / 2.0
    for strong, sep in strong_candidates(A, C, keep, noise_std, level=level):
        S, W = np.flatnonzero(strong), np.flatnonzero(keep & ~strong)
        A_SS = A[np.ix_(S, S)]
        inv = np.linalg.inv(A_SS)
        shift = theta0[W] - centre
        theta_S = theta0[S] + inv @ (r_sum[S] + A[np.ix_(S, W)] @ shift)
        d2 = float(np.sum((theta_S - theta0[S]) ** 2) + shift @ shift)
        meat = meat_r[np.ix_(S, S)] + (residual_noise ** 2 + noise_std ** 2 * d2) * np.eye(len(S))
        G = G_all[:, S]
        extra, rho = second_order_widths(G, inv, meat, noise_std, level=level)
        if not rho < 1.0:
            continue
        se = np.sqrt(np.maximum(np.einsum("ki,ij,kj->k", G, inv @ meat @ inv.T, G), 0.0))
        bias = weak_bias(G @ inv, A[np.ix_(S, W)], n_supported=int(keep.sum()),
                         noise_std=noise_std, half=half)
        bounded = ~np.any(G_all[:, ~strong] != 0.0, axis=1)
        values = G @ theta_S
        return StrongBlock(strong=strong, values=values, se=se, extra=extra + bias,
                           bias_bound=bias, bounded=bounded, separation=float(sep))
    return None


def second_order_widths(G: np.ndarray, inv: np.ndarray, meat: np.ndarray, noise_std: float, *,
                        level: float) -> tuple[np.ndarray, float]:
    """The part of the refined estimate's error that the delta method leaves out, bounded:
    ``(widths (k,), rho)``. Post-processing of released quantities only.

    With ``A~ = A + E`` (E the release's noise, entries iid ``N(0, noise_std^2)``), ``u`` the
    first-order error term (covariance ``meat``) and ``err`` the error of theta, the refinement
    satisfies exactly ``err = A~^-1 u + A~^-1 E err``. On the event ``||E|| <= tau``
    (:func:`gpope.core.ssp.noise_norm_bound`) and ``||A~^-1 u|| <= B`` (``B^2`` the ``level``
    chi-square quantile of ``k`` times the top eigenvalue of ``A~^-1 meat A~^-T``), with
    ``rho = ||A~^-1|| tau < 1``: ``||err|| <= B / (1 - rho)`` and
    ``|g^T A~^-1 E err| <= ||A~^-T g|| tau B / (1 - rho)`` for every reference row g of ``G``,
    which is the width returned beside the first-order ``z se``. ``rho >= 1``: the bound does
    not hold and the widths are infinite (the interval is then unbounded: valid or unbounded).
    """
    from scipy.stats import chi2

    from gpope.core.ssp import noise_norm_bound

    k = inv.shape[0]
    if k == 0:
        return np.zeros(G.shape[0]), 0.0
    tau = noise_norm_bound(k, noise_std)
    rho = float(np.linalg.norm(inv, 2) * tau)
    if rho >= 1.0:
        return np.full(G.shape[0], np.inf), rho
    cov = inv @ meat @ inv.T
    B = math.sqrt(float(chi2.ppf(level, k)) * max(float(np.linalg.eigvalsh(cov)[-1]), 0.0))
    return np.linalg.norm(G @ inv, axis=1) * tau * B / (1.0 - rho), rho

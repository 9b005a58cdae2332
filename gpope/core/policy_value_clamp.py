"""What the policy value release's return clamp and data-chosen clips cost its intervals.

The clamp. J(behaviour) is the mean of the discounted return g, but the release sums
clip(g, g_lo, g_hi) with ends read from a noisy histogram of the same returns
(:func:`gpope.core.policy_value_release.clips_from_histograms`). Per patient

    g = clip(g, g_lo, g_hi) + (g - g_hi)_+ - (g_lo - g)_+,

so E[g] lies in [E[clip g] - E[deficit], E[clip g] + E[excess]]. Both parts are bounded from the
RELEASED histogram (post-processing, no budget): a patient in bin j (|g| in [e_{j-1}, e_j) on the
public grid, on the side of its sign) exceeds g_hi by at most w_j = max(hi_j - g_hi, 0), hi_j the
largest g the bin admits (the top bin admits only the public top). With true counts c_j and
noisy counts y_j = c_j + N(0, s^2), the sample's excess sum is at most sum_j w_j c_j <=
sum_j w_j y_j + z s ||w|| except with probability Phi(-z) (:class:`ClampBound`). The population
excess mu = E[(g - g_hi)_+] of variables in [0, b] (b = max_j w_j) then follows by Bernstein's
inequality with Var <= b mu (self-bounding): sqrt(mu) <= sqrt(b L / (2m)) + sqrt(X + 5 b L / (6m))
with X the sample mean's bound and L = log(1 / beta) (:func:`population_excess`). The deficit below
g_lo is bounded the same way. No assumption on the returns' tail enters: a heavy tail that the
histogram cannot resolve (few patients per bin) is paid for in the interval, not in coverage.

Data-chosen clips. The clips are functions of a noisy release of the same patients, so the
sampling bound of the clipped means must hold for the clip actually chosen: it is taken
simultaneously over every clip the public grid allows (a union bound over :func:`clip_choices`,
Bonferroni on the sampling part's failure probability). Where the clips are public (given by
the caller) or the release is exact, the count is 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpope.core.policy_value import PolicyValueBounds

__all__ = ["ClampBound", "clamp_bound", "clip_choices", "population_excess", "public_clamp_bound"]


@dataclass(frozen=True)
class ClampBound:
    """Released ingredients of the bounds on the clamp's two parts (all public).

    Attributes:
        excess_sum: sum_j w_j y_j over the noisy g-histogram (w_j = max(hi_j - g_hi, 0)).
        excess_sd: the noise std of ``excess_sum`` (s ||w||); 0 when it is exact.
        excess_range: b_hi = max_j w_j (0: nothing can exceed g_hi).
        deficit_sum, deficit_sd, deficit_range: the same below g_lo (w_j = max(g_lo - lo_j, 0)).
    """

    excess_sum: float = 0.0
    excess_sd: float = 0.0
    excess_range: float = 0.0
    deficit_sum: float = 0.0
    deficit_sd: float = 0.0
    deficit_range: float = 0.0

    def bound(self, side: str, *, m: int, a_noise: float, a_pop: float, choices: int) -> float:
        """Upper confidence bound on E[excess] (``side="excess"``) or E[deficit] that fails with
        probability at most ``a_noise + a_pop`` (0 where the side's range is 0)."""
        total, sd, b = (getattr(self, f"{side}_{k}") for k in ("sum", "sd", "range"))
        if b <= 0.0:
            return 0.0
        from scipy.stats import norm

        sample = max(total + (float(norm.ppf(1.0 - a_noise)) * sd if sd > 0 else 0.0), 0.0) / m
        return population_excess(min(sample, b), b, m=m, beta=a_pop / choices)


def population_excess(sample_mean: float, b: float, *, m: int, beta: float) -> float:
    """Upper bound on mu = E[X] for iid X in [0, b] whose sample mean is at most ``sample_mean``,
    failing with probability ``beta``: Bernstein with Var X <= b mu,
    ``(sqrt(b L / (2m)) + sqrt(sample_mean + 5 b L / (6m)))^2`` with L = log(1 / beta), at most b."""
    if b <= 0.0:
        return 0.0
    L = math.log(1.0 / beta)
    root = math.sqrt(b * L / (2.0 * m)) + math.sqrt(max(sample_mean, 0.0) + 5.0 * b * L / (6.0 * m))
    return float(min(root * root, b))


def _bin_ranges(edges: np.ndarray, sign: int) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) g each bin of g's histogram admits: one-signed (``sign`` +1 / -1) the
    bins of |g|; two-signed the negative part's bins, then the non-negative part's."""
    lo_abs = np.concatenate([[0.0], edges])
    hi_abs = np.concatenate([edges, [edges[-1]]])  # the top bin holds |g| = top only
    if sign > 0:
        return lo_abs, hi_abs
    if sign < 0:
        return -hi_abs, -lo_abs
    return np.concatenate([-hi_abs, lo_abs]), np.concatenate([-lo_abs, hi_abs])


def clamp_bound(noisy_counts: np.ndarray, edges: np.ndarray, sign: int, *, g_hi: float,
                g_lo: float, noise_std: float) -> ClampBound:
    """The :class:`ClampBound` of clamping g to [g_lo, g_hi], from g's released (noisy)
    histogram with per-bin noise std ``noise_std`` (0: exact counts)."""
    low, high = _bin_ranges(np.asarray(edges, dtype=np.float64), sign)
    y = np.asarray(noisy_counts, dtype=np.float64)
    w_hi = np.maximum(high - g_hi, 0.0)
    w_lo = np.maximum(g_lo - low, 0.0)
    return ClampBound(
        excess_sum=float(w_hi @ y), excess_sd=float(noise_std * np.linalg.norm(w_hi)),
        excess_range=float(w_hi.max(initial=0.0)),
        deficit_sum=float(w_lo @ y), deficit_sd=float(noise_std * np.linalg.norm(w_lo)),
        deficit_range=float(w_lo.max(initial=0.0)))


def public_clamp_bound(bounds: PolicyValueBounds, *, m: int, g_hi: float,
                       g_lo: float) -> ClampBound:
    """Clamp ends given by the caller (no histogram): every patient may lie beyond them, so
    each part is bounded by its range alone."""
    lo0, hi0 = bounds.range_with_zero
    s = bounds.discount_mass
    b_hi, b_lo = max(s * hi0 - g_hi, 0.0), max(g_lo - s * lo0, 0.0)
    return ClampBound(excess_sum=m * b_hi, excess_range=b_hi, deficit_sum=m * b_lo,
                      deficit_range=b_lo)


def clip_choices(n_edges: int, sign: int) -> tuple[int, int, int]:
    """How many clips the release can choose, per component (g, a, n), on grids of ``n_edges``
    edges: |a| and n a grid edge each; g's pair (g_hi, g_lo) one-signed an edge and a floor
    (0 or an edge), two-signed either end from either side's walk or the public top."""
    k = int(n_edges)
    g = k * (k + 1) if sign else (2 * k + 2) ** 2
    return g, k, k

"""The policy value release's clips: how they are read from noisy histograms, and what the
return clamp and the data-chosen clips cost its intervals.

The clamp. J(behaviour) is the mean of the discounted return g, but the release sums
clip(g, g_lo, g_hi) with ends read from a noisy histogram of the same returns
(:func:`clips_from_histograms`). Per patient

    g = clip(g, g_lo, g_hi) + (g - g_hi)_+ - (g_lo - g)_+,

so E[g] lies in [E[clip g] - E[deficit], E[clip g] + E[excess]]. Both parts are bounded from the
RELEASED histogram (post-processing, no budget): a patient in bin j (|g| in [e_{j-1}, e_j) on the
public grid, on the side of its sign) exceeds g_hi by at most w_j = max(hi_j - g_hi, 0), hi_j the
largest g the bin admits (the top bin admits only the public top). With true counts c_j and
noisy counts y_j = c_j + N(0, s^2), the sample's excess sum is at most sum_j w_j c_j <=
sum_j w_j y_j + z s ||w|| except with probability Phi(-z) (:class:`ClampBound`), for a fixed
g_hi; g_hi is read from the same noisy counts, so z is taken over every value the end could take
(:func:`clamp_ends`, Bonferroni), and so is the population step. The population
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

Clamp or not. A clamp costs its bound; no clamp costs the noise and sampling range of the public
return range. The release compares the two candidates' predicted J(behaviour) widths from the
released histogram and public noise scales (:func:`gpope.core.policy_value_release.return_clamp`)
and keeps the narrower. The sampling bound's union is weighted (Bonferroni with unequal
shares): the unclamped candidate holds half its failure probability, the histogram's clamps
share the other half (:data:`UNCLAMPED_SHARE`), so choosing no clamp costs a factor 2, not the
grid's count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from gpope.core.mechanisms.quantile import LogGrid
from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
from gpope.core.policy_value_settings import PolicyValueSettings

__all__ = [
    "UNCLAMPED_SHARE",
    "ClampBound",
    "choose_clip",
    "choose_floor",
    "clamp_bound",
    "clamp_ends",
    "clip_choices",
    "clip_histograms",
    "clips_from_histograms",
    "histogram_variance",
    "one_signed",
    "population_excess",
    "public_clamp_bound",
    "public_limits",
    "released_components",
    "return_choices",
]


@dataclass(frozen=True)
class ClampBound:
    """Released ingredients of the bounds on the clamp's two parts (all public).

    Attributes:
        excess_sum: sum_j w_j y_j over the noisy g-histogram (w_j = max(hi_j - g_hi, 0)).
        excess_sd: the noise std of ``excess_sum`` (s ||w||); 0 when it is exact.
        excess_range: b_hi = max_j w_j (0: nothing can exceed g_hi).
        deficit_sum, deficit_sd, deficit_range: the same below g_lo (w_j = max(g_lo - lo_j, 0)).
        ends: how many values each clamp end could take (:func:`clamp_ends`): the bounds hold
            over all of them (1 where the ends are public or exact).
    """

    excess_sum: float = 0.0
    excess_sd: float = 0.0
    excess_range: float = 0.0
    deficit_sum: float = 0.0
    deficit_sd: float = 0.0
    deficit_range: float = 0.0
    ends: int = 1

    def bound(self, side: str, *, m: int, a_noise: float, a_pop: float) -> float:
        """Upper confidence bound on E[excess] (``side="excess"``) or E[deficit] that fails with
        probability at most ``a_noise + a_pop`` whichever of its ``ends`` values the clamp's end
        took (0 where the side's range is 0)."""
        total, sd, b = (getattr(self, f"{side}_{k}") for k in ("sum", "sd", "range"))
        if b <= 0.0:
            return 0.0
        sample = max(total + (float(norm.ppf(1.0 - a_noise / self.ends)) * sd if sd > 0 else 0.0),
                     0.0) / m
        return population_excess(min(sample, b), b, m=m, beta=a_pop / self.ends)


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


def histogram_variance(noisy_counts: np.ndarray, edges: np.ndarray, sign: int, *, g_hi: float,
                       g_lo: float) -> float:
    """The variance of clip(g, g_lo, g_hi) read from g's noisy histogram (post-processing):
    each bin at its midpoint, weighted by its count floored at 0 (a prediction, not a bound)."""
    low, high = _bin_ranges(np.asarray(edges, dtype=np.float64), sign)
    w = np.maximum(np.asarray(noisy_counts, dtype=np.float64), 0.0)
    if w.sum() <= 0.0:
        return 0.0
    v = np.clip((low + high) / 2.0, g_lo, g_hi)
    mean = float(w @ v) / float(w.sum())
    return max(float(w @ (v - mean) ** 2) / float(w.sum()), 0.0)


def clamp_bound(noisy_counts: np.ndarray, edges: np.ndarray, sign: int, *, g_hi: float,
                g_lo: float, noise_std: float, ends: int = 1) -> ClampBound:
    """The :class:`ClampBound` of clamping g to [g_lo, g_hi], from g's released (noisy)
    histogram with per-bin noise std ``noise_std`` (0: exact counts); ``ends``: how many values
    the clamp's ends could take (:func:`clamp_ends`)."""
    low, high = _bin_ranges(np.asarray(edges, dtype=np.float64), sign)
    y = np.asarray(noisy_counts, dtype=np.float64)
    w_hi = np.maximum(high - g_hi, 0.0)
    w_lo = np.maximum(g_lo - low, 0.0)
    return ClampBound(
        excess_sum=float(w_hi @ y), excess_sd=float(noise_std * np.linalg.norm(w_hi)),
        excess_range=float(w_hi.max(initial=0.0)),
        deficit_sum=float(w_lo @ y), deficit_sd=float(noise_std * np.linalg.norm(w_lo)),
        deficit_range=float(w_lo.max(initial=0.0)), ends=int(ends))


def public_clamp_bound(bounds: PolicyValueBounds, *, m: int, g_hi: float,
                       g_lo: float) -> ClampBound:
    """Clamp ends given by the caller (no histogram): every patient may lie beyond them, so
    each part is bounded by its range alone."""
    G_lo, G_hi = bounds.g_limits
    b_hi, b_lo = max(G_hi - g_hi, 0.0), max(g_lo - G_lo, 0.0)
    return ClampBound(excess_sum=m * b_hi, excess_range=b_hi, deficit_sum=m * b_lo,
                      deficit_range=b_lo)


def clip_choices(n_edges: int, sign: int) -> tuple[int, int, int]:
    """How many clips the release can choose, per component (g, a, n), on grids of ``n_edges``
    edges: |a| and n a grid edge each; g's pair (g_hi, g_lo) one-signed an edge and a floor
    (0 or an edge), two-signed either end from either side's walk or the public top."""
    k = int(n_edges)
    g = k * (k + 1) if sign else (2 * k + 2) ** 2
    return g, k, k


def clamp_ends(n_edges: int, sign: int) -> int:
    """How many values one end of the return clamp can take on grids of ``n_edges`` edges: one
    sign, an edge or the floor 0; two signs, an edge of either side, 0 or the public top."""
    k = int(n_edges)
    return k + 1 if sign else 2 * k + 2


#: Share of the sampling bound's failure probability held by the unclamped candidate (the rest:
#: the histogram's clamps, :func:`clip_choices`): the union over the return's clips is weighted.
UNCLAMPED_SHARE = 0.5


def return_choices(clamped: bool, n_edges: int, sign: int) -> int:
    """The return component's factor of the sampling bound's union (the weighted Bonferroni of
    the module docstring): 1 / UNCLAMPED_SHARE unclamped, the grid's count of clips over the
    clamps' share otherwise."""
    if not clamped:
        return round(1.0 / UNCLAMPED_SHARE)
    return math.ceil(clip_choices(n_edges, sign)[0] / (1.0 - UNCLAMPED_SHARE))


def public_limits(bounds: PolicyValueBounds) -> tuple[float, float, float]:
    """Public bounds of |g|, |a| and n with lambda = 1 (the top edges of the clip grids)."""
    G_lo, G_hi = bounds.g_limits
    d_lo, d_hi = bounds.target_range
    s = bounds.discount_mass
    return max(-G_lo, G_hi), bounds.weight_clip * s * max(-d_lo, d_hi), bounds.weight_clip * s


def clip_grid(top: float, settings: PolicyValueSettings) -> LogGrid:
    return LogGrid(lo=top * 10.0 ** (-settings.grid_decades), hi=top,
                   bins_per_decade=settings.bins_per_decade)


def bin_counts(values: np.ndarray, grid: LogGrid) -> np.ndarray:
    idx = np.searchsorted(grid.edges(), np.abs(values), side="right")
    return np.bincount(idx, minlength=grid.n_bins).astype(np.float64)


def choose_clip(noisy_counts: np.ndarray, grid: LogGrid, noise_std: float, z: float,
                max_count: float = math.inf) -> np.ndarray | float:
    """The clip read top down from a noisy histogram (post-processing).

    Walking down from the public top edge, the clip is lowered past a bin while that bin's noisy
    count stays below ``z * noise_std``: the lower edge of the last bin passed. It stays at the
    top when ``z * noise_std`` exceeds ``max_count`` (the histogram cannot resolve so few
    patients). So each bin above the clip holds about ``z * noise_std`` terms at most, and a
    histogram drowned in noise clips nothing. ``noisy_counts`` (..., bins) gives clips (...).
    """
    edges = grid.edges()
    counts = np.asarray(noisy_counts, dtype=np.float64)
    threshold = z * noise_std
    hit = counts[..., 1:len(edges)] > threshold  # bins 1 .. K-1 (bin j = [edges[j-1], edges[j]))
    last = np.where(hit.any(axis=-1), hit.shape[-1] - np.argmax(hit[..., ::-1], axis=-1), 0)
    clip = edges[last]
    top = (threshold > max_count) | (counts[..., -1] > threshold)
    out = np.where(top, edges[-1], clip)
    return float(out) if out.ndim == 0 else out


def one_signed(bounds: PolicyValueBounds) -> int:
    """+1 / -1 when every return is >= 0 / <= 0 (public bounds), else 0."""
    G_lo, G_hi = bounds.g_limits
    return 1 if G_lo == 0.0 else (-1 if G_hi == 0.0 else 0)


def choose_floor(noisy_counts: np.ndarray, grid: LogGrid, noise_std: float, z: float,
                 max_count: float = math.inf) -> np.ndarray | float:
    """The floor of |g| read bottom up from the same noisy histogram (post-processing): the
    lower edge of the first bin (from 0 up) whose noisy count exceeds ``z * noise_std``; 0 when
    that threshold exceeds ``max_count`` or no bin does."""
    edges = grid.edges()
    counts = np.asarray(noisy_counts, dtype=np.float64)
    threshold = z * noise_std
    hit = counts > threshold
    first = np.argmax(hit, axis=-1)
    lower = np.concatenate([[0.0], edges])[np.minimum(first, len(edges))]
    out = np.where(hit.any(axis=-1) & (threshold <= max_count), lower, 0.0)
    return float(out) if out.ndim == 0 else out


def released_components(bounds: PolicyValueBounds) -> int:
    """k: the components with a private range (on-policy 1: a = g and n = S are public)."""
    return 1 if bounds.on_policy else 3


def clip_histograms(terms: PolicyValueTerms, bounds: PolicyValueBounds,
                    settings: PolicyValueSettings) -> tuple[list[LogGrid], list[np.ndarray]]:
    """The k exact (private) histograms of g, |a|, n on their public grids: g's is of |g| when
    every return has one sign, else its negative and non-negative parts side by side (one
    count per patient either way)."""
    tops = public_limits(bounds)
    values = (terms.g, terms.a, terms.n)
    grids = [clip_grid(tops[j], settings) for j in range(released_components(bounds))]
    counts = [bin_counts(values[j], grid) for j, grid in enumerate(grids)]
    if not one_signed(bounds):
        g = terms.g
        counts[0] = np.concatenate([bin_counts(-g[g < 0], grids[0]),
                                    bin_counts(g[g >= 0], grids[0])])
    return grids, counts


def clips_from_histograms(noisy: list[np.ndarray], grids: list[LogGrid], bounds: PolicyValueBounds,
                          settings: PolicyValueSettings, *, hist_std: float, m: int):
    """(g_hi, c_a, c_n, g_lo) read from the noisy histograms (post-processing): the range
    [g_lo, g_hi] the returns are clipped to and the target terms' clips; arrays when the counts
    carry leading run dimensions (the audit)."""
    tops = public_limits(bounds)
    chosen = [tops[0], tops[1], tops[2], -tops[0]]
    cap = settings.max_clipped * m
    for j, (grid, counts) in enumerate(zip(grids, noisy, strict=True)):
        if j == 0:
            chosen[0], chosen[3] = return_range(counts, grid, bounds, settings, hist_std, cap)
            continue
        z = float(norm.ppf(1.0 - settings.false_alarm / grid.n_bins))
        # the target's terms are clipped by scaling weights (always valid): no cap there
        chosen[j] = np.minimum(tops[j], choose_clip(counts, grid, hist_std, z, math.inf))
    return tuple(chosen)


def return_range(counts: np.ndarray, grid: LogGrid, bounds: PolicyValueBounds,
                  settings: PolicyValueSettings, hist_std: float, cap: float):
    """(g_hi, g_lo) from g's noisy histogram: each end read from the outside in, and a side
    with no resolvable mass ends at the other side's floor."""
    top = public_limits(bounds)[0]
    sign = one_signed(bounds)
    if sign:
        z = float(norm.ppf(1.0 - settings.false_alarm / grid.n_bins))
        c = np.minimum(top, choose_clip(counts, grid, hist_std, z, cap))
        f = np.minimum(c, choose_floor(counts, grid, hist_std, z, cap))
        return (c, f) if sign > 0 else (-f, -c)
    nb = grid.n_bins
    neg, pos = counts[..., :nb], counts[..., nb:]
    z = float(norm.ppf(1.0 - settings.false_alarm / (2 * nb)))
    threshold = z * hist_std
    ok = threshold <= cap
    pos_any = (pos > threshold).any(axis=-1) & ok
    neg_any = (neg > threshold).any(axis=-1) & ok
    G_lo, G_hi = bounds.g_limits
    hi = np.where(pos_any, choose_clip(pos, grid, hist_std, z, cap),
                  np.where(neg_any, -choose_floor(neg, grid, hist_std, z, cap), G_hi))
    lo = np.where(neg_any, -choose_clip(neg, grid, hist_std, z, cap),
                  np.where(pos_any, choose_floor(pos, grid, hist_std, z, cap), G_lo))
    return np.minimum(hi, G_hi), np.maximum(lo, G_lo)

"""A differentially private quantile of per-trajectory norms, from one noisy histogram.

Clip bounds are chosen at a private quantile of the norms (Andrew et al. 2021, "Differentially
private learning with adaptive clipping"): their scale differs by orders of magnitude between
domains.

Mechanism. The public grid is log-spaced between ``lo`` and ``hi`` (``bins_per_decade`` bins a
decade) plus an underflow bin [0, lo) and an overflow bin [hi, inf). Each trajectory adds 1 to the
bin its norm falls in, and every bin gets independent N(0, noise_multiplier^2) noise: under
add/remove-one the count vector has L2 sensitivity 1, so the release is
``GaussianDpEvent(noise_multiplier)`` (Dwork and Roth 2014, Thm. A.1; Mironov 2017, Prop. 7).
The quantile is read off the noisy cumulative counts: post-processing. It is within one grid
edge of the true quantile when the cumulative noise std ``noise_multiplier * sqrt(bins)`` is
small against the number of trajectories near it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dp_accounting
import numpy as np

from gpope.core.validation import check_int, check_number, check_probability
from gpope.errors import ConfigError, DataError

__all__ = ["LogGrid", "histogram_quantile", "noisy_histogram", "private_quantile",
           "quantile_dp_event"]


@dataclass(frozen=True)
class LogGrid:
    """The public bin edges of the histogram: log-spaced from ``lo`` > 0 to ``hi`` > lo (norms
    outside share the underflow and overflow bins)."""

    lo: float = 1e-6
    hi: float = 1e3
    bins_per_decade: int = 4

    def __post_init__(self) -> None:
        check_number("LogGrid", "lo", self.lo, gt=0.0)
        check_number("LogGrid", "hi", self.hi, gt=self.lo)
        check_int("LogGrid", "bins_per_decade", self.bins_per_decade, ge=1)

    def edges(self) -> np.ndarray:
        """(k + 1,) interior edges lo .. hi (log-spaced; the last one is exactly hi)."""
        decades = math.log10(self.hi / self.lo)
        k = max(1, math.ceil(decades * self.bins_per_decade - 1e-9))
        return self.lo * (self.hi / self.lo) ** (np.arange(k + 1) / k)

    @property
    def n_bins(self) -> int:
        """Number of histogram bins, underflow and overflow included."""
        return len(self.edges()) + 1


def quantile_dp_event(noise_multiplier: float) -> dp_accounting.DpEvent:
    """The dp-accounting event of one noisy histogram (add/remove-one, sensitivity 1)."""
    sigma = check_number("quantile_dp_event", "noise_multiplier", noise_multiplier, gt=0.0)
    return dp_accounting.GaussianDpEvent(noise_multiplier=sigma)


def _counts(values: np.ndarray, grid: LogGrid) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(v)) or np.any(v < 0):
        raise DataError(
            "Norms for a private quantile must be finite and >= 0; got "
            f"{int(np.sum(~np.isfinite(v)))} non-finite and {int(np.sum(v < 0))} negative values."
        )
    # bin 0: [0, lo); bin i: [edges[i-1], edges[i]); last bin: [hi, inf).
    idx = np.searchsorted(grid.edges(), v, side="right")
    return np.bincount(idx, minlength=grid.n_bins).astype(np.float64)


def noisy_histogram(
    values: np.ndarray, grid: LogGrid, noise_multiplier: float, rng: np.random.Generator
) -> np.ndarray:
    """(grid.n_bins,) bin counts of ``values`` (underflow, log bins, overflow) plus
    N(0, noise_multiplier^2) per bin: :func:`quantile_dp_event`."""
    sigma = check_number("noisy_histogram", "noise_multiplier", noise_multiplier, gt=0.0)
    counts = _counts(values, grid)
    return counts + sigma * rng.standard_normal(len(counts))


def histogram_quantile(noisy_counts: np.ndarray, grid: LogGrid, quantile: float, m: int) -> float:
    """The ``quantile`` read from (noisy) bin counts: post-processing of the histogram.

    Returns the upper edge of the first bin where the cumulative count reaches ``quantile * m``
    (``m`` is the public number of trajectories): an estimate that is >= the true quantile when
    the counts are exact. Underflow returns ``lo``; a quantile beyond ``hi`` returns ``hi``.
    """
    q = check_probability("histogram_quantile", "quantile", quantile)
    m_ = check_int("histogram_quantile", "m", m, ge=1)
    counts = np.asarray(noisy_counts, dtype=np.float64)
    edges = grid.edges()
    if counts.shape != (len(edges) + 1,):
        raise ConfigError(
            f"histogram_quantile needs {len(edges) + 1} counts for this grid; got {counts.shape}."
        )
    cum = np.cumsum(counts)
    hit = np.nonzero(cum >= q * m_)[0]
    if len(hit) == 0:
        return float(grid.hi)
    i = int(hit[0])
    return float(edges[min(i, len(edges) - 1)])


def private_quantile(values: np.ndarray, quantile: float, *, grid: LogGrid, noise_multiplier: float,
                     rng: np.random.Generator) -> float:
    """A DP estimate of the ``quantile`` of ``values`` (one noisy histogram, then post-processing).

    Privacy: :func:`quantile_dp_event` ``(noise_multiplier)`` under add/remove-one adjacency; the
    number of values ``m`` is treated as public (as everywhere in gpope, DESIGN.md 4).
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(v) == 0:
        raise DataError("A private quantile needs at least one value; got none.")
    noisy = noisy_histogram(v, grid, noise_multiplier, rng)
    return histogram_quantile(noisy, grid, quantile, len(v))

"""Privacy-loss-distribution accounting of Poisson-sampled GPOPE with an adaptive grid.

dp-accounting's PLD accountant discretises the privacy loss on a grid of step
``value_discretization_interval``; every grid gives a valid (pessimistic) upper bound on epsilon,
finer grids give tighter bounds at a cost that grows like ``1/interval`` in time and memory. At
tiny sampling rates and many steps the default grid (1e-4) over-reports epsilon by up to ~75 %
(reference/ACCOUNTING.md), so :func:`pld_epsilon_adaptive` walks a ladder of grids, coarse to
fine, until the estimated remaining improvement drops below a relative tolerance or the next grid
would exceed the resource bound. The reported epsilon is the smallest value that one of the
evaluated grids certifies, so it is never below a certified bound.

Resource bound. One evaluation builds the per-step PLD on every grid point and self-composes
it with one FFT whose length a Chernoff bound fixes (:mod:`.pld_kernels`); the FFT length sets
the peak memory (~80 bytes a point) before any support bound can be checked, so
:func:`pld_cost` PREDICTS both sizes from dp-accounting's public privacy-loss API before
anything is allocated. A grid whose prediction exceeds ``PLDGrid.max_step_points`` or
``PLDGrid.max_points`` is never evaluated: it counts as "not certified" (epsilon inf), and the
caller falls back to RDP. The answer is a deterministic function of the inputs (no wall-clock
limits).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy.optimize import brentq
from scipy.special import logsumexp, ndtr

from gpope.core.accounting.pld_kernels import (
    chernoff_window,
    epsilon_for_delta,
    self_compose,
    step_pmfs,
)
from gpope.core.validation import check_int, check_number

__all__ = ["DEFAULT_PLD_GRID", "PLDCost", "PLDEstimate", "PLDGrid", "gdp_sigma_guess", "pld_cost",
           "pld_epsilon", "pld_epsilon_adaptive"]


@dataclass(frozen=True)
class PLDGrid:
    """How :func:`pld_epsilon_adaptive` refines the PLD discretisation: grids from
    ``initial_interval`` down to ``finest_interval``, each ``refine_factor`` finer, until the
    extrapolated remaining relative improvement is at most ``rtol``; a grid whose predicted FFT
    length (:func:`pld_cost`) exceeds ``max_points`` (memory) or whose per-step PLD exceeds
    ``max_step_points`` (time) is never evaluated."""

    initial_interval: float = 1e-3
    finest_interval: float = 1e-6
    refine_factor: float = math.sqrt(10.0)
    rtol: float = 0.02
    max_points: int = 12_000_000
    max_step_points: int = 500_000

    def __post_init__(self) -> None:
        check_number("PLDGrid", "initial_interval", self.initial_interval, gt=0.0, le=1.0)
        check_number(
            "PLDGrid", "finest_interval", self.finest_interval, gt=0.0, le=self.initial_interval
        )
        check_number("PLDGrid", "refine_factor", self.refine_factor, gt=1.0)
        check_number("PLDGrid", "rtol", self.rtol, gt=0.0, lt=1.0)
        check_int("PLDGrid", "max_points", self.max_points, ge=1000)
        check_int("PLDGrid", "max_step_points", self.max_step_points, ge=10)

    def ladder(self) -> tuple[float, ...]:
        """The grid intervals, coarse to fine (rounded to 3 significant digits)."""
        out: list[float] = []
        interval = self.initial_interval
        while interval >= self.finest_interval * (1.0 - 1e-9):
            out.append(float(f"{interval:.3g}"))
            interval /= self.refine_factor
        return tuple(out)


DEFAULT_PLD_GRID = PLDGrid()


@dataclass(frozen=True)
class PLDEstimate:
    """Result of :func:`pld_epsilon_adaptive`: the smallest ``epsilon`` certified by one of the
    evaluated grids and that grid (``interval``), every ``(interval, epsilon)`` evaluated, whether
    the tolerance rule stopped the ladder (``converged``), the first grid ``skipped`` for its
    predicted cost (``epsilon`` is inf when even the coarsest was), and the first ``unstable`` grid,
    whose epsilon rose above the coarser grid's by more than ``rtol`` (a floating-point breakdown of
    the FFT composition; discarded, and the ladder stops there)."""

    epsilon: float
    interval: float
    evaluated: tuple[tuple[float, float], ...]
    converged: bool
    skipped: float | None = None
    unstable: float | None = None


@dataclass(frozen=True)
class PLDCost:
    """Predicted size of one PLD evaluation before anything is allocated: the per-step PLD's points
    (exact) and the N-fold self-composition's FFT length (with a safety factor)."""

    step_points: int
    fft_points: int

    def within(self, grid: PLDGrid) -> bool:
        """True when ``grid``'s resource bounds allow this evaluation."""
        return self.step_points <= grid.max_step_points and self.fft_points <= grid.max_points


_FFT_SAFETY = 4.0  # measured: predictions within a factor 3.3 of dp-accounting's FFT length


@functools.lru_cache(maxsize=4096)
def pld_cost(batch_rate: float, iterations: int, sigma: float, interval: float) -> PLDCost:
    """Predicted :class:`PLDCost` of :func:`pld_epsilon` (public dp-accounting API only).

    For each adjacency (remove, add) of the Poisson-subsampled Gaussian: the per-step support is
    ``ceil(eps_upper / interval) - floor(eps_lower / interval) + 1`` from
    ``GaussianPrivacyLoss.connect_dots_bounds()``; the FFT length is the Chernoff bound that
    ``dp_accounting.pld.common.compute_self_convolve_bounds`` applies (orders +-1..20 over the
    support, tail mass 1e-15), evaluated on a 2000-cell quadrature of the privacy loss under the
    upper distribution, times a safety factor of 4. Costs milliseconds.
    """
    step = 0
    fft = 0
    for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD):
        loss = plm.GaussianPrivacyLoss(sigma, sampling_prob=batch_rate, adjacency_type=adjacency,
                                       log_mass_truncation_bound=-50)
        bounds = loss.connect_dots_bounds()
        lo = math.floor(bounds.epsilon_lower / interval)
        size = math.ceil(bounds.epsilon_upper / interval) - lo + 1
        tail = loss.privacy_loss_tail()
        xs = np.linspace(tail.lower_x_truncation, tail.upper_x_truncation, 2001)
        probs = np.maximum(np.diff(np.asarray(loss.mu_upper_cdf(xs), dtype=np.float64)), 0.0)
        mids = 0.5 * (xs[1:] + xs[:-1])
        idx = np.array([loss.privacy_loss(float(x)) for x in mids]) / interval - lo
        keep = probs > 0
        orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / size
        log_mgf = [float(logsumexp(idx[keep] * o, b=probs[keep])) for o in orders]
        lower, upper = chernoff_window(orders, np.asarray(log_mgf), iterations, size)
        step = max(step, size)
        fft = max(fft, int(_FFT_SAFETY * max(upper - lower + 1, size)) + 2048)
    return PLDCost(step_points=step, fft_points=fft)


@functools.lru_cache(maxsize=4096)
def _pld_eval(batch_rate: float, iterations: int, sigma: float, delta: float, interval: float,
              max_step_points: int, max_points: int) -> float | None:
    """Epsilon of PLDAccountant at one grid, or None when its predicted cost is too large.

    The per-step (remove, add) PMFs are exactly those dp-accounting's PLDAccountant builds for
    this event; each is composed and read in turn (:mod:`.pld_kernels`), and the epsilon is the
    larger of the two, as in ``PrivacyLossDistribution.get_epsilon_for_delta``.
    """
    cost = pld_cost(batch_rate, iterations, sigma, interval)
    if cost.step_points > max_step_points or cost.fft_points > max_points:
        return None
    eps = 0.0
    for pmf in step_pmfs(batch_rate, sigma, interval):
        eps = max(eps, epsilon_for_delta(self_compose(pmf, iterations), delta))
    return float(eps)


def pld_epsilon(*, batch_rate: float, iterations: int, sigma: float, delta: float, interval: float,
                grid: PLDGrid = DEFAULT_PLD_GRID) -> float:
    """Epsilon certified by dp-accounting's PLD accountant at grid ``interval`` (cached).

    The event is ``SelfComposedDpEvent(PoissonSampledDpEvent(batch_rate, GaussianDpEvent(sigma)),
    iterations)`` under add/remove adjacency. Inputs are assumed validated. Returns inf (nothing
    certified) without computing anything when :func:`pld_cost` exceeds ``grid``'s bounds.
    """
    eps = _pld_eval(batch_rate, iterations, sigma, delta, interval, grid.max_step_points,
                    grid.max_points)
    return math.inf if eps is None else eps


@functools.lru_cache(maxsize=1024)
def pld_epsilon_adaptive(*, batch_rate: float, iterations: int, sigma: float, delta: float,
                         grid: PLDGrid = DEFAULT_PLD_GRID) -> PLDEstimate:
    """PLD epsilon with the grid refined until it stabilises (see the module docstring).

    Guarantee: ``epsilon`` equals :func:`pld_epsilon` at ``interval``, a valid upper bound (inf
    when no grid could be evaluated within the resource bound). Stops when the extrapolated
    remaining improvement ``d_k r / (1 - r)`` (``d_k`` the last decrease, ``r`` the ratio of the
    last two decreases, ``r = 1/2`` when only one is known) is at most ``grid.rtol`` times
    epsilon; before a grid whose predicted cost exceeds the bound; at a grid whose epsilon
    rises above the coarser grid's by more than ``grid.rtol`` (discarded: see
    :attr:`PLDEstimate.unstable`); or at the finest grid.
    """
    ladder = grid.ladder()
    evaluated: list[tuple[float, float]] = []
    best_eps, best_interval = math.inf, ladder[0]
    converged = False
    skipped: float | None = None
    unstable: float | None = None
    for k, interval in enumerate(ladder):
        eps_or_none = _pld_eval(batch_rate, iterations, sigma, delta, interval,
                                grid.max_step_points, grid.max_points)
        if eps_or_none is None:
            skipped = interval
            break
        eps = eps_or_none
        if evaluated and math.isfinite(evaluated[-1][1]) and eps > evaluated[-1][1] * (1 + grid.rtol):
            unstable = interval  # a finer grid never loosens the bound by this much
            break
        evaluated.append((interval, eps))
        if eps <= best_eps:
            best_eps, best_interval = eps, interval
        if k >= 1:
            prev = evaluated[k - 1][1]
            if math.isinf(eps) and math.isinf(prev):
                break  # no grid will make this finite
            if math.isfinite(prev):
                drop = prev - eps
                if k >= 2 and math.isfinite(evaluated[k - 2][1]):
                    drop_prev = evaluated[k - 2][1] - prev
                    ratio = drop / drop_prev if drop_prev > 0 else 0.5
                else:
                    ratio = 0.5
                ratio = min(max(ratio, 0.0), 0.9)
                remaining = drop * ratio / (1.0 - ratio)
                if remaining <= grid.rtol * best_eps:
                    converged = True
                    break
    return PLDEstimate(epsilon=best_eps, interval=best_interval, evaluated=tuple(evaluated),
                       converged=converged, skipped=skipped, unstable=unstable)


def _gdp_delta(mu: float, epsilon: float) -> float:
    """delta(epsilon) of mu-Gaussian DP (Dong, Roth, Su 2019, Cor. 2.13)."""
    return float(ndtr(-epsilon / mu + mu / 2.0) - math.exp(epsilon) * ndtr(-epsilon / mu - mu / 2.0))


def gdp_sigma_guess(*, batch_rate: float, iterations: int, epsilon: float, delta: float) -> float:
    """Starting point for calibration from the central-limit (Gaussian DP) approximation.

    Poisson-subsampled Gaussian composed ``N`` times is approximately mu-GDP with
    ``mu = q sqrt(N (e^{1/sigma^2} - 1))`` (Bu, Dong, Long, Su 2020). Only a guess: it is not a
    bound and is never reported.
    """
    hi = 50.0
    if _gdp_delta(hi, epsilon) < delta:  # pragma: no cover - absurdly loose target
        return 0.1
    mu = brentq(lambda u: _gdp_delta(u, epsilon) - delta, 1e-8, hi, xtol=1e-10)
    ratio = (mu / batch_rate) ** 2 / iterations
    return 1.0 / math.sqrt(math.log1p(ratio))

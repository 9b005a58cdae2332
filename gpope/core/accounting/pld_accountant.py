"""The PLD accountant: privacy loss distributions of the GPOPE run, with an RDP fallback.

The epsilon is ``min(PLD, RDP)`` of the same event, both valid upper bounds. RDP takes over (with
a note, :class:`Certificate`) when PLD cannot certify: a grid too expensive for the resource
bound (:mod:`.pld`), or a delta below PLD's truncated tail mass. PLD calibration starts from the
RDP answer and only searches below it, so it never evaluates the tiny noise multipliers whose
PLDs are huge. Poisson sampling only (dp-accounting's PLD has no sampling without replacement).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import dp_accounting
from dp_accounting.pld import PLDAccountant

from gpope.core.accounting.pld import (
    PLDGrid,
    gdp_sigma_guess,
    pld_cost,
    pld_epsilon,
    pld_epsilon_adaptive,
)
from gpope.core.accounting.rdp import ACCOUNTANT as RDP
from gpope.core.accounting.rdp import rdp_epsilon
from gpope.core.accounting.registry import Certificate, RunShape
from gpope.core.accounting.search import log_gap, search

__all__ = ["ACCOUNTANT", "EVENT_INTERVAL", "PldRunAccountant"]

#: PLD discretisation of a composed event (:meth:`PldRunAccountant.event_epsilon`): a valid,
#: slightly pessimistic grid.
EVENT_INTERVAL = 1e-4


def _pld_or_rdp(
    m: int, iterations: int, sigma: float, delta: float, q: float, grid: PLDGrid
) -> Certificate:
    """The smaller of the two valid bounds, and which one it is."""
    est = pld_epsilon_adaptive(batch_rate=q, iterations=iterations, sigma=sigma, delta=delta,
                               grid=grid)
    rdp = rdp_epsilon(m, iterations, sigma, delta, "poisson", q)
    if est.epsilon <= rdp:
        return Certificate(est.epsilon, "pld", "", est.interval)
    if math.isinf(est.epsilon) and est.skipped is not None:
        why = (f"PLD could not certify within its resource bound (grid {est.skipped:g} "
               "predicted too large)")
    else:
        why = (f"PLD certifies only epsilon {est.epsilon:.4g} (e.g. delta below its truncated "
               "tail mass)")
    return Certificate(rdp, "rdp", f"{why}; the RDP bound {rdp:.4g} of the same event is used")


def _on_grids(q: float, n: int, delta: float, grid: PLDGrid,
              levels: list[float]) -> Callable[[float], float]:
    """PLD epsilon of sigma on the finest of ``levels`` within the resource bound at sigma.

    Smaller sigma -> coarser grid -> larger epsilon, so the function stays decreasing in sigma.
    """
    def f(s: float) -> float:
        for interval in reversed(levels):
            if pld_cost(q, n, s, interval).within(grid):
                return pld_epsilon(batch_rate=q, iterations=n, sigma=s, delta=delta,
                                   interval=interval, grid=grid)
        return math.inf

    return f


_AIM = -0.02  # the fine phase aims at log(eps / target) = -2 %: inside the target
_CLOSE = -0.035  # and stops once certified within 3.5 % of it in epsilon (about 1.3 % in sigma)
_COARSE_XTOL = 0.01  # the coarse root only seeds the fine phase: 1 % in sigma is enough


def _extrapolate(values: list[float]) -> float | None:
    """The next finer grid's epsilon predicted from four grids' (coarse to fine), or None: the
    differences shrink roughly geometrically, the next ratio taken as ``r2^2 / r1`` (at most 0.9).
    A seed for the fine phase only; nothing is certified by it."""
    if len(values) != 4 or not all(math.isfinite(v) for v in values):
        return None
    d = [values[i - 1] - values[i] for i in range(1, 4)]
    if min(d) <= 0.0:
        return None
    r1, r2 = d[1] / d[0], d[2] / d[1]
    return values[-1] - d[2] * min(r2 * r2 / r1, 0.9)


def _slope(seen: dict[float, float], sigma: float, epsilon: float,
           f: Callable[[float], float]) -> float:
    """d log eps / d log sigma at ``sigma``: from the nearest other point the search evaluated
    (within 5 %), else from one more evaluation 2 % below ``sigma``."""
    near = [s for s, e in seen.items() if s != sigma and math.isfinite(e) and e > 0
            and abs(math.log(s / sigma)) <= 0.05]
    other = min(near, key=lambda s: abs(math.log(s / sigma))) if near else sigma * 0.98
    return (log_gap(f(other), epsilon) - log_gap(f(sigma), epsilon)) / math.log(other / sigma)


def _refine(fine: Callable[[float], float], slope: float, sigma: float, epsilon: float,
            predicted: float, evaluations: int = 3) -> float:
    """Lower ``sigma`` (certified on a coarser grid) to the root on ``fine`` in a few evaluations:
    Newton steps in (log sigma, log eps) from the ``predicted`` fine-grid epsilon with the coarse
    grid's ``slope``, then secant steps; the smallest evaluated sigma ``fine`` certifies (``sigma``
    itself when none is)."""
    if not (math.isfinite(slope) and slope < 0.0 and math.isfinite(predicted)):
        return sigma
    x0, y0 = math.log(sigma), log_gap(predicted, epsilon)
    best = sigma
    x_hi = y_hi = x_lo = y_lo = None
    x = x0 + (_AIM - y0) / slope
    for _ in range(evaluations):
        y = log_gap(fine(math.exp(x)), epsilon)
        if y <= 0.0:
            best = min(best, math.exp(x))
            if y >= _CLOSE:
                break
            x_hi, y_hi = x, y
        else:
            x_lo, y_lo = x, y
        if x_hi is not None and x_lo is not None and math.isfinite(y_lo) and y_lo != y_hi:
            x = x_hi + (_AIM - y_hi) * (x_lo - x_hi) / (y_lo - y_hi)
        else:
            x = x + (_AIM - y) / slope if math.isfinite(y) else 0.5 * (x + x0)
    return best


@functools.lru_cache(maxsize=256)
def _calibrate_pld(run: RunShape, epsilon: float) -> float:
    """PLD calibration below the RDP answer, certified by the epsilon that epsilon_spent reports.

    1. The RDP sigma (cheap, certified) is an upper end; the adaptive PLD estimate at it picks the
       finest grid (if PLD does not certify even that sigma, RDP is the answer).
    2. Solve ``pld_epsilon(sigma) = epsilon`` to 1 % on the grid one step coarser than the finest
       affordable near the answer: a certified upper end near the root, and the local slope.
    3. Predict the finest grid's epsilon there from coarser grids and take Newton/secant steps on
       the finest grid (:func:`_refine`), whose evaluations cost seconds at tiny q.
    4. Check with the reported epsilon (min of adaptive PLD and RDP) and raise sigma if needed, so
       ``epsilon_spent(calibrate_sigma(e)) <= e`` always holds.
    """
    m, n, delta, q, grid = run.m, run.iterations, run.delta, run.batch_rate, run.pld_grid
    sigma_rdp = RDP.calibrate(run, epsilon)
    est = pld_epsilon_adaptive(batch_rate=q, iterations=n, sigma=sigma_rdp, delta=delta,
                               grid=grid)
    if est.epsilon > epsilon:
        return sigma_rdp

    ladder = [g for g in grid.ladder() if g >= est.interval]
    clt = gdp_sigma_guess(batch_rate=q, iterations=n, epsilon=epsilon, delta=delta)
    guess = min(max(clt, 0.3 * sigma_rdp), 0.9 * sigma_rdp)
    # the finest grid affordable near the answer (the CLT guess), and ten times coarser
    probe = min(clt, guess)
    finest = max((k for k, g in enumerate(ladder) if pld_cost(q, n, probe, g).within(grid)),
                 default=0)
    fine = _on_grids(q, n, delta, grid, ladder[:finest + 1])
    if finest >= 1:
        on_coarse = _on_grids(q, n, delta, grid, ladder[:finest])
        seen: dict[float, float] = {}

        def coarse(s: float) -> float:
            seen[s] = on_coarse(s)
            return seen[s]

        e_up = coarse(sigma_rdp)
        sigma = sigma_rdp if e_up > epsilon else min(
            search(coarse, epsilon, guess, sigma_rdp, e_up, _COARSE_XTOL), sigma_rdp)
        slope = _slope(seen, sigma, epsilon, coarse)
        coarser = [_on_grids(q, n, delta, grid, ladder[:k + 1])(sigma)
                   for k in range(max(0, finest - 4), finest)]
        predicted = _extrapolate(coarser)
        sigma = _refine(fine, slope, sigma, epsilon,
                        fine(sigma) if predicted is None else predicted)
    else:
        sigma = search(fine, epsilon, guess, sigma_rdp, est.epsilon)
    sigma = min(sigma, sigma_rdp)
    for _ in range(20):
        reported = _pld_or_rdp(m, n, sigma, delta, q, grid).epsilon
        if reported <= epsilon or sigma >= sigma_rdp:
            return sigma if reported <= epsilon else sigma_rdp
        sigma = min(sigma_rdp, sigma * (1.0 + max(log_gap(reported, epsilon), 2e-3)))
    return sigma_rdp  # pragma: no cover - defensive: certified by RDP


class PldRunAccountant:
    """:class:`gpope.core.accounting.registry.PrivacyAccountant` of privacy loss distributions
    (Poisson sampling), certified by ``min(PLD, RDP)``."""

    def epsilon(self, run: RunShape, sigma: float) -> float:
        return self.certify(run, sigma).epsilon

    def certify(self, run: RunShape, sigma: float) -> Certificate:
        return _pld_or_rdp(run.m, run.iterations, sigma, run.delta, run.batch_rate,  # type: ignore[arg-type]
                           run.pld_grid)

    def calibrate(self, run: RunShape, epsilon: float) -> float:
        """Certified at the grid :meth:`certify` uses for it (see :func:`_calibrate_pld`)."""
        return _calibrate_pld(run, epsilon)

    def event_epsilon(self, event: Any, delta: float,
                      relation: dp_accounting.NeighboringRelation) -> float:
        acc = PLDAccountant(neighboring_relation=relation,
                            value_discretization_interval=EVENT_INTERVAL)
        acc.compose(event)
        return float(acc.get_epsilon(delta))


ACCOUNTANT = PldRunAccountant()

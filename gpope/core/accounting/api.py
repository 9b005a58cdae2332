"""Public entry points: epsilon for a noise multiplier, and the noise multiplier for an epsilon.

Both go through the same accountant functions, so a calibrated sigma is certified by exactly the
computation that later reports its epsilon: ``epsilon_spent(calibrate_sigma(e)) <= e`` always.

PLD with an RDP fallback: the ``"pld"`` epsilon is ``min(PLD, RDP)`` of the same event, both valid
upper bounds, so the minimum is one too. RDP takes over (with a note, see :func:`calibrate`) when
PLD cannot certify: a grid too expensive for the resource bound (:mod:`.pld`), or a delta below
PLD's truncated tail mass (at delta = 1e-30 PLD needs sigma ~791 where RDP certifies 2.3).
PLD calibration starts from the RDP answer and only searches below it, so it never evaluates the
tiny noise multipliers whose PLDs are huge.

Calibrations are cached on disk (:mod:`.cache`); a cached sigma is re-certified by one
evaluation of the recorded accountant and grid before it is used.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS, compute_epsilon

from gpope.core.accounting._common import (
    ACCOUNTANTS,
    Accountant,
    Sampling,
    check_common,
    neighboring_relation,
    resolve_accountant,
    step_event,
)
from gpope.core.accounting.cache import load_calibration, store_calibration
from gpope.core.accounting.paper import paper_epsilon, paper_sigma
from gpope.core.accounting.pld import (
    DEFAULT_PLD_GRID,
    PLDGrid,
    gdp_sigma_guess,
    pld_cost,
    pld_epsilon,
    pld_epsilon_adaptive,
)
from gpope.core.validation import check_choice, check_number
from gpope.errors import AccountingError, ConfigError

__all__ = [
    "RDP_ORDERS",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "Calibration",
    "PrivacySpend",
    "calibrate",
    "calibrate_sigma",
    "epsilon_spent",
    "privacy_spend",
]

#: Calibration searches sigma in [SIGMA_MIN, SIGMA_MAX]. If even SIGMA_MIN meets the target,
#: SIGMA_MIN is returned (certified, though a smaller sigma might also do).
SIGMA_MIN = 0.05
SIGMA_MAX = 1e4

#: RDP orders: dp-accounting's defaults plus a denser set above 63. Every order gives a valid
#: bound, so more orders only tighten the minimum; without them the best order for small epsilon
#: (64-128) is missing and sigma comes out ~30 % too large.
RDP_ORDERS: tuple[float, ...] = tuple(
    sorted(
        set(DEFAULT_RDP_ORDERS)
        | {64, 72, 80, 88, 96, 112, 128, 144, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768}
        | {1024, 1536, 2048, 3072, 4096}
    )
)

_XTOL = 2e-3  # relative width of the final bisection bracket on sigma


@dataclass(frozen=True)
class PrivacySpend:
    """The privacy spent by one GPOPE run, as certified by ``accountant``.

    Attributes:
        epsilon, delta: the (epsilon, delta)-DP guarantee (for ``accountant="paper"``: the paper's
            formula, not a valid guarantee).
        accountant: the resolved accountant (``"paper"``, ``"rdp"`` or ``"pld"``).
        sampling: ``"uniform"`` or ``"poisson"``.
        sigma: noise multiplier relative to the clip bound.
        m: number of trajectories; iterations: number of noisy steps.
        batch_rate: Poisson rate, ``None`` for uniform sampling.
    """

    epsilon: float
    delta: float
    accountant: str
    sampling: str
    sigma: float
    m: int
    iterations: int
    batch_rate: float | None = None

    def __post_init__(self) -> None:
        owner = "PrivacySpend"
        check_number(owner, "epsilon", self.epsilon, ge=0.0)
        check_common(
            owner, m=self.m, iterations=self.iterations, delta=self.delta,
            sampling=self.sampling, batch_rate=self.batch_rate,
        )
        check_choice(owner, "accountant", self.accountant, ("paper", "rdp", "pld"))
        check_number(owner, "sigma", self.sigma, gt=0.0)

    @property
    def dp_event(self) -> dp_accounting.DpEvent:
        """The composed dp-accounting event of the run (see ``gpope_dp_event``)."""
        step = step_event(
            m=self.m, sigma=self.sigma, sampling=self.sampling, batch_rate=self.batch_rate
        )
        return dp_accounting.SelfComposedDpEvent(event=step, count=self.iterations)


def _validate(
    owner: str, *, m: object, iterations: object, delta: object, accountant: object,
    sampling: object, batch_rate: object, pld_grid: object,
) -> tuple[int, int, float, str, str, float | None]:
    m_, n_, d_, s_, q = check_common(
        owner, m=m, iterations=iterations, delta=delta, sampling=sampling, batch_rate=batch_rate
    )
    check_choice(owner, "accountant", accountant, ACCOUNTANTS)
    if not isinstance(pld_grid, PLDGrid):
        raise ConfigError(
            f"The 'pld_grid' parameter of {owner} must be a PLDGrid. Got {pld_grid!r} instead."
        )
    return m_, n_, d_, s_, resolve_accountant(accountant, s_), q  # type: ignore[arg-type]


@functools.lru_cache(maxsize=4096)
def _rdp_step(m: int, sigma: float, sampling: str, batch_rate: float | None) -> tuple[float, ...]:
    """RDP curve (at RDP_ORDERS) of one step, from dp-accounting; cached across N."""
    accountant = RdpAccountant(
        orders=RDP_ORDERS, neighboring_relation=neighboring_relation(sampling)
    )
    accountant.compose(step_event(m=m, sigma=sigma, sampling=sampling, batch_rate=batch_rate))
    return tuple(float(v) for v in accountant.rdp)


def _rdp_epsilon(
    m: int, iterations: int, sigma: float, delta: float, sampling: str, batch_rate: float | None
) -> float:
    """Epsilon of ``SelfComposedDpEvent(step, N)`` under RdpAccountant(RDP_ORDERS).

    Same arithmetic as composing the self-composed event (the accountant adds ``N * rdp_step``
    and converts with ``compute_epsilon``), with the per-step curve cached.
    """
    step = np.asarray(_rdp_step(m, sigma, sampling, batch_rate))
    return float(compute_epsilon(RDP_ORDERS, iterations * step, delta)[0])


def _epsilon(
    accountant: str, m: int, iterations: int, sigma: float, delta: float, sampling: str,
    batch_rate: float | None, pld_grid: PLDGrid,
) -> float:
    if accountant == "paper":
        return paper_epsilon(m=m, iterations=iterations, sigma=sigma, delta=delta)
    if accountant == "rdp":
        return _rdp_epsilon(m, iterations, sigma, delta, sampling, batch_rate)
    return _pld_or_rdp(m, iterations, sigma, delta, batch_rate, pld_grid)[0]  # type: ignore[arg-type]


def _pld_or_rdp(
    m: int, iterations: int, sigma: float, delta: float, q: float, grid: PLDGrid
) -> tuple[float, str, float | None, str]:
    """(epsilon, "pld"|"rdp", PLD grid or None, note): the smaller of the two valid bounds."""
    est = pld_epsilon_adaptive(batch_rate=q, iterations=iterations, sigma=sigma, delta=delta,
                               grid=grid)
    rdp = _rdp_epsilon(m, iterations, sigma, delta, "poisson", q)
    if est.epsilon <= rdp:
        return est.epsilon, "pld", est.interval, ""
    if math.isinf(est.epsilon) and est.skipped is not None:
        why = (f"PLD could not certify within its resource bound (grid {est.skipped:g} "
               "predicted too large)")
    else:
        why = (f"PLD certifies only epsilon {est.epsilon:.4g} (e.g. delta below its truncated "
               "tail mass)")
    return rdp, "rdp", None, f"{why}; the RDP bound {rdp:.4g} of the same event is used"


def epsilon_spent(
    *,
    m: int,
    iterations: int,
    sigma: float,
    delta: float,
    accountant: Accountant = "auto",
    sampling: Sampling = "uniform",
    batch_rate: float | None = None,
    pld_grid: PLDGrid = DEFAULT_PLD_GRID,
) -> float:
    """Epsilon of a GPOPE run with noise multiplier ``sigma`` at the given ``delta``.

    Args:
        m: number of trajectories (public), ``>= 1``.
        iterations: number of noisy steps ``N``, ``>= 1``.
        sigma: noise multiplier relative to the clip bound ``h`` (noise std ``h * sigma``).
        delta: target delta in (0, 1).
        accountant: ``"auto"`` (tightest rigorous for the sampling, see
            :func:`resolve_accountant`), ``"rdp"``, ``"pld"`` or ``"paper"`` (the paper's Lemma 1
            used literally: NOT a valid upper bound, for reproducing the paper only).
        sampling: ``"uniform"`` (one trajectory per step, replace-one adjacency, sensitivity
            ``2h``) or ``"poisson"`` (rate ``batch_rate``, add/remove adjacency, sensitivity ``h``).
        batch_rate: the Poisson rate ``q`` in (0, 1]; must be ``None`` for uniform sampling.
        pld_grid: how the PLD grid is refined (PLD only).

    Returns:
        The certified epsilon (``inf`` if no finite epsilon is certified). ``"rdp"`` and
        ``"pld"`` are rigorous upper bounds; PLD reports the smallest value certified by the
        grids it evaluated.

    Raises:
        ConfigError: invalid inputs (house message form).
        AccountingError: unsupported accountant/sampling pair.
    """
    owner = "epsilon_spent"
    m_, n_, d_, s_, acc, q = _validate(
        owner, m=m, iterations=iterations, delta=delta, accountant=accountant, sampling=sampling,
        batch_rate=batch_rate, pld_grid=pld_grid,
    )
    sigma_ = check_number(owner, "sigma", sigma, gt=0.0)
    return _epsilon(acc, m_, n_, sigma_, d_, s_, q, pld_grid)  # type: ignore[arg-type]


def privacy_spend(
    *,
    m: int,
    iterations: int,
    sigma: float,
    delta: float,
    accountant: Accountant = "auto",
    sampling: Sampling = "uniform",
    batch_rate: float | None = None,
) -> PrivacySpend:
    """:func:`epsilon_spent` wrapped in a :class:`PrivacySpend` record (accountant resolved)."""
    eps = epsilon_spent(
        m=m, iterations=iterations, sigma=sigma, delta=delta, accountant=accountant,
        sampling=sampling, batch_rate=batch_rate,
    )
    return PrivacySpend(
        epsilon=eps, delta=float(delta), accountant=resolve_accountant(accountant, sampling),
        sampling=sampling, sigma=float(sigma), m=int(m), iterations=int(iterations),
        batch_rate=None if batch_rate is None else float(batch_rate),
    )


# --------------------------------------------------------------------------- root finding


def _log_gap(eps: float, target: float) -> float:
    """log(eps / target): > 0 means the target is missed."""
    if eps <= 0.0:
        return -math.inf
    return math.log(eps) - math.log(target)


def _bracket(
    f: Callable[[float], float], target: float, guess: float, step: float = 1.05
) -> tuple[float, float, float, float] | float:
    """Find lo < hi with f(lo) > target >= f(hi) around ``guess``; returns (lo, f_lo, hi, f_hi).

    Steps away from ``guess`` by factors ``step, step^2, step^4, ...`` so a good guess costs two
    evaluations. Returns a single float (SIGMA_MIN) when even SIGMA_MIN meets the target.
    """
    s = min(max(guess, SIGMA_MIN), SIGMA_MAX)
    e = f(s)
    factor = step
    if e <= target:
        hi, e_hi = s, e
        while True:
            if hi <= SIGMA_MIN:
                return SIGMA_MIN
            lo = max(hi / factor, SIGMA_MIN)
            e_lo = f(lo)
            if e_lo > target:
                return lo, e_lo, hi, e_hi
            hi, e_hi = lo, e_lo
            factor *= factor
    lo, e_lo = s, e
    while True:
        if lo >= SIGMA_MAX:
            raise AccountingError(
                f"No noise multiplier up to {SIGMA_MAX:g} reaches epsilon <= {target!r} "
                f"(epsilon at sigma={SIGMA_MAX:g} is {e_lo!r}). Raise epsilon or delta, or "
                "lower the number of iterations."
            )
        hi = min(lo * factor, SIGMA_MAX)
        e_hi = f(hi)
        if e_hi <= target:
            return lo, e_lo, hi, e_hi
        lo, e_lo = hi, e_hi
        factor *= factor


def _solve(
    f: Callable[[float], float],
    target: float,
    bracket: tuple[float, float, float, float],
    xtol: float = _XTOL,
) -> tuple[float, float]:
    """Sigma with f(sigma) <= target, within ``xtol`` (relative) of the root; (sigma, f(sigma)).

    Illinois (safeguarded regula falsi) on ``log f - log target`` against ``log sigma``, with a
    bisection step whenever a value is infinite. Stops when the bracket is narrower than ``xtol``
    or the secant through the true end values puts the root within ``xtol / 2`` below the upper
    end. The returned sigma always satisfies ``f(sigma) <= target`` (the bracket's upper end).
    """
    lo, e_lo, hi, e_hi = bracket
    x_lo, x_hi = math.log(lo), math.log(hi)
    y_lo, y_hi = _log_gap(e_lo, target), _log_gap(e_hi, target)
    true_lo, true_hi = y_lo, y_hi  # Illinois halves y_lo / y_hi; these stay exact
    side = 0
    for _ in range(60):
        if x_hi - x_lo <= xtol:
            break
        if math.isfinite(true_lo) and math.isfinite(true_hi):
            secant = x_hi - true_hi * (x_hi - x_lo) / (true_hi - true_lo)
            if x_hi - secant <= xtol / 2.0:
                break
        if math.isfinite(y_lo) and math.isfinite(y_hi):
            x = x_hi - y_hi * (x_hi - x_lo) / (y_hi - y_lo)
            width = x_hi - x_lo  # keep the step well inside the bracket
            x = min(max(x, x_lo + 0.02 * width), x_hi - 0.02 * width)
        else:
            x = 0.5 * (x_lo + x_hi)
        e = f(math.exp(x))
        y = _log_gap(e, target)
        if y > 0.0:
            x_lo, y_lo, true_lo = x, y, y
            if side == -1:
                y_hi *= 0.5
            side = -1
        else:
            x_hi, y_hi, true_hi, e_hi = x, y, y, e
            if side == 1:
                y_lo *= 0.5
            side = 1
    return math.exp(x_hi), e_hi


# --------------------------------------------------------------------------- calibration


def _on_grids(m: int, q: float, n: int, delta: float, grid: PLDGrid,
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


def _search(f: Callable[[float], float], epsilon: float, guess: float, upper: float,
            e_upper: float, xtol: float = _XTOL) -> float:
    """Smallest sigma (within ``xtol``) with f(sigma) <= epsilon, at most ``upper`` (certified)."""
    br = _bracket(f, epsilon, guess, step=1.05)
    if isinstance(br, float):
        return br
    if br[2] > upper:  # the bracket stepped past an end that is already certified
        br = (br[0], br[1], upper, e_upper)
    return _solve(f, epsilon, br, xtol)[0]


_AIM = -0.02  # the fine phase aims at log(eps / target) = -2 %: inside the target
_CLOSE = -0.035  # and stops once certified within 3.5 % of it in epsilon (about 1.3 % in sigma)
_COARSE_XTOL = 0.01  # the coarse root only seeds the fine phase: 1 % in sigma is enough


def _extrapolate(values: list[float]) -> float | None:
    """The next finer grid's epsilon from four grids' (coarse to fine), or None.

    The differences between successive grids shrink roughly geometrically with a ratio that
    itself shrinks: the next ratio is taken as ``r2^2 / r1`` (capped at 0.9). Only a prediction
    that seeds the fine phase; nothing is certified by it.
    """
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
    return (_log_gap(f(other), epsilon) - _log_gap(f(sigma), epsilon)) / math.log(other / sigma)


def _refine(fine: Callable[[float], float], slope: float, sigma: float, epsilon: float,
            predicted: float, evaluations: int = 3) -> float:
    """Lower ``sigma`` (certified on a coarser grid) to the root on ``fine`` in a few evaluations.

    ``predicted`` is the fine-grid epsilon expected at ``sigma`` (:func:`_extrapolate`, or the
    fine value itself). Newton steps in (log sigma, log eps) with ``slope`` measured on the
    coarse grid (nearly the same curve), then secant steps on the fine values. Returns the
    smallest evaluated sigma that ``fine`` certifies; ``sigma`` itself when none is.
    """
    if not (math.isfinite(slope) and slope < 0.0 and math.isfinite(predicted)):
        return sigma
    x0, y0 = math.log(sigma), _log_gap(predicted, epsilon)
    best = sigma
    x_hi = y_hi = x_lo = y_lo = None
    x = x0 + (_AIM - y0) / slope
    for _ in range(evaluations):
        y = _log_gap(fine(math.exp(x)), epsilon)
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


def _calibrate_pld(
    m: int, q: float, n: int, epsilon: float, delta: float, grid: PLDGrid
) -> float:
    """PLD calibration below the RDP answer, certified by the epsilon that epsilon_spent reports.

    1. The RDP sigma (cheap, certified) is an upper end. The adaptive PLD estimate at it picks
       the finest grid to use; if PLD does not certify even that sigma, RDP is the answer.
    2. Solve ``pld_epsilon(sigma) = epsilon`` to 1 % for sigma <= sigma_rdp on the grid one
       ladder step coarser than the finest affordable near the answer (several times cheaper):
       a certified upper end, near the root, and the local slope of log eps in log sigma.
    3. Predict the finest grid's epsilon there from the three coarser grids (cheap) and take
       Newton/secant steps on the finest grid from that prediction (:func:`_refine`): each fine
       evaluation costs seconds at tiny q, so the search makes as few as it can (one, usually).
    4. Check the result with the reported epsilon (min of the adaptive PLD and RDP) and raise it
       if needed, so ``epsilon_spent(calibrate_sigma(e)) <= e`` always holds.
    """
    sigma_rdp = _calibrate("rdp", m, n, epsilon, delta, "poisson", q, grid)
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
    fine = _on_grids(m, q, n, delta, grid, ladder[:finest + 1])
    if finest >= 1:
        on_coarse = _on_grids(m, q, n, delta, grid, ladder[:finest])
        seen: dict[float, float] = {}

        def coarse(s: float) -> float:
            seen[s] = on_coarse(s)
            return seen[s]

        e_up = coarse(sigma_rdp)
        sigma = sigma_rdp if e_up > epsilon else min(
            _search(coarse, epsilon, guess, sigma_rdp, e_up, _COARSE_XTOL), sigma_rdp)
        slope = _slope(seen, sigma, epsilon, coarse)
        coarser = [_on_grids(m, q, n, delta, grid, ladder[:k + 1])(sigma)
                   for k in range(max(0, finest - 4), finest)]
        predicted = _extrapolate(coarser)
        sigma = _refine(fine, slope, sigma, epsilon,
                        fine(sigma) if predicted is None else predicted)
    else:
        sigma = _search(fine, epsilon, guess, sigma_rdp, est.epsilon)
    sigma = min(sigma, sigma_rdp)
    for _ in range(20):
        reported = _pld_or_rdp(m, n, sigma, delta, q, grid)[0]
        if reported <= epsilon or sigma >= sigma_rdp:
            return sigma if reported <= epsilon else sigma_rdp
        sigma = min(sigma_rdp, sigma * (1.0 + max(_log_gap(reported, epsilon), 2e-3)))
    return sigma_rdp  # pragma: no cover - defensive: certified by RDP


def calibrate_sigma(
    *,
    m: int,
    iterations: int,
    epsilon: float,
    delta: float,
    accountant: Accountant = "auto",
    sampling: Sampling = "uniform",
    batch_rate: float | None = None,
    pld_grid: PLDGrid = DEFAULT_PLD_GRID,
) -> float:
    """The smallest noise multiplier (relative to the clip bound) that meets ``epsilon``.

    Arguments as in :func:`epsilon_spent`, with the target ``epsilon > 0`` instead of ``sigma``.

    Guarantee: ``epsilon_spent(..., sigma=calibrate_sigma(...)) <= epsilon`` with the same
    arguments (the returned sigma is certified by the accountant; it is within about 0.2 % of
    the smallest such sigma for ``"rdp"``, exact up to rounding for ``"paper"``). For ``"pld"``
    the search runs on coarse grids first and refines near the answer; the result is certified at
    the grid :func:`epsilon_spent` uses for it. The search range is [``SIGMA_MIN``,
    ``SIGMA_MAX``]; ``SIGMA_MIN`` is returned if it already meets the target.

    Raises:
        ConfigError: invalid inputs (house message form).
        AccountingError: unsupported accountant/sampling pair, or no sigma up to ``SIGMA_MAX``
            meets the target.
    """
    owner = "calibrate_sigma"
    m_, n_, d_, s_, acc, q = _validate(
        owner, m=m, iterations=iterations, delta=delta, accountant=accountant, sampling=sampling,
        batch_rate=batch_rate, pld_grid=pld_grid,
    )
    eps = check_number(owner, "epsilon", epsilon, gt=0.0)
    return _calibration(acc, m_, n_, eps, d_, s_, q, pld_grid).sigma  # type: ignore[arg-type]


@dataclass(frozen=True)
class Calibration:
    """A calibrated noise multiplier and how it is certified (:func:`calibrate`).

    Attributes:
        sigma: the noise multiplier.
        epsilon: the epsilon :func:`epsilon_spent` reports for it (<= the target).
        accountant: the resolved accountant asked for (``"paper"``, ``"rdp"`` or ``"pld"``).
        certified_by: the bound that certifies ``epsilon``: ``"pld"``, ``"rdp"`` (also when
            ``"pld"`` was asked for and RDP was tighter or PLD could not certify) or ``"paper"``.
        note: why RDP stands in for PLD, or ``""``.
        interval: the PLD grid that certifies ``epsilon`` (None unless ``certified_by="pld"``).
        cached: True when read from the on-disk cache (and re-certified).
    """

    sigma: float
    epsilon: float
    accountant: str
    certified_by: str
    note: str = ""
    interval: float | None = None
    cached: bool = False


def calibrate(
    *,
    m: int,
    iterations: int,
    epsilon: float,
    delta: float,
    accountant: Accountant = "auto",
    sampling: Sampling = "uniform",
    batch_rate: float | None = None,
    pld_grid: PLDGrid = DEFAULT_PLD_GRID,
) -> Calibration:
    """:func:`calibrate_sigma` with its certificate (which bound, and a note on RDP fallback)."""
    owner = "calibrate"
    m_, n_, d_, s_, acc, q = _validate(
        owner, m=m, iterations=iterations, delta=delta, accountant=accountant, sampling=sampling,
        batch_rate=batch_rate, pld_grid=pld_grid,
    )
    eps = check_number(owner, "epsilon", epsilon, gt=0.0)
    return _calibration(acc, m_, n_, eps, d_, s_, q, pld_grid)  # type: ignore[arg-type]


def _certificate(
    acc: str, m: int, n: int, sigma: float, delta: float, sampling: str, q: float | None,
    grid: PLDGrid,
) -> tuple[float, str, str, float | None]:
    """(reported epsilon, certified_by, note, PLD grid) of ``sigma``: what epsilon_spent runs."""
    if acc == "pld":
        eps, by, interval, note = _pld_or_rdp(m, n, sigma, delta, q, grid)  # type: ignore[arg-type]
        return eps, by, note, interval
    return _epsilon(acc, m, n, sigma, delta, sampling, q, grid), acc, "", None


@functools.lru_cache(maxsize=256)
def _calibration(
    acc: str, m: int, n: int, eps: float, delta: float, sampling: str, q: float | None,
    grid: PLDGrid,
) -> Calibration:
    """Calibrate (or read the disk cache and re-certify); always ``epsilon <= eps``."""
    key = {"accountant": acc, "m": m, "iterations": n, "epsilon": eps, "delta": delta,
           "sampling": sampling, "batch_rate": q, "grid": [grid.initial_interval,
           grid.finest_interval, grid.refine_factor, grid.rtol, grid.max_points,
           grid.max_step_points], "rdp_orders": len(RDP_ORDERS)}
    cached = load_calibration(key)
    if cached is not None and math.isfinite(cached) and cached > 0:
        e, by, note, interval = _certificate(acc, m, n, cached, delta, sampling, q, grid)
        if e <= eps:  # re-certified: a stale or tampered entry is never trusted
            return Calibration(sigma=cached, epsilon=e, accountant=acc, certified_by=by,
                               note=note, interval=interval, cached=True)
    sigma = _calibrate(acc, m, n, eps, delta, sampling, q, grid)
    e, by, note, interval = _certificate(acc, m, n, sigma, delta, sampling, q, grid)
    store_calibration(key, sigma)
    return Calibration(sigma=sigma, epsilon=e, accountant=acc, certified_by=by, note=note,
                       interval=interval)


@functools.lru_cache(maxsize=256)
def _calibrate(
    acc: str, m: int, n: int, eps: float, delta: float, sampling: str, q: float | None,
    grid: PLDGrid,
) -> float:
    if acc == "paper":
        return paper_sigma(m=m, iterations=n, epsilon=eps, delta=delta)
    if acc == "pld":
        return _calibrate_pld(m, q, n, eps, delta, grid)  # type: ignore[arg-type]

    def f(s: float) -> float:
        return _rdp_epsilon(m, n, s, delta, sampling, q)

    if sampling == "uniform":
        # Sensitivity 2h at rate 1/m: about twice the (cheap) Poisson answer at q = 1/m.
        guess = 2.0 * _calibrate("rdp", m, n, eps, delta, "poisson", 1.0 / m, grid)
        br = _bracket(f, eps, guess, step=1.01)
    else:
        br = _bracket(f, eps, 1.0, step=1.5)
    if isinstance(br, float):
        return br
    return _solve(f, eps, br)[0]


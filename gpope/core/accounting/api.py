"""Public entry points: epsilon for a noise multiplier, and the noise multiplier for an epsilon.

Both go through the same accountant functions, so a calibrated sigma is certified by exactly the
computation that later reports its epsilon: ``epsilon_spent(calibrate_sigma(e)) <= e`` always.
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
from gpope.core.accounting.paper import paper_epsilon, paper_sigma
from gpope.core.accounting.pld import (
    DEFAULT_PLD_GRID,
    PLDEstimate,
    PLDGrid,
    gdp_sigma_guess,
    pld_epsilon,
    pld_epsilon_adaptive,
)
from gpope.core.validation import check_choice, check_number
from gpope.errors import AccountingError, ConfigError

__all__ = [
    "RDP_ORDERS",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "PrivacySpend",
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
    return pld_epsilon_adaptive(
        batch_rate=batch_rate, iterations=iterations, sigma=sigma, delta=delta, grid=pld_grid
    ).epsilon


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


def _calibrate_pld(q: float, n: int, epsilon: float, delta: float, grid: PLDGrid) -> float:
    """Two-grid calibration certified by the same adaptive estimate that epsilon_spent reports.

    1. Solve on the second grid of the ladder (the coarsest one is dominated by discretisation
       error, nearly flat in sigma) from the Gaussian-DP guess: cheap evaluations.
    2. Run :func:`pld_epsilon_adaptive` at that sigma: the grid where it stops is the grid
       ``epsilon_spent`` will use near the answer. Solve again on that grid, starting from step 1.
    3. Check the final sigma with :func:`pld_epsilon_adaptive` and raise it if needed, so
       ``epsilon_spent(calibrate_sigma(e)) <= e`` always holds.
    """
    ladder = grid.ladder()

    def at(interval: float) -> Callable[[float], float]:
        def f(s: float) -> float:
            return pld_epsilon(batch_rate=q, iterations=n, sigma=s, delta=delta, interval=interval)

        return f

    def adaptive(s: float) -> PLDEstimate:
        return pld_epsilon_adaptive(batch_rate=q, iterations=n, sigma=s, delta=delta, grid=grid)

    start = ladder[1] if len(ladder) > 1 else ladder[0]
    guess = gdp_sigma_guess(batch_rate=q, iterations=n, epsilon=epsilon, delta=delta)
    br = _bracket(at(start), epsilon, guess, step=1.03)
    if isinstance(br, float):
        return br
    lo, e_lo, hi, e_hi = br
    slope = -1.0  # d log eps / d log sigma near the answer
    if math.isfinite(e_lo) and e_hi > 0.0:
        slope = min(-0.05, math.log(e_hi / e_lo) / math.log(hi / lo))
    sigma, _ = _solve(at(start), epsilon, br)

    final = adaptive(sigma).evaluated[-1][0]
    if final < start:
        f = at(final)
        e_sigma = f(sigma)  # cached by the adaptive run
        if e_sigma <= epsilon:
            gap = _log_gap(e_sigma, epsilon)
            guess = sigma * math.exp(-gap / slope) if math.isfinite(gap) else sigma
            guess = min(max(guess, sigma / 1.25), sigma)
            if guess < sigma:
                e_guess = f(guess)
                if e_guess > epsilon:
                    br = (guess, e_guess, sigma, e_sigma)
                else:
                    br = _bracket(f, epsilon, guess, step=1.03)
            else:
                br = (sigma / 1.25, f(sigma / 1.25), sigma, e_sigma)
        else:  # pragma: no cover - finer grids normally certify smaller epsilons
            br = _bracket(f, epsilon, sigma, step=1.03)
        if isinstance(br, float):
            return br
        if br[1] <= epsilon:  # even sigma / 1.25 meets the target: widen downwards
            br = _bracket(f, epsilon, br[0], step=1.1)
            if isinstance(br, float):
                return br
        sigma = min(sigma, _solve(f, epsilon, br)[0])

    for _ in range(30):
        est = adaptive(sigma).epsilon
        if est <= epsilon:
            return sigma
        sigma *= math.exp(max(_log_gap(est, epsilon) / -slope, 1e-3))
    raise AccountingError(  # pragma: no cover - defensive
        "PLD calibration did not converge to a certified sigma. Use accountant='rdp'."
    )


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
    return _calibrate(acc, m_, n_, eps, d_, s_, q, pld_grid)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def _calibrate(
    acc: str, m: int, n: int, eps: float, delta: float, sampling: str, q: float | None,
    grid: PLDGrid,
) -> float:
    if acc == "paper":
        return paper_sigma(m=m, iterations=n, epsilon=eps, delta=delta)
    if acc == "pld":
        return _calibrate_pld(q, n, eps, delta, grid)  # type: ignore[arg-type]

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


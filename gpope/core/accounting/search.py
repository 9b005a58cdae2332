"""Root finding of the calibrations: the smallest noise multiplier whose epsilon meets a target.

Every function here takes a decreasing ``f(sigma) -> epsilon`` and returns a sigma with
``f(sigma) <= target`` (certified by ``f`` itself), searching in [``SIGMA_MIN``, ``SIGMA_MAX``].
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpope.errors import AccountingError

__all__ = ["SIGMA_MAX", "SIGMA_MIN", "bracket", "log_gap", "search", "solve"]

#: Calibration searches sigma in [SIGMA_MIN, SIGMA_MAX]. If even SIGMA_MIN meets the target,
#: SIGMA_MIN is returned (certified, though a smaller sigma might also do).
SIGMA_MIN = 0.05
SIGMA_MAX = 1e4

XTOL = 2e-3  # relative width of the final bisection bracket on sigma


def log_gap(eps: float, target: float) -> float:
    """log(eps / target): > 0 means the target is missed."""
    if eps <= 0.0:
        return -math.inf
    return math.log(eps) - math.log(target)


def bracket(
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


def solve(f: Callable[[float], float], target: float, brackets: tuple[float, float, float, float],
          xtol: float = XTOL) -> tuple[float, float]:
    """Sigma with f(sigma) <= target, within ``xtol`` (relative) of the root; (sigma, f(sigma)).

    Illinois (safeguarded regula falsi) on ``log f - log target`` against ``log sigma``, with a
    bisection step whenever a value is infinite. Stops when the bracket is narrower than ``xtol``
    or the secant through the true end values puts the root within ``xtol / 2`` below the upper
    end. The returned sigma always satisfies ``f(sigma) <= target`` (the bracket's upper end).
    """
    lo, e_lo, hi, e_hi = brackets
    x_lo, x_hi = math.log(lo), math.log(hi)
    y_lo, y_hi = log_gap(e_lo, target), log_gap(e_hi, target)
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
        y = log_gap(e, target)
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



def search(f: Callable[[float], float], epsilon: float, guess: float, upper: float,
           e_upper: float, xtol: float = XTOL) -> float:
    """Smallest sigma (within ``xtol``) with f(sigma) <= epsilon, at most ``upper`` (certified)."""
    br = bracket(f, epsilon, guess, step=1.05)
    if isinstance(br, float):
        return br
    if br[2] > upper:  # the bracket stepped past an end that is already certified
        br = (br[0], br[1], upper, e_upper)
    return solve(f, epsilon, br, xtol)[0]

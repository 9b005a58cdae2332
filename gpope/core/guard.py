"""The loud guard: is the released theta's projected Bellman error below that of theta = 0?

It checks only that, never the values' accuracy: a theta whose MSPBE beats theta = 0's can still
be far from the true values (the released intervals say how far).

Every diagnostic of an evaluation that can measure the relative MSPBE of the released theta
(MSPBE(theta) / MSPBE(0)) feeds :func:`utility_guard`: the public one (a fresh simulated cohort of
the spec's domain) and a private one (the MSPBE from the run's noisy sufficient statistics,
``relative_mspbe_private``). A relative MSPBE >= 1 means the estimate is no better than the
trivial theta = 0, whose values are all zero: the command says so in its output, its JSON and
MLflow (tag ``gpope.utility_guard``, named in :mod:`gpope.shell.mlflow_names`) instead of printing the values as if they were useful.

The rule: a diagnostic counts only where its evidence is conclusive.

* An exact diagnostic (a plain float: the public cohort, computed without noise) is conclusive:
  ``>= 1`` (or non-finite) says "no better than zero", ``< 1`` says "ok".
* A noisy one (a :class:`Diagnostic` with a confidence interval, e.g. from
  :func:`private_relative_mspbe`) says "no better than zero" only when its LOWER bound is >= 1 and
  "ok" only when its UPPER bound is < 1; otherwise it is inconclusive and ignored. The private
  relative MSPBE is a ratio of quadratic forms of noisy statistics: its point value alone often
  lands above 1 for a good theta (the demo measured 1.18 private vs 0.59 public), so trusting it
  would cry wolf.

The verdict is ``"no_better_than_zero"`` if any diagnostic conclusively says so, else ``"ok"`` if
one conclusively says ok, else ``"unknown"`` (none given, or only inconclusive ones). So with a
public cohort the public value decides unless the private data clearly contradict it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpope.core.validation import check_int, check_number

if TYPE_CHECKING:
    from gpope.core.ssp import NoisyStatistics

__all__ = ["Diagnostic", "UtilityGuard", "private_relative_mspbe", "utility_guard"]

@dataclass(frozen=True)
class Diagnostic:
    """A noisy relative MSPBE with a two-sided confidence interval [lower, upper]."""

    value: float
    lower: float
    upper: float
    level: float = 0.9


@dataclass(frozen=True)
class UtilityGuard:
    """The guard's verdict.

    Attributes:
        no_better_than_zero: True when some diagnostic conclusively says relative MSPBE >= 1.
        verdict: "no_better_than_zero" (MSPBE(theta) >= MSPBE(0)), "ok" (MSPBE(theta) <
            MSPBE(0): nothing more, in particular not that the values are accurate) or
            "unknown" (none given, or none conclusive).
        relative_mspbe: the diagnostics' point values, by source name.
        message: one line for the command's output, or "" when ok.
    """

    no_better_than_zero: bool
    verdict: str
    relative_mspbe: dict[str, float] = field(default_factory=dict)
    message: str = ""


def _reading(v: float | Diagnostic) -> tuple[bool, bool]:
    """(conclusively no better than zero, conclusively ok) for one diagnostic."""
    if isinstance(v, Diagnostic):
        return (math.isfinite(v.lower) and v.lower >= 1.0), v.upper < 1.0
    bad = not math.isfinite(v) or v >= 1.0
    return bad, not bad


def utility_guard(diagnostics: Mapping[str, float | Diagnostic | None], *,
                  remedy: str = "more trajectories or a larger epsilon help") -> UtilityGuard:
    """The verdict from relative MSPBE diagnostics by source (None values are ignored).

    The guard checks one thing: whether the released theta's MSPBE is below that of theta = 0.
    "ok" is that and no more: a theta can beat theta = 0 and still be far from the true values
    (the value intervals, not the guard, say how far). ``remedy`` ends the WARNING: what the
    caller can do about it (the shell names only commands that work for the run's spec).

    Examples: ``utility_guard({"public": 0.59, "private": Diagnostic(1.18, 0.4, 2.1)})`` -> ok
    (the noisy value is inconclusive); ``utility_guard({"private": Diagnostic(1.5, 1.2, 1.9)})``
    -> no_better_than_zero.
    """
    given = {k: v for k, v in diagnostics.items() if v is not None}
    points = {k: float(v.value if isinstance(v, Diagnostic) else v) for k, v in given.items()}
    if not given:
        return UtilityGuard(False, "unknown", {},
                            "NOTE: nothing in this run can check whether the released theta's "
                            "projected Bellman error (MSPBE) is below that of theta = 0 (no "
                            "public simulated cohort and no noisy-statistics release); nor does "
                            "anything here measure the values' accuracy.")
    readings = {k: _reading(v) for k, v in given.items()}
    bad = [k for k, (is_bad, _) in readings.items() if is_bad]
    if bad:
        which = ", ".join(_describe(k, given[k]) for k in bad)
        msg = (f"WARNING: the released theta's projected Bellman error (MSPBE) is NOT BELOW that "
               f"of theta = 0, whose values are all 0 ({which}): by this measure the values "
               f"below are no better than zeros; {remedy}.")
        return UtilityGuard(True, "no_better_than_zero", points, msg)
    if any(ok for _, ok in readings.values()):
        return UtilityGuard(False, "ok", points)
    which = ", ".join(_describe(k, v) for k, v in given.items())
    return UtilityGuard(False, "unknown", points,
                        f"NOTE: the guard cannot tell whether the released theta's projected "
                        f"Bellman error (MSPBE) is below that of theta = 0 ({which}); it checks "
                        f"only that, never the values' accuracy (their intervals say how far "
                        f"off they may be).")


def _describe(name: str, v: float | Diagnostic) -> str:
    if isinstance(v, Diagnostic):
        return (f"{name} relative MSPBE {v.value:.3g}, {100 * v.level:.0f}% interval "
                f"[{v.lower:.3g}, {v.upper:.3g}]")
    return f"{name} relative MSPBE {v:.3g}"


def private_relative_mspbe(
    theta: np.ndarray, noisy: NoisyStatistics, rng: np.random.Generator, *,
    draws: int = 200, level: float = 0.9, identification: bool = True,
) -> Diagnostic:
    """The private relative MSPBE of ``theta`` with a parametric-bootstrap interval.

    The noise of the release is Gaussian with a public scale, so fresh noise of that scale added
    to the released sums shows how the estimate scatters (post-processing: no privacy cost, and
    ``rng`` may be any generator). The interval is the basic bootstrap one,
    ``[2 r - q_hi, 2 r - q_lo]`` with ``q`` the (1 +- level)/2 quantiles of the re-noised values
    (non-finite draws count as +inf), lower bound floored at 0.

    Identification (``identification=True``, the default): where the release's supported block
    of the summed ``A~`` is not :func:`gpope.core.intervals.separated_from_singular` at ``level``
    (or no feature is supported), the noise dominates the statistics and the bootstrap of the ratio is not to be trusted (the
    same failure as the value intervals'): the diagnostic is then inconclusive, ``[0, inf]``,
    so :func:`utility_guard` ignores it instead of crying wolf (the HIV demo at m = 2000 printed
    "NO BETTER THAN theta = 0" from a private interval [1.04, 1.21] while the public relative
    MSPBE was 0.05). A conservative gate: it only removes claims.
    """
    from gpope.core.intervals import supported_separation
    from gpope.core.ssp import private_mspbe, release_noisy_statistics

    check_int("private_relative_mspbe", "draws", draws, ge=2)
    check_number("private_relative_mspbe", "level", level, gt=0.0, lt=1.0)
    r = private_mspbe(theta, noisy)[1]
    if identification:
        A, _, C = noisy.pooled()
        keep, sep = supported_separation(A, C, noisy.pooled_noise_std(), level=level,
                                         c_noise_scale=noisy.c_noise_scale)
        if not keep.any() or not sep > 1.0:  # the test of separated_from_singular
            return Diagnostic(float(r), 0.0, math.inf, float(level))
    boot = np.array([
        private_mspbe(theta, release_noisy_statistics(noisy.sums, n=noisy.n, m=noisy.m,
                                                      sigma=noisy.sigma, clip=noisy.clip,
                                                      rng=rng, c_noise_scale=noisy.c_noise_scale))[1]
        for _ in range(draws)
    ])
    boot[~np.isfinite(boot)] = np.inf
    lo_q, hi_q = np.quantile(boot, [(1 - level) / 2, (1 + level) / 2], method="inverted_cdf")
    lower = max(0.0, 2 * r - float(hi_q)) if math.isfinite(r) else -math.inf
    upper = 2 * r - float(lo_q) if math.isfinite(r) else math.inf
    return Diagnostic(float(r), float(lower), float(upper), float(level))

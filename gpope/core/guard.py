"""The loud guard: is the released theta's projected Bellman error below that of theta = 0?

It checks only that, never the values' accuracy (the released intervals say how far off they
may be). Every diagnostic of the relative MSPBE of the released theta feeds
:func:`utility_guard`: the public one (a fresh simulated cohort of the spec's domain) and a
private one (from the run's noisy sufficient statistics). A relative MSPBE >= 1 means the
estimate is no better than the trivial theta = 0: the command says so in its output, its JSON
and MLflow instead of printing the values as if they were useful.

A diagnostic counts only where its evidence is conclusive: an exact one (a plain float) always;
a noisy one (a :class:`Diagnostic` with an interval) says "no better than zero" only when its
LOWER bound is >= 1 and "ok" only when its UPPER bound is < 1 (a ratio of noisy quadratic forms
often lands above 1 for a good theta). The verdict is ``"no_better_than_zero"`` if any diagnostic
conclusively says so, else ``"ok"`` if one conclusively says ok, else ``"unknown"``.
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
    """The guard's verdict: ``verdict`` "no_better_than_zero", "ok" (MSPBE(theta) < MSPBE(0):
    nothing more) or "unknown" (none given, or none conclusive); the diagnostics' point values by
    source; one ``message`` line for the command's output ("" when ok)."""

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
    """The verdict from relative MSPBE diagnostics by source (None values are ignored); ``remedy``
    ends the WARNING (the shell names only commands that work for the run's spec).

    Examples: ``utility_guard({"public": 0.59, "private": Diagnostic(1.18, 0.4, 2.1)})`` -> ok
    (the noisy value is inconclusive); ``utility_guard({"private": Diagnostic(1.5, 1.2, 1.9)})``
    -> no_better_than_zero."""
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
    draws: int = 200, level: float = 0.9, identification: bool = True) -> Diagnostic:
    """The private relative MSPBE of ``theta`` with a basic parametric-bootstrap interval
    ``[2 r - q_hi, 2 r - q_lo]`` (fresh noise of the release's public scale on the released sums:
    post-processing; non-finite draws count as +inf; lower bound floored at 0). With
    ``identification``, where the supported block of ``A~`` is not
    :func:`gpope.core.intervals.separated_from_singular`, it is inconclusive, ``[0, inf]``: a
    conservative gate that only removes claims."""
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

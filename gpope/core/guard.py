"""The loud guard: is a released theta any better than releasing theta = 0?

Every diagnostic of an evaluation that can measure the relative MSPBE of the released theta
(MSPBE(theta) / MSPBE(0)) feeds :func:`utility_guard`: the public one (a fresh simulated cohort of
the spec's domain) and a private one (e.g. the MSPBE from noisy sufficient statistics,
``relative_mspbe_private``). A relative MSPBE >= 1 (or a non-finite one) means the estimate is no
better than the trivial theta = 0, whose values are all zero: the command says so in its output,
its JSON and MLflow (tag :data:`GUARD_TAG`) instead of printing the values as if they were useful.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["GUARD_TAG", "UtilityGuard", "utility_guard"]

#: MLflow tag holding the guard's verdict: "no_better_than_zero", "ok" or "unknown".
GUARD_TAG = "gpope.utility_guard"


@dataclass(frozen=True)
class UtilityGuard:
    """The guard's verdict.

    Attributes:
        no_better_than_zero: True when some diagnostic says relative MSPBE >= 1 (or non-finite).
        verdict: "no_better_than_zero", "ok" (every diagnostic < 1) or "unknown" (none given).
        relative_mspbe: the diagnostics used, by source name.
        message: one line for the command's output, or "" when ok/unknown.
    """

    no_better_than_zero: bool
    verdict: str
    relative_mspbe: dict[str, float] = field(default_factory=dict)
    message: str = ""


def utility_guard(diagnostics: Mapping[str, float | None]) -> UtilityGuard:
    """The verdict from relative MSPBE diagnostics by source (None values are ignored).

    Example: ``utility_guard({"public": 0.03, "private": None})`` -> ok.
    """
    given = {k: float(v) for k, v in diagnostics.items() if v is not None}
    if not given:
        return UtilityGuard(False, "unknown", {})
    bad = {k: v for k, v in given.items() if not math.isfinite(v) or v >= 1.0}
    if not bad:
        return UtilityGuard(False, "ok", given)
    which = ", ".join(f"{k} relative MSPBE {v:.3g}" for k, v in bad.items())
    msg = (f"WARNING: the released theta is NO BETTER THAN theta = 0 ({which} >= 1): the values "
           "below carry no information about the policy. Re-tune the spec on public data "
           "(gpope tune --spec FILE), raise epsilon or the number of trajectories.")
    return UtilityGuard(True, "no_better_than_zero", given, msg)

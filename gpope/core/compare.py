"""Compare two released runs: the difference of their released quantities, with an interval built
from the released numbers only (post-processing: no data read, no privacy budget spent).

A quantity released by run A as ``(value_a, [lower_a, upper_a])`` at level ``1 - alpha_a`` and by
run B at ``1 - alpha_b`` gives ``value_a - value_b`` in ``[lower_a - upper_b, upper_a - lower_b]``.
Guarantee (union bound): both intervals cover together with probability at least
``1 - alpha_a - alpha_b`` whatever the dependence between the runs, and on that event the
difference interval covers ``theta_a - theta_b`` (two 95% intervals give at least 90%); an
unbounded end gives an unbounded end. The verdict reads the interval only: "better" where its
lower end is above 0, "worse" where its upper end is below 0, otherwise "cannot tell".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gpope.core.validation import check_number
from gpope.errors import ConfigError

__all__ = ["Difference", "ReleasedQuantity", "compare_released", "difference", "sentence"]



@dataclass(frozen=True)
class ReleasedQuantity:
    """One released row: its value and two-sided interval at ``level`` (ends may be infinite).

    Raises:
        ConfigError: a non-finite value, ``lower > value`` or ``value > upper``, or a level
            outside (0, 1).
    """

    value: float
    lower: float
    upper: float
    level: float

    def __post_init__(self) -> None:
        o = "ReleasedQuantity"
        check_number(o, "level", self.level, gt=0.0, lt=1.0)
        if not math.isfinite(self.value):
            raise ConfigError(f"{o}: a released value must be finite. Got {self.value!r}.")
        if math.isnan(self.lower) or math.isnan(self.upper) or not (
                self.lower <= self.value <= self.upper):
            raise ConfigError(
                f"{o}: the interval must hold the value (lower <= value <= upper). Got "
                f"[{self.lower!r}, {self.upper!r}] around {self.value!r}.")


@dataclass(frozen=True)
class Difference:
    """``a - b`` for one quantity (module docstring): the difference and its interval (infinite
    where an end is unbounded) at the joint level ``1 - alpha_a - alpha_b`` (clipped at 0), and the
    verdict: "better" (``lower > 0``), "worse" (``upper < 0``) or "cannot tell"."""

    name: str
    value: float
    lower: float
    upper: float
    level: float
    verdict: str


def difference(name: str, a: ReleasedQuantity, b: ReleasedQuantity) -> Difference:
    """The difference ``a - b`` of one quantity released by two runs, with its union-bound
    interval and verdict (post-processing of the two releases)."""
    lower = a.lower - b.upper
    upper = a.upper - b.lower
    level = max(0.0, 1.0 - (1.0 - a.level) - (1.0 - b.level))
    verdict = "better" if lower > 0.0 else "worse" if upper < 0.0 else "cannot tell"
    return Difference(name=name, value=float(a.value - b.value), lower=float(lower),
                      upper=float(upper), level=float(level), verdict=verdict)


def compare_released(a: Mapping[str, ReleasedQuantity],
                     b: Mapping[str, ReleasedQuantity]) -> list[Difference]:
    """:func:`difference` for every quantity both runs released, in ``a``'s order.

    Raises:
        ConfigError: the two runs share no quantity (different reference states or domains).
    """
    common = [k for k in a if k in b]
    if not common:
        raise ConfigError(
            "The two runs released no quantity in common (reference states or policy value "
            f"rows): run A has {sorted(a)}, run B {sorted(b)}. Compare runs of specs with the "
            "same reference states on the same dataset.")
    return [difference(k, a[k], b[k]) for k in common]


def sentence(d: Difference, *, label_a: str = "A", label_b: str = "B") -> str:
    """One plain sentence for a difference, e.g. ``J: A is better than B by 0.15 (90% interval
    [0.05, 0.25])`` or ``... cannot tell A from B at this data size and epsilon ...``."""
    iv = f"{d.level:.0%} interval [{d.lower:.4g}, {d.upper:.4g}]"
    if d.verdict == "better":
        return f"{d.name}: {label_a} is better than {label_b} by {d.value:.4g} ({iv})."
    if d.verdict == "worse":
        return f"{d.name}: {label_a} is worse than {label_b} by {-d.value:.4g} ({iv})."
    return (f"{d.name}: cannot tell {label_a} from {label_b} at this data size and epsilon "
            f"(difference {d.value:.4g}, {iv}).")

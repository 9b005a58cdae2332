"""What an estimator's execution reads (:class:`StatisticsSource`) and returns (:class:`Estimate`).

An execution is ``execute(source, *, plan, settings, spec) -> Estimate``: it draws every noisy
release of the plan's estimator component at the plan's multipliers, from OS entropy or from
``settings.seed`` (then NOT private), and reads the private statistics only through the source.
The run then releases the policy value where the execution left it (``policy_values`` None) and
marks a release whose accountant is not a valid bound as not private.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["Estimate", "StatisticsSource"]


class StatisticsSource(Protocol):
    """The private per-trajectory statistics of one pinned version (in memory, a Spark aggregate
    or streamed): m rows ``[vec A_i, b_i, vec C_i]`` of width ``2 n^2 + n``
    (:func:`gpope.core.ssp.statistics_vectors`)."""

    @property
    def m(self) -> int:
        """The number of trajectories (public)."""
        ...

    @property
    def n(self) -> int:
        """The number of features (public)."""
        ...

    def aggregate(self, kernel: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  width: int) -> np.ndarray:
        """``(width,)`` sum over every row block of ``kernel(traj_index, rows)`` (a ``(1, width)``
        array per block); checks that exactly m rows were summed."""
        ...


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What a run computed under its plan (released, except ``private_population``).

    Attributes:
        result: the solver's result record (private flag and note as released).
        theta: the released weights (the averaged iterate when there is one).
        values: the values at the spec's reference states.
        intervals, theta_interval: the released intervals (None without them).
        private_mspbe: (private MSPBE, relative) from the noisy statistics, or None.
        noisy: the noisy-statistics release (or the tuning's), for the guard; None without one.
        tuned: the private tuning's result, or None.
        policy_values: the released policy value scalars (``{name: PolicyValueInterval}``), or
            None when the plan has no ``policy_value`` component (or the run has not released
            it yet).
        settings: the settings the run used (the tuned clip and step size when tuned).
        private_population: the population (A, b, C) of the PRIVATE statistics, only for the
            operator's tagged private diagnostics.
    """

    result: Any
    theta: np.ndarray
    values: np.ndarray
    intervals: Any = None
    theta_interval: Any = None
    private_mspbe: tuple[float, float] | None = None
    noisy: Any = None
    tuned: Any = None
    policy_values: dict[str, Any] | None = None
    settings: Any = None
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

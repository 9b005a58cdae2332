"""What a run's releases read (:class:`StatisticsSource`, :class:`RunSource`), how each
auxiliary release executes (:class:`ReleaseExecution`) and what the estimator returns
(:class:`Estimate`). A run makes three passes, with no branch per release: each auxiliary
component ``prepare``-s the source, the estimator executes, each component ``finish``-es the
estimate. Every draw comes from OS entropy or from ``settings.seed`` (then NOT private).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = ["Estimate", "ReleaseExecution", "RunSource", "StatisticsSource"]


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
    """What a run computed under its plan, all released except ``private_population`` (the
    PRIVATE statistics' (A, b, C), for the operator's tagged diagnostics only). ``release``: the
    estimator's own release where a later release post-processes it."""

    result: Any
    theta: np.ndarray
    values: np.ndarray
    intervals: Any = None
    theta_interval: Any = None
    private_mspbe: tuple[float, float] | None = None
    noisy: Any = None
    tuned: Any = None
    release: Any = None
    policy_values: dict[str, Any] | None = None
    settings: Any = None
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True, kw_only=True)
class RunSource:
    """The run's :class:`StatisticsSource` as its auxiliary releases prepared it:
    ``aggregate`` sums the rows under a released behaviour policy where one was released
    (``value_aggregate``), else the pinned ``base`` rows. ``policy_terms`` are private."""

    base: Any
    clip: float | None = None
    noisy: Any = None
    moments: Any = None
    value_aggregate: Callable[..., np.ndarray] | None = None
    value_spec: Any = None
    rng: np.random.Generator | None = None
    policy_terms: Any = None
    first_state: Any = None
    functionals: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def m(self) -> int:
        return int(self.base.m)

    @property
    def n(self) -> int:
        return int(self.base.n)

    def aggregate(self, kernel: Callable[[np.ndarray, np.ndarray], np.ndarray],
                  width: int) -> np.ndarray:
        agg = self.value_aggregate or self.base.aggregate
        return agg(kernel, width)


class ReleaseExecution:
    """How one planned release executes; it overrides the passes it takes part in, each given
    its own component, so nothing looks a release up by name."""

    def check(self, component: Any, rows: Any) -> None:
        """Refuse, before anything is reserved, statistics whose columns cannot serve it."""

    def prepare(self, component: Any, run: RunSource, *, plan: Any, settings: Any,
                spec: Any) -> RunSource:
        """Its release before the estimator's, recorded on the run's source."""
        return run

    def finish(self, component: Any, run: RunSource, est: Estimate, *, plan: Any,
               settings: Any, spec: Any) -> Estimate:
        """Its release after the estimator's, recorded on the estimate."""
        return est

    def rows(self, component: Any, row: dict[str, Any], est: Estimate, *,
             spec_name: str) -> list[dict[str, Any]]:
        """Its released_values rows (``row``: the run's released_estimates row)."""
        return []

    def notes(self, component: Any) -> list[str]:
        """Its NOTE lines for the report."""
        return []

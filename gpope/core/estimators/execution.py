"""What a run's releases read (:class:`StatisticsSource`, :class:`RunSource`), how each
auxiliary release executes (:class:`ReleaseExecution`) and what the estimator returns
(:class:`Estimate`).

A run executes its plan in three passes over the plan's components, with no branch per release:
each auxiliary component first ``prepare``-s the run's source (a private clip, the noisy
statistics, the behaviour estimate, the policy terms: :class:`RunSource` carries what they
released), the estimator's execution ``execute(source, *, plan, settings, spec) -> Estimate``
then draws its own release at the plan's multipliers, and each component ``finish``-es the
estimate (the policy value, from the estimator's release where the direct method needs it).
Every draw comes from OS entropy or from ``settings.seed`` (then NOT private).
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
    """What a run computed under its plan (released, except ``private_population``).

    Attributes:
        result: the solver's result record (private flag and note as released).
        theta: the released weights (the averaged iterate when there is one).
        values: the values at the spec's reference states.
        intervals, theta_interval: the released intervals (None without them).
        private_mspbe: (private MSPBE, relative) from the noisy statistics, or None.
        noisy: the noisy-statistics release (or the tuning's), for the guard; None without one.
        tuned: the private tuning's result, or None.
        release: the estimator's own release record where a later release post-processes it
            (the tuning-free default's, for the direct method's J(target)), else None.
        policy_values: the released policy value scalars (``{name: PolicyValueInterval}``), or
            None when the plan has no ``policy_value`` component.
        settings: the resolved settings the run used (a private tuning's choice is in ``tuned``).
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
    release: Any = None
    policy_values: dict[str, Any] | None = None
    settings: Any = None
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


@dataclass(frozen=True, kw_only=True)
class RunSource:
    """The run's statistics source as its auxiliary releases prepared it (a
    :class:`StatisticsSource`: ``aggregate`` sums the value route's rows under a released
    behaviour policy where one was released, else the stored rows).

    Attributes:
        base: the pinned statistics (the shell's source: its rows, Spark sums, population).
        clip: the clip bound of the noisy statistics: the plan's public one, or the one a
            private quantile released.
        noisy, moments: the noisy-statistics release and its residual moments (None without).
        value_aggregate, value_spec: the value route's rows under the released behaviour policy
            and the spec they belong to (None: the data logged their propensities).
        rng: the tuning-free default's noise stream once the behaviour release drew from it.
        policy_terms: the policy value's per-patient terms and first-state features (private).
        first_state: the direct method's first-state release (None without it).
        functionals: the public rows and levels the estimator's release gives intervals of.
    """

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
    """How one planned release executes (its component's ``execution`` names the instance).

    Every method defaults to doing nothing; a release overrides the passes it takes part in.
    Each receives its own component (its multiplier and share), so nothing looks a release up
    by name.
    """

    def check(self, component: Any, rows: Any) -> None:
        """Refuse, before anything is reserved, statistics that cannot serve the release (public
        facts: the columns); raises DataError."""

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

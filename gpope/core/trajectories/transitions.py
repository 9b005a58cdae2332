"""The transitions contract shared by simulators, the statistics kernels and the pipeline.

A :class:`Transitions` batch is a flat, columnar set of decision steps from ``m`` trajectories,
sorted by trajectory and then by time. It mirrors the silver ``transitions`` table of docs/ARCHITECTURE.md
section 2 (raw states, not features), so the same object comes from a simulator in memory or from
Spark through Arrow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpope.errors import SchemaError

__all__ = ["Transitions"]


@dataclass(frozen=True, eq=False)
class Transitions:
    """Decision steps of ``n_trajectories`` trajectories (every one with at least one row), sorted
    by (traj_index, t): (T,) dense trajectory ids, step indices, actions, rewards, ``terminal`` (the
    episode ended: next features are zero), ``truncated`` (the record stops but the next state is
    kept) and ``behavior_prob`` in (0, 1] as logged; (T, d) raw ``state`` and ``next_state``."""

    traj_index: np.ndarray
    t: np.ndarray
    state: np.ndarray
    action: np.ndarray
    reward: np.ndarray
    next_state: np.ndarray
    terminal: np.ndarray
    truncated: np.ndarray
    behavior_prob: np.ndarray
    n_trajectories: int

    def __post_init__(self) -> None:
        n = len(self.traj_index)
        cols = {
            "t": self.t,
            "action": self.action,
            "reward": self.reward,
            "terminal": self.terminal,
            "truncated": self.truncated,
            "behavior_prob": self.behavior_prob,
        }
        for name, col in cols.items():
            if np.shape(col) != (n,):
                raise SchemaError(
                    f"Transitions.{name} must have shape ({n},) like traj_index; got {np.shape(col)}."
                )
        if np.ndim(self.state) != 2 or np.shape(self.state)[0] != n:
            raise SchemaError(f"Transitions.state must have shape ({n}, d); got {np.shape(self.state)}.")
        if np.shape(self.next_state) != np.shape(self.state):
            raise SchemaError("Transitions.next_state must have the shape of state "
                              f"{np.shape(self.state)}; got {np.shape(self.next_state)}.")
        if n and (np.any(np.diff(self.traj_index) < 0)):
            raise SchemaError("Transitions must be sorted by traj_index (non-decreasing).")
        if n and (self.traj_index[0] < 0 or self.traj_index[-1] >= self.n_trajectories):
            raise SchemaError(f"traj_index must lie in 0..{self.n_trajectories - 1}; "
                              f"got {self.traj_index[0]}..{self.traj_index[-1]}.")
        counts = np.bincount(self.traj_index, minlength=self.n_trajectories) if n else np.zeros(
            self.n_trajectories, dtype=np.int64
        )
        if np.any(counts == 0):
            raise SchemaError(f"{int(np.sum(counts == 0))} of {self.n_trajectories} trajectories "
                              "have no transitions; traj_index must be dense 0..m-1.")
        bp = np.asarray(self.behavior_prob)
        if n and (not np.all(np.isfinite(bp)) or np.any(bp <= 0) or np.any(bp > 1)):
            raise SchemaError("behavior_prob must lie in (0, 1] for every transition.")

    @property
    def n_transitions(self) -> int:
        """T, the number of decision steps."""
        return len(self.traj_index)

    @property
    def lengths(self) -> np.ndarray:
        """(m,) int64 number of transitions of each trajectory (tau_i)."""
        return np.bincount(self.traj_index, minlength=self.n_trajectories).astype(np.int64)

    @property
    def offsets(self) -> np.ndarray:
        """(m + 1,) int64 row offsets: trajectory i occupies rows offsets[i]:offsets[i+1]."""
        return np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

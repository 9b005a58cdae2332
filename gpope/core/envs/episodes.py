"""Episodes simulated together, one step at a time for those still running (the simulators')
common assembly into :class:`~gpope.core.trajectories.transitions.Transitions`)."""

from __future__ import annotations

import numpy as np

from gpope.core.trajectories.transitions import Transitions

__all__ = ["StepLog"]


class StepLog:
    """The decision steps of m episodes simulated together, recorded one step at a time for the
    episodes still running, then assembled in (trajectory, t) order."""

    def __init__(self, m: int) -> None:
        self.m = m
        self.columns: dict[str, list[np.ndarray]] = {}

    def add(self, t: int, alive: np.ndarray, **columns: np.ndarray) -> None:
        """Step ``t`` of the running episodes ``alive``: one row each of every Transitions column
        but ``traj_index``, ``t`` and ``truncated``."""
        steps = {"traj_index": alive, "t": np.full(len(alive), t, dtype=np.int64), **columns}
        for name, value in steps.items():
            self.columns.setdefault(name, []).append(value)

    def transitions(self, cap: int) -> Transitions:
        """The steps as Transitions; ``truncated`` on step ``cap - 1`` of a running episode."""
        cols = {k: np.concatenate(v) for k, v in self.columns.items()}
        traj, t = cols["traj_index"], cols["t"]
        offsets = np.concatenate([[0], np.cumsum(np.bincount(traj, minlength=self.m))[:-1]])
        order = np.empty(len(traj), dtype=np.int64)
        order[offsets[traj] + t] = np.arange(len(traj))  # row position in (traj, t) order
        cols = {k: v[order] for k, v in cols.items()}
        cols["truncated"] = (cols["t"] == cap - 1) & ~cols["terminal"]
        return Transitions(**cols, n_trajectories=self.m)

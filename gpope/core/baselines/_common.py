"""Private helpers shared by the baseline estimators: input checks, episode layout, recursions.

The recursions over time (eligibility traces, discounted returns) are sequential within a
trajectory but independent across trajectories, so they run as one loop over the time step index,
vectorised across all trajectories that are still active at that step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpope.errors import DataError, SchemaError


def as_matrix(name: str, value: object, rows: int | None = None) -> np.ndarray:
    """Return ``value`` as a finite float64 (rows, n) array or raise SchemaError/DataError."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim != 2 or (rows is not None and arr.shape[0] != rows):
        want = f"({rows}, n)" if rows is not None else "(T, n)"
        raise SchemaError(f"'{name}' must have shape {want}; got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise DataError(f"'{name}' contains non-finite values (NaN or inf).")
    return arr


def as_vector(name: str, value: object, length: int, dtype: type = np.float64) -> np.ndarray:
    """Return ``value`` as a finite 1-D array of the given length or raise SchemaError/DataError."""
    arr = np.asarray(value)
    if arr.shape != (length,):
        raise SchemaError(f"'{name}' must have shape ({length},); got {arr.shape}.")
    if dtype is np.float64:
        arr = arr.astype(np.float64, copy=False)
        if not np.all(np.isfinite(arr)):
            raise DataError(f"'{name}' contains non-finite values (NaN or inf).")
    return arr


def as_mask(name: str, value: object | None, length: int) -> np.ndarray:
    """Return a (length,) bool mask (all False when ``value`` is None)."""
    if value is None:
        return np.zeros(length, dtype=bool)
    arr = np.asarray(value)
    if arr.shape != (length,):
        raise SchemaError(f"'{name}' must have shape ({length},); got {arr.shape}.")
    return arr.astype(bool)


@dataclass(frozen=True)
class EpisodeLayout:
    """Row layout of trajectories stored contiguously and in time order.

    Attributes:
        starts: (m,) first row of each trajectory, ordered by decreasing length, so the
            trajectories still active at step k are the prefix ``starts[:active[k]]``.
        active: (max_len + 1,) number of trajectories with more than k steps.
        max_len: length of the longest trajectory.
    """

    starts: np.ndarray
    active: np.ndarray
    max_len: int

    def rows(self, k: int) -> np.ndarray:
        """Rows of time step ``k`` of every trajectory that has one."""
        return self.starts[: self.active[k]] + k


def episode_layout(traj_index: object, n_rows: int) -> EpisodeLayout:
    """Layout of the trajectories given by a (T,) trajectory id sorted non-decreasingly."""
    idx = np.asarray(traj_index)
    if idx.shape != (n_rows,):
        raise SchemaError(f"'traj_index' must have shape ({n_rows},); got {idx.shape}.")
    if n_rows == 0:
        return EpisodeLayout(np.zeros(0, np.int64), np.zeros(1, np.int64), 0)
    if not np.issubdtype(idx.dtype, np.integer):
        raise SchemaError(f"'traj_index' must hold integers; got dtype {idx.dtype}.")
    steps = np.diff(idx)
    if np.any(steps < 0):
        raise SchemaError(
            "'traj_index' must be sorted (rows grouped by trajectory, in time order)."
        )
    starts = np.flatnonzero(np.concatenate([[True], steps != 0]))
    lengths = np.diff(np.append(starts, n_rows))
    order = np.argsort(-lengths, kind="stable")
    starts, lengths = starts[order], lengths[order]
    max_len = int(lengths[0])
    # active[k] = #{trajectories with length > k}; lengths are sorted in decreasing order.
    active = np.searchsorted(-lengths, -np.arange(max_len + 1), side="left")
    return EpisodeLayout(starts.astype(np.int64), active.astype(np.int64), max_len)


def forward_trace(phi: np.ndarray, rho: np.ndarray, decay: float,
                  layout: EpisodeLayout) -> np.ndarray:
    """(T, n) eligibility traces ``z_t = rho_t (decay * z_{t-1} + phi_t)`` of (T, n) features
    and (T,) ratios, reset per episode (Boyan 2002; off-policy form of Bertsekas & Yu)."""
    z = rho[:, None] * phi
    if decay == 0.0:
        return z
    for k in range(1, layout.max_len):
        rows = layout.rows(k)
        z[rows] += rho[rows, None] * decay * z[rows - 1]
    return z


def backward_accumulate(term: np.ndarray, factor: np.ndarray, layout: EpisodeLayout) -> np.ndarray:
    """(T,) ``y_t = term_t + factor_t * y_{t+1}`` within each episode (0 after its end)."""
    y = np.array(term, dtype=np.float64, copy=True)
    for k in range(layout.max_len - 2, -1, -1):
        rows = layout.rows(k)[: layout.active[k + 1]]
        y[rows] += factor[rows] * y[rows + 1]
    return y


def solve_system(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, str]:
    """(x, ``"solve"``) of ``A x = b``, or the minimum-norm least squares (x, ``"lstsq"``) if A
    is singular."""
    try:
        x = np.linalg.solve(A, b)
        if np.all(np.isfinite(x)):
            return x, "solve"
    except np.linalg.LinAlgError:
        pass
    x = np.linalg.lstsq(A, b, rcond=None)[0]
    return x, "lstsq"

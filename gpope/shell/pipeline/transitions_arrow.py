"""Arrow form of the silver ``transitions`` rows and back: the columns the statistics kernels read
(:data:`_INPUT_COLUMNS`), a core :class:`~gpope.core.trajectories.transitions.Transitions` from Arrow rows and
Arrow rows from one (tests, benchmarks, simulated loads)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.errors import SchemaError

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["transitions_from_arrow", "transitions_to_arrow"]

_INPUT_COLUMNS = (
    "traj_index",
    "t",
    "state",
    "action",
    "behavior_prob",
    "reward",
    "next_state",
    "terminal",
    "truncated",
)


def _list_column(values: np.ndarray) -> pa.Array:
    """A list<double> Arrow column from a (k, p) float64 array."""
    import pyarrow as pa

    k, p = values.shape
    offsets = pa.array(np.arange(0, (k + 1) * p, p, dtype=np.int32))
    list_type = pa.list_(pa.field("element", pa.float64(), nullable=False))
    return pa.ListArray.from_arrays(
        offsets, pa.array(values.reshape(-1), type=pa.float64()), type=list_type
    )


def _matrix(column: pa.ChunkedArray | pa.Array, rows: int, name: str) -> np.ndarray:
    """(rows, d) float64 array from a list<double> Arrow column of equal-length lists."""
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if rows == 0:
        return np.zeros((0, 0))
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    d = int(lengths[0])
    if np.any(lengths != d):
        raise SchemaError(f"transitions.{name} arrays must all have the same length; got {set(lengths)}.")
    flat = pc.list_flatten(arr).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    return flat.reshape(rows, d)


def transitions_to_arrow(transitions: Any) -> pa.Table:
    """Arrow rows with the silver ``transitions`` columns from a core Transitions batch (patient
    ``p<traj_index>``): simulated batches loaded into the lake directly (tests, benchmarks)."""
    import pyarrow as pa

    tr = transitions
    T = tr.n_transitions
    d = tr.state.shape[1]
    list_type = pa.list_(pa.field("element", pa.float64(), nullable=False))

    def lists(a: np.ndarray) -> pa.Array:
        offsets = pa.array(np.arange(0, (T + 1) * d, d, dtype=np.int32))
        return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(a).reshape(-1)), type=list_type)

    pids = np.char.add("p", tr.traj_index.astype(str))
    return pa.table({
        "patient_id": pa.array(np.asarray(pids, dtype=str)),
        "traj_index": pa.array(tr.traj_index.astype(np.int64)),
        "t": pa.array(tr.t.astype(np.int32)),
        "state": lists(tr.state),
        "action": pa.array(tr.action.astype(np.int32)),
        "behavior_prob": pa.array(tr.behavior_prob.astype(np.float64)),
        "reward": pa.array(tr.reward.astype(np.float64)),
        "next_state": lists(tr.next_state),
        "terminal": pa.array(tr.terminal.astype(bool)),
        "truncated": pa.array(tr.truncated.astype(bool)),
    })


def transitions_from_arrow(table: pa.Table, *, n_trajectories: int | None = None,
                           missing_prob: float | None = None) -> Any:
    """A core :class:`~gpope.core.trajectories.transitions.Transitions` from Arrow rows of the silver table.

    Rows are sorted by (traj_index, t). ``traj_index`` is kept as is (dense 0..m-1 expected) unless
    ``n_trajectories`` is None and the rows hold one trajectory, which is re-indexed to 0.
    ``missing_prob``: the ``behavior_prob`` of rows without a logged one (a state-action fit,
    which never reads it); None: they stay NaN and are refused by ``Transitions``.
    """
    from gpope.core.trajectories.transitions import Transitions

    cols = {c: table.column(c) for c in _INPUT_COLUMNS}
    if missing_prob is not None:
        import pyarrow.compute as pc

        cols["behavior_prob"] = pc.fill_null(cols["behavior_prob"], float(missing_prob))
    ti = cols["traj_index"].to_numpy().astype(np.int64)
    t = cols["t"].to_numpy().astype(np.int64)
    order = np.lexsort((t, ti))
    rows = len(ti)
    state = _matrix(cols["state"], rows, "state")[order]
    next_state = _matrix(cols["next_state"], rows, "next_state")[order]
    ti = ti[order]
    if n_trajectories is None:
        ti = ti - ti[0]
        n_trajectories = int(ti[-1]) + 1 if rows else 0
    return Transitions(
        traj_index=ti,
        t=t[order],
        state=state,
        action=cols["action"].to_numpy().astype(np.int64)[order],
        reward=cols["reward"].to_numpy().astype(np.float64)[order],
        next_state=next_state,
        terminal=cols["terminal"].to_numpy(zero_copy_only=False).astype(bool)[order],
        truncated=cols["truncated"].to_numpy(zero_copy_only=False).astype(bool)[order],
        behavior_prob=cols["behavior_prob"].to_numpy(zero_copy_only=False).astype(np.float64)[order],
        n_trajectories=n_trajectories,
    )

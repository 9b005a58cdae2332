"""Array kernels of the storage layouts of :class:`~gpope.core.trajectories.stats.TrajectoryStats`.

Pure functions of numpy arrays: dense A, C from transition rows (compact and tabular layouts) or
from sparse entries, the merge of tabular rows into sparse entries, the assembly of sparse
entries that arrive in chunks, and the primal-dual gradients of the row and sparse layouts.

Notation: a row layout holds T transition rows sorted by trajectory, trajectory i owning rows
``offsets[i]:offsets[i + 1]``; ``rw`` (T,) is norm_i * rho_t per row. A sparse layout holds, per
trajectory, entries (a, j, v): row a of A_i (j < n, column j) or of C_i (column j - n).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict, Unpack

import numpy as np

from gpope.errors import SchemaError

__all__ = ["RowWeighting", "grad_compact", "grad_sparse", "grad_tabular", "rows_dense",
           "sparse_dense", "sparse_from_chunks", "tabular_dense", "tabular_to_sparse"]

_BLOCK_BYTES = 64 * 2**20  # scratch memory for blockwise outer products


# ---------------------------------------------------------------------- dense A, C
def rows_dense(p: np.ndarray, e: np.ndarray, rw: np.ndarray, norm: np.ndarray,
               offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense A (m, n, n), C (m, n, n) from CSR rows: trajectories of equal length stacked and
    reduced by one batched matrix product each (A_i = P_i^T diag(rw) E_i, C_i = P_i^T diag(norm_i)
    P_i), in blocks of at most ``_BLOCK_BYTES``, without materialising every row's outer product."""
    m = len(offsets) - 1
    n = p.shape[1]
    A = np.empty((m, n, n))
    C = np.empty((m, n, n))
    tau = np.diff(offsets)
    order = np.argsort(tau, kind="stable")
    ts = tau[order]
    cuts = np.flatnonzero(np.diff(ts)) + 1
    for ids in np.split(order, cuts):
        if not len(ids):
            continue
        L = int(tau[ids[0]])
        per = max(1, _BLOCK_BYTES // (8 * L * n * 3))
        for lo in range(0, len(ids), per):
            blk = ids[lo : lo + per]
            k = len(blk)
            rows = (offsets[blk][:, None] + np.arange(L)).reshape(-1)
            pb = p[rows].reshape(k, L, n)
            pt = np.swapaxes(pb, 1, 2)
            A[blk] = np.matmul(pt * rw[rows].reshape(k, 1, L), e[rows].reshape(k, L, n))
            C[blk] = np.matmul(pt * norm[blk][:, None, None], pb)
    return A, C


def tabular_dense(s: np.ndarray, sn: np.ndarray, gn: np.ndarray, rw: np.ndarray, norm: np.ndarray,
                  offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense A, C (m, n, n) from one-hot state indices by flat bincounts."""
    m = len(offsets) - 1
    owner = np.repeat(np.arange(m, dtype=np.int64), np.diff(offsets)) * (n * n)
    size = m * n * n
    A = np.bincount(owner + s * n + s, rw, size) - np.bincount(owner + s * n + sn, rw * gn, size)
    C = np.bincount(owner + s * (n + 1), np.repeat(norm, np.diff(offsets)), size)
    return A.reshape(m, n, n), C.reshape(m, n, n)


def sparse_dense(offsets: np.ndarray, ea: np.ndarray, ex: np.ndarray, ev: np.ndarray,
                 n: int) -> np.ndarray:
    """[A_i | C_i] (k, n, 2n) of the k trajectories whose entries ``offsets`` (k + 1,) delimit."""
    k = len(offsets) - 1
    ac = np.zeros((k, n, 2 * n))
    owner = np.repeat(np.arange(k), np.diff(offsets))
    ac[owner, ea, ex] = ev
    return ac


# ---------------------------------------------------------------------- sparse entries
def tabular_to_sparse(tau: np.ndarray, s: np.ndarray, sn: np.ndarray, gn: np.ndarray,
                      rw: np.ndarray, norm: np.ndarray,
                      n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(offsets (m + 1,), ea, ex, ev): tabular rows merged into each trajectory's distinct entries."""
    m = len(tau)
    owner = np.repeat(np.arange(m, dtype=np.int64), tau)
    width = 2 * n
    base = owner * (n * width) + s * width
    keys = np.concatenate([base + s, base + sn, base + n + s])
    vals = np.concatenate([rw, -rw * gn, np.repeat(norm, tau)])
    uniq, inv = np.unique(keys, return_inverse=True)
    value = np.bincount(inv, vals, len(uniq))
    own = uniq // (n * width)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(own, minlength=m))]).astype(np.int64)
    within = uniq - own * (n * width)
    return offsets, (within // width).astype(np.int32), (within % width).astype(np.int32), value


def sparse_from_chunks(
    idx: np.ndarray, lens: np.ndarray, chunks: Iterable[tuple[np.ndarray, np.ndarray]], n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(order, offsets, ea, ex, ev): storage rows' entries rewritten in trajectory order.

    Storage row r holds trajectory ``idx[r]`` (a permutation of 0..m-1) and ``lens[r]`` entries;
    the chunks' ``(index, value)`` pairs, concatenated, are the entries of rows 0..m-1 in order,
    ``index`` a position in the row's flattened ``[vec A_i, vec C_i]``. Each chunk is written
    straight into the result (peak memory: the result plus one chunk's temporaries).

    Raises:
        SchemaError: a chunk does not end on a row boundary, holds indices outside 0..2n^2-1 or
            non-finite values, or the chunks hold another number of entries than ``lens`` says.
    """
    m = len(idx)
    order = np.argsort(idx)
    new_off = np.concatenate([[0], np.cumsum(lens[order])]).astype(np.int64)
    src_off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    dest_start = np.empty(m, dtype=np.int64)
    dest_start[order] = new_off[:-1]  # where storage row r's entries go
    total, nn = int(new_off[-1]), n * n
    ea = np.empty(total, dtype=np.int32)
    ex = np.empty(total, dtype=np.int32)
    ev = np.empty(total, dtype=np.float64)
    seen = row = 0
    for index, value in chunks:
        index, value = np.asarray(index), np.asarray(value, dtype=np.float64)
        k = len(index)
        end = int(np.searchsorted(src_off, seen + k, side="right")) - 1
        if len(value) != k or src_off[end] != seen + k:
            raise SchemaError(f"sparse stats: a chunk of {k} entries ({len(value)} values) "
                              f"starting at entry {seen} does not end on a row boundary of the "
                              "lengths given.")
        if k:
            if index.min() < 0 or index.max() >= 2 * nn:
                raise SchemaError(f"sparse stats: entry indices must lie in 0..{2 * n * n - 1}.")
            if not np.all(np.isfinite(value)):
                raise SchemaError("sparse stats: entries and b must be finite.")
            dest = np.repeat(dest_start[row:end] - src_off[row:end], lens[row:end])
            dest += np.arange(seen, seen + k)
            is_c = index >= nn
            j = index - nn * is_c
            ea[dest] = j // n
            ex[dest] = j % n + n * is_c
            ev[dest] = value
        seen, row = seen + k, end
    if seen != total:
        raise SchemaError(f"sparse stats: the chunks hold {seen} entries; the lengths say {total}.")
    return order, new_off, ea, ex, ev


# ---------------------------------------------------------------------- gradients
def _gathered_rows(idx: np.ndarray, lens: np.ndarray,
                   offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, owner, seg): the rows of the listed trajectories, back to back; owner[r] is the
    position in idx of row r's trajectory and seg[k] where its rows start."""
    seg = np.cumsum(lens) - lens
    rows = np.repeat(offsets[idx] - seg, lens) + np.arange(int(lens.sum()))
    owner = np.repeat(np.arange(len(idx), dtype=np.int64), lens)
    return rows, owner, seg


class RowWeighting(TypedDict):
    """How a row layout weights its rows, the same for :func:`grad_tabular` and
    :func:`grad_compact`: ``tau`` (m,) trajectory lengths, ``offsets`` (m + 1,) first rows,
    ``norm`` (m,) trajectory norms, ``rho`` (T,) per-row importance ratios or None."""

    tau: np.ndarray
    offsets: np.ndarray
    norm: np.ndarray
    rho: np.ndarray | None


def _weighted_rows(
    idx: np.ndarray, tau: np.ndarray, offsets: np.ndarray, norm: np.ndarray, rho: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, owner, seg, nrm, rw): :func:`_gathered_rows` of trajectories idx, each row's
    trajectory norm ``nrm`` and its weight ``rw`` (``nrm`` times the row's rho, if any)."""
    lens = tau[idx]
    rows, owner, seg = _gathered_rows(idx, lens, offsets)
    nrm = np.repeat(norm[idx], lens)
    rw = nrm if rho is None else nrm * rho[rows]
    return rows, owner, seg, nrm, rw


def grad_tabular(idx: np.ndarray, x: np.ndarray, out: np.ndarray, *, s: np.ndarray, sn: np.ndarray,
                 gn: np.ndarray, b: np.ndarray, **weighting: Unpack[RowWeighting]) -> np.ndarray:
    """Gradients of trajectories idx (k,) at x (k, 2n), written into out (k, 2n); O(tau_i) each."""
    k, n = len(idx), b.shape[1]
    rows, owner, _, nrm, rw = _weighted_rows(idx, **weighting)
    s = s[rows]
    sn = sn[rows]
    gn = gn[rows]
    xf = x.ravel()
    base = owner * (2 * n)
    pw = xf[base + n + s]
    et = xf[base + s] - gn * xf[base + sn]
    fs = owner * n + s
    q = rw * pw
    out[:, :n] = (np.bincount(owner * n + sn, q * gn, k * n)
                  - np.bincount(fs, q, k * n)).reshape(k, n)
    out[:, n:] = np.bincount(fs, rw * et + nrm * pw, k * n).reshape(k, n) - b[idx]
    return out


def grad_compact(idx: np.ndarray, x: np.ndarray, out: np.ndarray, *, p: np.ndarray, e: np.ndarray,
                 b: np.ndarray, **weighting: Unpack[RowWeighting]) -> np.ndarray:
    """Gradients of trajectories idx (k,) at x (k, 2n), written into out (k, 2n); O(tau_i n) each."""
    n = b.shape[1]
    rows, owner, seg, nrm, rw = _weighted_rows(idx, **weighting)
    p = p[rows]
    e = e[rows]
    xo = x[owner]
    pw = np.einsum("ij,ij->i", p, xo[:, n:])
    et = np.einsum("ij,ij->i", e, xo[:, :n])
    out[:, :n] = -np.add.reduceat(e * (rw * pw)[:, None], seg, axis=0)
    out[:, n:] = np.add.reduceat(p * (rw * et + nrm * pw)[:, None], seg, axis=0) - b[idx]
    return out


def grad_sparse(idx: np.ndarray, x: np.ndarray, out: np.ndarray, *, offsets: np.ndarray,
                ea: np.ndarray, ex: np.ndarray, ev: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Gradients of trajectories idx (k,) at x (k, 2n), written into out (k, 2n); O(nnz_i) each.

    Per entry (a, x-position j, v): add v * x[j] to the w-part's row a and, for A entries
    (j < n), subtract v * w[a] from the theta-part's column j.
    """
    k, n = len(idx), b.shape[1]
    lens = offsets[idx + 1] - offsets[idx]
    rows, owner, _ = _gathered_rows(idx, lens, offsets)
    a = ea[rows]
    j = ex[rows]
    v = ev[rows]
    xf = x.ravel()
    base = owner * (2 * n)
    out[:, n:] = np.bincount(owner * n + a, v * xf[base + j], k * n).reshape(k, n) - b[idx]
    on_a = j < n
    out[:, :n] = -np.bincount((owner * n + j)[on_a], (v * xf[base + n + a])[on_a],
                              k * n).reshape(k, n)
    return out

"""Per-trajectory statistics A_i, b_i, C_i of m trajectories (definitions in
:mod:`gpope.core.statistics`) in one of four layouts with identical results, to rounding, and
the primal-dual gradients of listed trajectories: ``"dense"`` (A, C side by side as one (m, n,
2n) array; O(n^2) a gradient), ``"compact"`` (the transition rows in CSR layout; O(tau_i n)),
``"tabular"`` (compact with one-hot features as state indices; O(tau_i)) and ``"sparse"`` (each
trajectory's nonzero entries of [vec A_i, vec C_i]; O(nnz_i)). The layouts' array kernels are
in :mod:`gpope.core.trajectories.layouts`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from gpope.core.trajectories.layouts import (
    RowWeighting,
    grad_compact,
    grad_sparse,
    grad_tabular,
    rows_dense,
    sparse_dense,
    sparse_from_chunks,
    tabular_dense,
    tabular_to_sparse,
)
from gpope.core.validation import check_choice
from gpope.errors import ConfigError, DataError, SchemaError

__all__ = ["NORMALIZATIONS", "TrajectoryStats"]

#: The per-trajectory weightings of the statistics (see :mod:`gpope.core.statistics`).
NORMALIZATIONS = ("transition", "trajectory_mean")

#: The arrays a layout may hold besides b (attribute ``_<name>``; each layout's constructor says
#: which it uses). Sparse: ``ea`` the row a of each entry, ``ex`` its column as a position in
#: ``x = [theta, w]`` (A: c, C: n + c), ``ev`` its value.
_LAYOUT_ARRAYS = ("ac", "offsets", "norm", "rho", "p", "e", "s", "sn", "gn", "ea", "ex", "ev")


class TrajectoryStats:
    """Per-trajectory statistics of m trajectories with n features, in one of the layouts, with
    ``tau`` (m,) transitions per trajectory (ones when unknown) and the recorded ``normalization``.
    Build with :func:`gpope.core.statistics.trajectory_statistics`,
    :func:`~gpope.core.statistics.statistics_from_transitions`, :meth:`from_dense`,
    :meth:`from_rows` or :meth:`from_sparse_chunks`; the constructor is internal."""

    __slots__ = ("_ac", "_b", "_e", "_ea", "_ev", "_ex", "_gn", "_norm", "_offsets", "_p", "_rho",
                 "_s", "_sn", "n", "normalization", "representation", "tau")

    def __init__(self, *, representation: str, tau: np.ndarray, b: np.ndarray, normalization: str,
                 **arrays: np.ndarray | None) -> None:
        unknown = sorted(set(arrays) - set(_LAYOUT_ARRAYS))
        if unknown:
            raise TypeError(f"TrajectoryStats holds no layout arrays named {unknown}.")
        self.representation = representation
        self.tau = np.asarray(tau, dtype=np.int64)
        self._b = b
        self.n = int(b.shape[1])
        self.normalization = normalization
        for name in _LAYOUT_ARRAYS:
            setattr(self, "_" + name, arrays.get(name))

    # ------------------------------------------------------------------ basic properties
    @property
    def m(self) -> int:
        """Number of trajectories."""
        return int(self._b.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays of this object."""
        arrays = (self._b, self.tau, *(getattr(self, "_" + k) for k in _LAYOUT_ARRAYS))
        return int(sum(a.nbytes for a in arrays if a is not None))

    def __repr__(self) -> str:
        return (f"TrajectoryStats(m={self.m}, n={self.n}, representation={self.representation!r}, "
                f"normalization={self.normalization!r})")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_dense(cls, A: np.ndarray, b: np.ndarray, C: np.ndarray, *,
                   tau: np.ndarray | None = None,
                   normalization: str = "transition") -> TrajectoryStats:
        """Dense statistics from A (m, n, n), b (m, n), C (m, n, n); ``tau`` ones when not given.

        Raises:
            SchemaError: shapes disagree or values are not finite.
        """
        A = np.asarray(A, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        C = np.asarray(C, dtype=np.float64)
        if b.ndim != 2 or A.shape != (*b.shape, b.shape[1]) or C.shape != A.shape:
            raise SchemaError("TrajectoryStats.from_dense needs A (m, n, n), b (m, n), C (m, n, "
                              f"n); got A {A.shape}, b {b.shape}, C {C.shape}.")
        m, n = b.shape
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b)) and np.all(np.isfinite(C))):
            raise SchemaError("TrajectoryStats.from_dense: A, b and C must be finite.")
        check_choice("TrajectoryStats", "normalization", normalization, NORMALIZATIONS)
        tau_arr = _checked_tau(np.ones(m) if tau is None else tau, m)
        ac = np.empty((m, n, 2 * n))
        ac[:, :, :n] = A
        ac[:, :, n:] = C
        return cls(representation="dense", tau=tau_arr, b=np.ascontiguousarray(b), ac=ac,
                   normalization=normalization)

    @classmethod
    def from_rows(cls, rows: Mapping[str, np.ndarray], *,
                  normalization: str = "transition") -> TrajectoryStats:
        """Dense statistics from storage rows ``traj_index (m,)`` (a permutation of 0..m-1, any
        order), ``tau (m,)``, ``A (m, n*n)``, ``b (m, n)``, ``C (m, n*n)`` (the inverse of
        :meth:`to_rows`).

        Raises:
            SchemaError: missing columns, wrong shapes, or traj_index not a permutation of 0..m-1.
        """
        missing = [k for k in ("traj_index", "tau", "A", "b", "C") if k not in rows]
        if missing:
            raise SchemaError(f"trajectory_stats rows lack columns {missing}.")
        idx = np.asarray(rows["traj_index"], dtype=np.int64)
        b = np.asarray(rows["b"], dtype=np.float64)
        if b.ndim != 2 or idx.shape != (b.shape[0],):
            raise SchemaError(
                f"rows: b must be (m, n) and traj_index (m,); got {b.shape} and {idx.shape}."
            )
        m, n = b.shape
        if not np.array_equal(np.sort(idx), np.arange(m)):
            raise SchemaError(f"rows: traj_index must be a permutation of 0..{m - 1}.")
        order = np.argsort(idx)
        A = np.asarray(rows["A"], dtype=np.float64)
        C = np.asarray(rows["C"], dtype=np.float64)
        if A.shape != (m, n * n) or C.shape != (m, n * n):
            raise SchemaError(
                f"rows: A and C must be (m, n*n) = ({m}, {n * n}); got {A.shape} and {C.shape}."
            )
        return cls.from_dense(A[order].reshape(m, n, n), b[order], C[order].reshape(m, n, n),
                              tau=np.asarray(rows["tau"], dtype=np.int64)[order],
                              normalization=normalization)

    @classmethod
    def from_sparse_chunks(cls, *, traj_index: np.ndarray, tau: np.ndarray, b: np.ndarray,
                           lengths: np.ndarray, chunks: Iterable[tuple[np.ndarray, np.ndarray]],
                           normalization: str = "transition") -> TrajectoryStats:
        """Sparse statistics from the nonzero entries of storage rows, arriving chunk by chunk (e.g.
        Arrow record batches).

        Row r holds trajectory ``traj_index[r]`` (a permutation of 0..m-1) and ``lengths[r]``
        entries; the chunks' ``(index, value)`` pairs, concatenated, are the entries of rows
        0..m-1 in order (``index``: positions in the row's flattened ``[vec A_i, vec C_i]``,
        0..2n^2-1, each at most once per row), and each chunk ends on a row boundary. Each chunk
        is written straight into the result's arrays: peak memory is the result plus one chunk's
        temporaries.

        Raises:
            SchemaError: shapes disagree, indices out of range, values not finite, traj_index not a
                permutation, or chunks that do not match ``lengths``.
        """
        idx = np.asarray(traj_index, dtype=np.int64)
        b = np.asarray(b, dtype=np.float64)
        lens = np.asarray(lengths, dtype=np.int64)
        if b.ndim != 2 or idx.shape != (b.shape[0],) or lens.shape != (b.shape[0],):
            raise SchemaError("TrajectoryStats.from_sparse_chunks needs b (m, n), traj_index "
                              f"(m,), lengths (m,); got b {b.shape}, traj_index {idx.shape}, "
                              f"lengths {lens.shape}.")
        m, n = b.shape
        tau_arr = _checked_tau(tau, m)
        if np.any(lens < 0):
            raise SchemaError("sparse stats: entries per row must be >= 0.")
        if not np.all(np.isfinite(b)):
            raise SchemaError("sparse stats: entries and b must be finite.")
        if not np.array_equal(np.sort(idx), np.arange(m)):
            raise SchemaError(f"sparse stats: traj_index must be a permutation of 0..{m - 1}.")
        check_choice("TrajectoryStats", "normalization", normalization, NORMALIZATIONS)
        order, new_off, ea, ex, ev = sparse_from_chunks(idx, lens, chunks, n)
        return cls(representation="sparse", tau=tau_arr[order], b=np.ascontiguousarray(b[order]),
                   normalization=normalization, offsets=new_off, ea=ea, ex=ex, ev=ev)

    @classmethod
    def concatenate(cls, parts: list[TrajectoryStats]) -> TrajectoryStats:
        """The trajectories of ``parts`` in order, as one object (same representation), so a large
        data set can be built chunk by chunk.

        Raises:
            SchemaError: no parts, or parts that differ in representation, n or normalization.
        """
        if not parts:
            raise SchemaError("TrajectoryStats.concatenate needs at least one part.")
        first = parts[0]
        keys = {(p.representation, p.n, p.normalization) for p in parts}
        if len(keys) != 1:
            raise SchemaError("TrajectoryStats.concatenate: parts must share representation, n and "
                              f"normalization; got {sorted(keys, key=str)}.")
        if len(parts) == 1:
            return first

        def cat(name: str) -> np.ndarray | None:
            arrays = [getattr(p, name) for p in parts]
            return None if arrays[0] is None else np.concatenate(arrays)

        rho = None  # a part whose ratios are all 1 stores none: materialise them if others do
        if any(p._rho is not None for p in parts):
            rho = np.concatenate([np.ones(int(p._offsets[-1])) if p._rho is None else p._rho
                                  for p in parts])

        offsets = None
        if first._offsets is not None:
            shifts = np.cumsum([0] + [int(p._offsets[-1]) for p in parts[:-1]])
            offsets = np.concatenate([parts[0]._offsets[:1]] + [
                p._offsets[1:] + s for p, s in zip(parts, shifts, strict=True)])
        return cls(representation=first.representation, tau=np.concatenate([p.tau for p in parts]),
                   b=np.concatenate([p._b for p in parts]), normalization=first.normalization,
                   ac=cat("_ac"), offsets=offsets, norm=cat("_norm"), rho=rho,
                   p=cat("_p"), e=cat("_e"), s=cat("_s"), sn=cat("_sn"), gn=cat("_gn"),
                   ea=cat("_ea"), ex=cat("_ex"), ev=cat("_ev"))

    # ------------------------------------------------------------------ conversions
    def dense(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-trajectory (A (m, n, n), b (m, n), C (m, n, n)); allocates O(m n^2) for compact."""
        return self.dense_range(0, self.m)

    def dense_range(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A, b, C) of trajectories lo..hi-1 only, as :meth:`dense` would give them.

        Raises:
            DataError: not 0 <= lo <= hi <= m.
        """
        lo, hi = int(lo), int(hi)
        if not 0 <= lo <= hi <= self.m:
            raise DataError(f"dense_range needs 0 <= lo <= hi <= {self.m}; got {lo}, {hi}.")
        n = self.n
        b = self._b[lo:hi].copy()
        if self.representation == "dense":
            return self._ac[lo:hi, :, :n].copy(), b, self._ac[lo:hi, :, n:].copy()
        off = self._offsets[lo : hi + 1]
        r0, r1 = int(off[0]), int(off[-1])
        if self.representation == "sparse":
            ac = sparse_dense(off, self._ea[r0:r1], self._ex[r0:r1], self._ev[r0:r1], n)
            return ac[:, :, :n].copy(), b, ac[:, :, n:].copy()
        rw = np.repeat(self._norm[lo:hi], self.tau[lo:hi])
        if self._rho is not None:
            rw = rw * self._rho[r0:r1]
        if self.representation == "tabular":
            A, C = tabular_dense(self._s[r0:r1], self._sn[r0:r1], self._gn[r0:r1], rw,
                                  self._norm[lo:hi], off - r0, n)
        else:
            A, C = rows_dense(self._p[r0:r1], self._e[r0:r1], rw, self._norm[lo:hi], off - r0)
        return A, b, C

    def to_sparse(self) -> TrajectoryStats:
        """The same statistics in the sparse layout (a tabular layout's entries merged per
        trajectory, so gradients cost O(nnz_i) instead of O(tau_i)); a sparse layout is returned
        as it is.

        Raises:
            ConfigError: the layout is not tabular or sparse.
        """
        if self.representation == "sparse":
            return self
        if self.representation != "tabular":
            raise ConfigError(
                f"TrajectoryStats.to_sparse needs the tabular layout; got {self.representation!r}."
            )
        offsets, ea, ex, ev = tabular_to_sparse(self.tau, self._s, self._sn, self._gn,
                                                self._row_weights(), self._norm, self.n)
        return TrajectoryStats(
            representation="sparse", tau=self.tau, b=self._b, normalization=self.normalization,
            offsets=offsets, ea=ea, ex=ex, ev=ev)

    def to_rows(self) -> dict[str, np.ndarray]:
        """Storage rows: ``traj_index (m,), tau (m,), A (m, n*n), b (m, n), C (m, n*n)``."""
        A, b, C = self.dense()
        m, n = self.m, self.n
        return {
            "traj_index": np.arange(m, dtype=np.int64),
            "tau": self.tau.copy(),
            "A": A.reshape(m, n * n),
            "b": b,
            "C": C.reshape(m, n * n),
        }

    def population(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Means over trajectories (A (n, n), b (n,), C (n, n)) without materialising dense stats."""
        n, m = self.n, self.m
        b = self._b.mean(axis=0)
        if self.representation == "dense":
            ac = self._ac.mean(axis=0)
            return ac[:, :n].copy(), b, ac[:, n:].copy()
        if self.representation == "sparse":
            ac = np.bincount(self._ea.astype(np.int64) * (2 * n) + self._ex, self._ev,
                             2 * n * n).reshape(n, 2 * n) / m
            return ac[:, :n].copy(), b, ac[:, n:].copy()
        norm_rows = np.repeat(self._norm, self.tau)
        rw = self._row_weights()
        if self.representation == "tabular":
            A = (np.bincount(self._s * n + self._s, rw, n * n)
                 - np.bincount(self._s * n + self._sn, rw * self._gn, n * n)).reshape(n, n) / m
            C = np.diag(np.bincount(self._s, norm_rows, n)) / m
            return A, b, C
        A = (self._p * rw[:, None]).T @ self._e / m
        C = (self._p * norm_rows[:, None]).T @ self._p / m
        return A, b, C

    # ------------------------------------------------------------------ gradients
    def gradients(self, idx: np.ndarray, theta: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Primal-dual gradients B_j = [-A_j^T w ; A_j theta + C_j w - b_j] of listed trajectories:
        (k, 2n), row r at (theta_r, w_r) for ids ``idx`` (k,) (repeats allowed); ``theta`` and
        ``w`` are (n,) shared or (k, n) one row each.

        Raises:
            DataError: ids out of range or shapes inconsistent.
        """
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.m):
            raise DataError(f"Trajectory ids must lie in 0..{self.m - 1}; got {idx.min()}..{idx.max()}.")
        theta = np.asarray(theta, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if theta.shape != w.shape or theta.shape not in ((self.n,), (len(idx), self.n)):
            raise DataError(f"theta and w must both have shape ({self.n},) or ({len(idx)}, "
                            f"{self.n}); got {theta.shape} and {w.shape}.")
        x = np.empty((len(idx), 2 * self.n))
        x[:, : self.n] = theta
        x[:, self.n :] = w
        return self._grad_x(idx, x)

    def _row_weights(self) -> np.ndarray:
        """(T,) norm_i * rho_t per row."""
        norm_rows = np.repeat(self._norm, self.tau)
        return norm_rows if self._rho is None else norm_rows * self._rho

    def _grad_x(self, idx: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Gradients for ids idx (k,) at stacked iterates x (k, 2n) = [theta, w]; returns (k, 2n)."""
        n = self.n
        k = len(idx)
        out = np.empty((k, 2 * n))
        if self.representation == "dense":
            blk = self._ac[idx]
            np.subtract(np.matmul(blk, x[:, :, None])[:, :, 0], self._b[idx], out=out[:, n:])
            np.negative(np.matmul(x[:, None, n:], blk[:, :, :n])[:, 0, :], out=out[:, :n])
            return out
        if self.representation == "sparse":
            return grad_sparse(idx, x, out, offsets=self._offsets, ea=self._ea, ex=self._ex,
                               ev=self._ev, b=self._b)
        weighting = RowWeighting(tau=self.tau, offsets=self._offsets, norm=self._norm, rho=self._rho)
        if self.representation == "tabular":
            return grad_tabular(idx, x, out, s=self._s, sn=self._sn, gn=self._gn, b=self._b,
                                **weighting)
        return grad_compact(idx, x, out, p=self._p, e=self._e, b=self._b, **weighting)


def _checked_tau(tau: object, m: int) -> np.ndarray:
    """tau (m,) int64 with entries >= 1, for m >= 1 trajectories (else SchemaError)."""
    if m == 0:
        raise SchemaError("TrajectoryStats needs at least one trajectory; got m = 0.")
    tau_arr = np.asarray(tau, dtype=np.int64)
    if tau_arr.shape != (m,) or np.any(tau_arr < 1):
        raise SchemaError(f"tau must have shape ({m},) with entries >= 1; got {tau_arr.shape}.")
    return tau_arr

"""Per-trajectory statistics A_i, b_i, C_i and the primal-dual gradients GPOPE samples.

For trajectory i with transitions t (features phi_t, next features phi'_t, reward R_t, importance
ratio rho_t)::

    A_i = norm_i * sum_t rho_t phi_t (phi_t - gamma phi'_t)^T      (n, n)
    b_i = norm_i * sum_t rho_t R_t phi_t                            (n,)
    C_i = norm_i * sum_t phi_t phi_t^T                              (n, n)

with phi'_t = 0 on terminal rows (truncated rows keep it) and

* ``normalization="transition"`` (default): norm_i = 1 / L, L = ``length_scale`` a public constant
  (e.g. the configured maximum trajectory length). The population mean of A_i, b_i is then
  proportional to the per-transition expectation, so theta* = A^-1 b is the usual TD fixed point.
* ``normalization="trajectory_mean"`` (the paper, eq. 2.2): norm_i = 1 / tau_i. Weighting each
  trajectory equally couples a transition's weight to the trajectory's future length, which biases
  the fixed point (shown in the tests on the chain).

Representations (identical results, to floating-point rounding):

* ``"dense"``: A, C as (m, n, n) arrays (stored side by side as one (m, n, 2n) array so that one
  fancy index reads everything a step needs). Gradients cost O(n^2) per trajectory.
* ``"compact"``: the transition rows (phi_t and e_t = phi_t - gamma phi'_t, rho_t) in CSR layout;
  gradients cost O(tau_i n). b_i is kept per trajectory (m, n).
* ``"tabular"``: compact with one-hot features stored as state indices; gradients cost O(tau_i).
* ``"sparse"``: the nonzero entries of each trajectory's stored [vec A_i, vec C_i] (CSR over
  trajectories: row a, position in [theta, w], value); gradients cost O(nnz_i). Built from storage
  rows (:meth:`from_sparse`), e.g. the gold table's dense rows of a tabular spec, where A_i and C_i
  are mostly zero; values stay float64, so results equal the dense layout's to rounding.

``"auto"`` picks dense when the dense A and C take at most :data:`DENSE_MAX_BYTES`, otherwise
tabular for one-hot features and compact for the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpope.core.features import FeatureMap, TabularFeatures
from gpope.core.transitions import Transitions
from gpope.core.validation import check_choice, check_number
from gpope.errors import ConfigError, DataError, SchemaError

if TYPE_CHECKING:
    from gpope.core.policies import Policy

__all__ = [
    "DENSE_MAX_BYTES",
    "TrajectoryStats",
    "population_sums",
    "statistics_from_transitions",
    "trajectory_statistics",
]

Normalization = Literal["transition", "trajectory_mean"]
Representation = Literal["auto", "dense", "compact", "tabular", "sparse"]

#: "auto" stores A and C densely when together they take at most this many bytes.
DENSE_MAX_BYTES: int = 512 * 2**20

_NORMALIZATIONS = ("transition", "trajectory_mean")
_REPRESENTATIONS = ("auto", "dense", "compact", "tabular")
_BLOCK_BYTES = 64 * 2**20  # scratch memory for blockwise outer products


class TrajectoryStats:
    """Per-trajectory statistics of m trajectories with n features, in one of three layouts.

    Build with :func:`trajectory_statistics`, :func:`statistics_from_transitions`,
    :meth:`from_dense` or :meth:`from_rows`; the constructor is internal.

    Attributes:
        m: number of trajectories.
        n: number of features.
        tau: (m,) int64 transitions per trajectory (ones when unknown, e.g. from_dense).
        normalization: "transition" or "trajectory_mean" (recorded, informational).
        representation: "dense", "compact", "tabular" or "sparse".
    """

    __slots__ = (
        "_ac",
        "_b",
        "_e",
        "_ea",
        "_ev",
        "_ex",
        "_gn",
        "_norm",
        "_offsets",
        "_p",
        "_rho",
        "_s",
        "_sn",
        "n",
        "normalization",
        "representation",
        "tau",
    )

    def __init__(
        self,
        *,
        representation: str,
        tau: np.ndarray,
        b: np.ndarray,
        normalization: str,
        ac: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
        norm: np.ndarray | None = None,
        rho: np.ndarray | None = None,
        p: np.ndarray | None = None,
        e: np.ndarray | None = None,
        s: np.ndarray | None = None,
        sn: np.ndarray | None = None,
        gn: np.ndarray | None = None,
        ea: np.ndarray | None = None,
        ex: np.ndarray | None = None,
        ev: np.ndarray | None = None,
    ) -> None:
        self.representation = representation
        self.tau = np.asarray(tau, dtype=np.int64)
        self._b = b
        self.n = int(b.shape[1])
        self.normalization = normalization
        self._ac = ac
        self._offsets = offsets
        self._norm = norm
        self._rho = rho
        self._p = p
        self._e = e
        self._s = s
        self._sn = sn
        self._gn = gn
        self._ea = ea  # sparse: row a of the entry (0..n-1)
        self._ex = ex  # sparse: column as a position in x = [theta, w] (A: c, C: n + c)
        self._ev = ev  # sparse: value

    # ------------------------------------------------------------------ basic properties
    @property
    def m(self) -> int:
        """Number of trajectories."""
        return int(self._b.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays of this object."""
        arrays = (self._ac, self._b, self._offsets, self._norm, self._rho, self._p, self._e,
                  self._s, self._sn, self._gn, self._ea, self._ex, self._ev, self.tau)
        return int(sum(a.nbytes for a in arrays if a is not None))

    def __repr__(self) -> str:
        return (
            f"TrajectoryStats(m={self.m}, n={self.n}, representation={self.representation!r}, "
            f"normalization={self.normalization!r})"
        )

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_dense(
        cls,
        A: np.ndarray,
        b: np.ndarray,
        C: np.ndarray,
        *,
        tau: np.ndarray | None = None,
        normalization: str = "transition",
    ) -> TrajectoryStats:
        """Dense statistics from arrays A (m, n, n), b (m, n), C (m, n, n).

        Args:
            A: (m, n, n) per-trajectory A_i.
            b: (m, n) per-trajectory b_i.
            C: (m, n, n) per-trajectory C_i (symmetric positive semi-definite in practice).
            tau: optional (m,) trajectory lengths; ones when not given.
            normalization: recorded label.

        Raises:
            SchemaError: shapes disagree or values are not finite.
        """
        A = np.asarray(A, dtype=np.float64)
        b = np.asarray(b, dtype=np.float64)
        C = np.asarray(C, dtype=np.float64)
        if b.ndim != 2 or A.shape != (*b.shape, b.shape[1]) or C.shape != A.shape:
            raise SchemaError(
                "TrajectoryStats.from_dense needs A (m, n, n), b (m, n), C (m, n, n); got "
                f"A {A.shape}, b {b.shape}, C {C.shape}."
            )
        m, n = b.shape
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(b)) and np.all(np.isfinite(C))):
            raise SchemaError("TrajectoryStats.from_dense: A, b and C must be finite.")
        check_choice("TrajectoryStats", "normalization", normalization, _NORMALIZATIONS)
        tau_arr = _checked_tau(np.ones(m) if tau is None else tau, m)
        ac = np.empty((m, n, 2 * n))
        ac[:, :, :n] = A
        ac[:, :, n:] = C
        return cls(representation="dense", tau=tau_arr, b=np.ascontiguousarray(b), ac=ac,
                   normalization=normalization)

    @classmethod
    def from_rows(
        cls, rows: Mapping[str, np.ndarray], *, normalization: str = "transition"
    ) -> TrajectoryStats:
        """Dense statistics from storage rows (the inverse of :meth:`to_rows`).

        Args:
            rows: mapping with ``traj_index (m,)`` (a permutation of 0..m-1, any order),
                ``tau (m,)``, ``A (m, n*n)``, ``b (m, n)``, ``C (m, n*n)``.
            normalization: recorded label.

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
        return cls.from_dense(
            A[order].reshape(m, n, n),
            b[order],
            C[order].reshape(m, n, n),
            tau=np.asarray(rows["tau"], dtype=np.int64)[order],
            normalization=normalization,
        )

    @classmethod
    def from_sparse(
        cls,
        *,
        traj_index: np.ndarray,
        tau: np.ndarray,
        b: np.ndarray,
        offsets: np.ndarray,
        index: np.ndarray,
        value: np.ndarray,
        normalization: str = "transition",
    ) -> TrajectoryStats:
        """Sparse statistics from the nonzero entries of storage rows (same data as :meth:`from_rows`).

        Args:
            traj_index: (m,) a permutation of 0..m-1 (row r holds trajectory traj_index[r]).
            tau: (m,) transitions per trajectory.
            b: (m, n) per-trajectory b_i.
            offsets: (m + 1,) row r's entries are ``index/value[offsets[r]:offsets[r + 1]]``.
            index: positions in the row's flattened ``[vec A_i, vec C_i]`` (row-major, 0..2n^2-1),
                each at most once per row.
            value: the entries' values (zeros allowed).
            normalization: recorded label.

        Raises:
            SchemaError: shapes disagree, indices out of range, values not finite, or traj_index
                not a permutation of 0..m-1.
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        m = np.shape(b)[0] if np.ndim(b) == 2 else -1
        if offsets.shape != (m + 1,):
            raise SchemaError(
                "TrajectoryStats.from_sparse needs b (m, n), traj_index (m,), offsets (m + 1,); "
                f"got b {np.shape(b)}, traj_index {np.shape(traj_index)}, offsets {offsets.shape}."
            )
        lens = np.diff(offsets)
        if offsets[0] != 0 or np.any(lens < 0) or offsets[-1] != len(index) or len(value) != len(index):
            raise SchemaError(
                f"from_sparse: offsets must rise from 0 to len(index) = {len(index)} and value "
                f"match index; got offsets {offsets[0]}..{offsets[-1]}, {len(value)} values."
            )
        return cls.from_sparse_chunks(traj_index=traj_index, tau=tau, b=b, lengths=lens,
                                      chunks=[(index, value)], normalization=normalization)

    @classmethod
    def from_sparse_chunks(
        cls,
        *,
        traj_index: np.ndarray,
        tau: np.ndarray,
        b: np.ndarray,
        lengths: np.ndarray,
        chunks: Iterable[tuple[np.ndarray, np.ndarray]],
        normalization: str = "transition",
    ) -> TrajectoryStats:
        """As :meth:`from_sparse`, with the entries arriving chunk by chunk (e.g. Arrow record batches).

        Row r of storage has ``lengths[r]`` entries; the chunks' ``(index, value)`` pairs, concatenated,
        are the entries of rows 0, 1, ..., m-1 in that order, and each chunk ends on a row boundary.
        Each chunk is written straight into the result's arrays, in trajectory order: peak memory is
        the result plus one chunk's temporaries, not several full-size copies of the entries (at a
        1e6-patient chain, 80 million entries, that is the difference between about 2 and 5 GB).

        Raises:
            SchemaError: as :meth:`from_sparse`; also chunks that do not end on row boundaries or
                that hold a different number of entries than ``lengths`` says.
        """
        idx = np.asarray(traj_index, dtype=np.int64)
        b = np.asarray(b, dtype=np.float64)
        lens = np.asarray(lengths, dtype=np.int64)
        if b.ndim != 2 or idx.shape != (b.shape[0],) or lens.shape != (b.shape[0],):
            raise SchemaError(
                "TrajectoryStats.from_sparse needs b (m, n), traj_index (m,), lengths (m,); "
                f"got b {b.shape}, traj_index {idx.shape}, lengths {lens.shape}."
            )
        m, n = b.shape
        tau_arr = _checked_tau(tau, m)
        if np.any(lens < 0):
            raise SchemaError("from_sparse: entries per row must be >= 0.")
        if not np.all(np.isfinite(b)):
            raise SchemaError("TrajectoryStats.from_sparse: entries and b must be finite.")
        if not np.array_equal(np.sort(idx), np.arange(m)):
            raise SchemaError(f"from_sparse: traj_index must be a permutation of 0..{m - 1}.")
        check_choice("TrajectoryStats", "normalization", normalization, _NORMALIZATIONS)
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
                raise SchemaError(
                    f"from_sparse: a chunk of {k} entries ({len(value)} values) starting at entry "
                    f"{seen} does not end on a row boundary of the lengths given."
                )
            if k:
                if index.min() < 0 or index.max() >= 2 * nn:
                    raise SchemaError(f"from_sparse: entry indices must lie in 0..{2 * n * n - 1}.")
                if not np.all(np.isfinite(value)):
                    raise SchemaError("TrajectoryStats.from_sparse: entries and b must be finite.")
                dest = np.repeat(dest_start[row:end] - src_off[row:end], lens[row:end])
                dest += np.arange(seen, seen + k)
                is_c = index >= nn
                j = index - nn * is_c
                ea[dest] = j // n
                ex[dest] = j % n + n * is_c
                ev[dest] = value
            seen, row = seen + k, end
        if seen != total:
            raise SchemaError(f"from_sparse: the chunks hold {seen} entries; the lengths say {total}.")
        return cls(
            representation="sparse", tau=tau_arr[order], b=np.ascontiguousarray(b[order]),
            normalization=normalization, offsets=new_off, ea=ea, ex=ex, ev=ev,
        )

    @classmethod
    def concatenate(cls, parts: list[TrajectoryStats]) -> TrajectoryStats:
        """The trajectories of ``parts`` in order, as one object (same representation).

        Lets a large data set be built chunk by chunk (simulate, featurise, keep the statistics,
        drop the transitions), so peak memory is one chunk's transitions plus the statistics.

        Raises:
            SchemaError: no parts, or parts that differ in representation, n or normalization.
        """
        if not parts:
            raise SchemaError("TrajectoryStats.concatenate needs at least one part.")
        first = parts[0]
        keys = {(p.representation, p.n, p.normalization) for p in parts}
        if len(keys) != 1:
            raise SchemaError(
                "TrajectoryStats.concatenate: parts must share representation, n and "
                f"normalization; got {sorted(keys, key=str)}."
            )
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
        n = self.n
        if self.representation == "dense":
            return (self._ac[:, :, :n].copy(), self._b.copy(), self._ac[:, :, n:].copy())
        if self.representation == "tabular":
            A, C = _tabular_dense(self._s, self._sn, self._gn, self._row_weights(), self._norm,
                                  self._offsets, n)
        elif self.representation == "sparse":
            ac = np.zeros((self.m, n, 2 * n))
            owner = np.repeat(np.arange(self.m), np.diff(self._offsets))
            ac[owner, self._ea, self._ex] = self._ev
            return ac[:, :, :n].copy(), self._b.copy(), ac[:, :, n:].copy()
        else:
            A, C = _rows_dense(self._p, self._e, self._row_weights(), self._norm, self._offsets)
        return A, self._b.copy(), C

    def dense_range(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(A, b, C) of trajectories lo..hi-1 only, as :meth:`dense` would give them: a bounded
        slice of a large compact or tabular layout (e.g. chunked one-shot releases).

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
            ac = np.zeros((hi - lo, n, 2 * n))
            owner = np.repeat(np.arange(hi - lo), np.diff(off))
            ac[owner, self._ea[r0:r1], self._ex[r0:r1]] = self._ev[r0:r1]
            return ac[:, :, :n].copy(), b, ac[:, :, n:].copy()
        rw = np.repeat(self._norm[lo:hi], self.tau[lo:hi])
        if self._rho is not None:
            rw = rw * self._rho[r0:r1]
        if self.representation == "tabular":
            A, C = _tabular_dense(self._s[r0:r1], self._sn[r0:r1], self._gn[r0:r1], rw,
                                  self._norm[lo:hi], off - r0, n)
        else:
            A, C = _rows_dense(self._p[r0:r1], self._e[r0:r1], rw, self._norm[lo:hi], off - r0)
        return A, b, C

    def to_sparse(self) -> TrajectoryStats:
        """The same statistics in the sparse layout (each trajectory's distinct nonzero entries).

        For a tabular layout the entries are merged per trajectory (an episode that visits k
        cells has at most 2k + (distinct transitions) entries instead of one row per transition),
        so gradients cost O(nnz_i) instead of O(tau_i) and memory shrinks by the same factor.
        A sparse layout is returned as it is.

        Raises:
            ConfigError: the layout is not tabular or sparse.
        """
        if self.representation == "sparse":
            return self
        if self.representation != "tabular":
            raise ConfigError(
                f"TrajectoryStats.to_sparse needs the tabular layout; got {self.representation!r}."
            )
        n, m = self.n, self.m
        owner = np.repeat(np.arange(m, dtype=np.int64), self.tau)
        rw = self._row_weights()
        width = 2 * n
        base = owner * (n * width) + self._s * width
        keys = np.concatenate([base + self._s, base + self._sn, base + n + self._s])
        vals = np.concatenate([rw, -rw * self._gn, np.repeat(self._norm, self.tau)])
        uniq, inv = np.unique(keys, return_inverse=True)
        value = np.bincount(inv, vals, len(uniq))
        own = uniq // (n * width)
        offsets = np.concatenate([[0], np.cumsum(np.bincount(own, minlength=m))]).astype(np.int64)
        within = uniq - own * (n * width)
        return TrajectoryStats(
            representation="sparse", tau=self.tau, b=self._b, normalization=self.normalization,
            offsets=offsets, ea=(within // width).astype(np.int32),
            ex=(within % width).astype(np.int32), ev=value)

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
        """Primal-dual gradients B_j = [-A_j^T w ; A_j theta + C_j w - b_j] of listed trajectories.

        Args:
            idx: (k,) trajectory ids in 0..m-1 (repeats allowed).
            theta: (n,) shared by all k, or (k, n) one row per listed trajectory (e.g. one trial
                each).
            w: same shape as theta.

        Returns:
            (k, 2n) float64: row r is B_{idx[r]} at (theta_r, w_r).

        Raises:
            DataError: ids out of range or shapes inconsistent.
        """
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self.m):
            raise DataError(f"Trajectory ids must lie in 0..{self.m - 1}; got {idx.min()}..{idx.max()}.")
        theta = np.asarray(theta, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)
        if theta.shape != w.shape or theta.shape not in ((self.n,), (len(idx), self.n)):
            raise DataError(
                f"theta and w must both have shape ({self.n},) or ({len(idx)}, {self.n}); got "
                f"{theta.shape} and {w.shape}."
            )
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
            return self._grad_sparse(idx, x, out)
        lens = self.tau[idx]
        seg = np.cumsum(lens) - lens
        total = int(lens.sum())
        rows = np.repeat(self._offsets[idx] - seg, lens) + np.arange(total)
        owner = np.repeat(np.arange(k), lens)
        nrm = np.repeat(self._norm[idx], lens)
        rw = nrm if self._rho is None else nrm * self._rho[rows]
        if self.representation == "tabular":
            s = self._s[rows]
            sn = self._sn[rows]
            gn = self._gn[rows]
            xf = x.ravel()
            base = owner * (2 * n)
            pw = xf[base + n + s]
            et = xf[base + s] - gn * xf[base + sn]
            fs = owner * n + s
            q = rw * pw
            out[:, :n] = (np.bincount(owner * n + sn, q * gn, k * n)
                          - np.bincount(fs, q, k * n)).reshape(k, n)
            out[:, n:] = np.bincount(fs, rw * et + nrm * pw, k * n).reshape(k, n) - self._b[idx]
            return out
        p = self._p[rows]
        e = self._e[rows]
        xo = x[owner]
        pw = np.einsum("ij,ij->i", p, xo[:, n:])
        et = np.einsum("ij,ij->i", e, xo[:, :n])
        out[:, :n] = -np.add.reduceat(e * (rw * pw)[:, None], seg, axis=0)
        out[:, n:] = np.add.reduceat(p * (rw * et + nrm * pw)[:, None], seg, axis=0) - self._b[idx]
        return out

    def _grad_sparse(self, idx: np.ndarray, x: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Sparse layout: per entry (a, x-position j, v) add v * x[j] to the w-part's row a and,
        for A entries (j < n), subtract v * w[a] from the theta-part's column j."""
        n = self.n
        k = len(idx)
        lens = self._offsets[idx + 1] - self._offsets[idx]
        seg = np.cumsum(lens) - lens
        rows = np.repeat(self._offsets[idx] - seg, lens) + np.arange(int(lens.sum()))
        owner = np.repeat(np.arange(k, dtype=np.int64), lens)
        a = self._ea[rows]
        j = self._ex[rows]
        v = self._ev[rows]
        xf = x.ravel()
        base = owner * (2 * n)
        out[:, n:] = np.bincount(owner * n + a, v * xf[base + j], k * n).reshape(k, n) - self._b[idx]
        on_a = j < n
        out[:, :n] = -np.bincount((owner * n + j)[on_a], (v * xf[base + n + a])[on_a],
                                  k * n).reshape(k, n)
        return out


def _checked_tau(tau: object, m: int) -> np.ndarray:
    """tau (m,) int64 with entries >= 1, for m >= 1 trajectories (else SchemaError)."""
    if m == 0:
        raise SchemaError("TrajectoryStats needs at least one trajectory; got m = 0.")
    tau_arr = np.asarray(tau, dtype=np.int64)
    if tau_arr.shape != (m,) or np.any(tau_arr < 1):
        raise SchemaError(f"tau must have shape ({m},) with entries >= 1; got {tau_arr.shape}.")
    return tau_arr


# ---------------------------------------------------------------------- builders
def _rows_dense(
    p: np.ndarray, e: np.ndarray, rw: np.ndarray, norm: np.ndarray, offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Dense A (m, n, n), C (m, n, n) from CSR rows.

    Trajectories of equal length L are stacked as (k, L, n) and reduced by one batched matrix
    product each (A_i = P_i^T diag(rw) E_i, C_i = P_i^T diag(norm_i) P_i), in blocks of at most
    ``_BLOCK_BYTES`` of gathered rows: the same sums as forming every row's outer product, without
    materialising them (about 10x faster for n = 36).
    """
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


def _tabular_dense(
    s: np.ndarray,
    sn: np.ndarray,
    gn: np.ndarray,
    rw: np.ndarray,
    norm: np.ndarray,
    offsets: np.ndarray,
    n: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Dense A, C (m, n, n) from one-hot state indices by flat bincounts."""
    m = len(offsets) - 1
    owner = np.repeat(np.arange(m, dtype=np.int64), np.diff(offsets)) * (n * n)
    size = m * n * n
    A = np.bincount(owner + s * n + s, rw, size) - np.bincount(owner + s * n + sn, rw * gn, size)
    C = np.bincount(owner + s * (n + 1), np.repeat(norm, np.diff(offsets)), size)
    return A.reshape(m, n, n), C.reshape(m, n, n)


def _one_hot_indices(phi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(index (T,), is_nonzero (T,)) if every row of phi is one-hot or all zero, else None."""
    nz = phi != 0
    cnt = nz.sum(axis=1)
    if np.any(cnt > 1):
        return None
    idx = np.argmax(nz, axis=1)
    has = cnt == 1
    if np.any(phi[np.arange(len(phi)), idx][has] != 1.0):
        return None
    return idx.astype(np.int64), has


def _validate_common(
    owner: str,
    n_rows: int,
    reward: np.ndarray,
    rho: np.ndarray,
    traj_index: np.ndarray,
    n_trajectories: int,
    terminal: np.ndarray,
    gamma: float,
    normalization: str,
    length_scale: float | None,
    representation: str,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Check inputs; return (reward, rho, traj_index, terminal, order) with order sorting by traj."""
    check_number(owner, "gamma", gamma, ge=0.0, le=1.0)
    check_choice(owner, "normalization", normalization, _NORMALIZATIONS)
    check_choice(owner, "representation", representation, _REPRESENTATIONS)
    if normalization == "transition":
        if length_scale is None:
            raise ConfigError(
                f"The 'length_scale' parameter of {owner} must be a number > 0 when "
                "normalization='transition' (a public constant such as the maximum trajectory "
                "length). Got None instead."
            )
        check_number(owner, "length_scale", length_scale, gt=0.0)
    arrays = {}
    for name, arr, dtype in (("reward", reward, np.float64), ("rho", rho, np.float64),
                             ("traj_index", traj_index, np.int64), ("terminal", terminal, bool)):
        a = np.asarray(arr)
        if a.shape != (n_rows,):
            raise SchemaError(f"{owner}: {name} must have shape ({n_rows},); got {a.shape}.")
        arrays[name] = a.astype(dtype, copy=False)
    for name in ("reward", "rho"):
        if not np.all(np.isfinite(arrays[name])):
            raise DataError(f"{owner}: {name} must be finite for every transition.")
    if np.any(arrays["rho"] < 0):
        raise DataError(f"{owner}: importance ratios rho must be >= 0.")
    ti = arrays["traj_index"]
    m = int(n_trajectories)
    if m < 1:
        raise DataError(f"{owner}: n_trajectories must be >= 1; got {n_trajectories}.")
    if n_rows and (ti.min() < 0 or ti.max() >= m):
        raise DataError(f"{owner}: traj_index must lie in 0..{m - 1}; got {ti.min()}..{ti.max()}.")
    counts = np.bincount(ti, minlength=m)
    if np.any(counts == 0):
        raise DataError(
            f"{owner}: {int(np.sum(counts == 0))} of {m} trajectories have no transitions; "
            "traj_index must be dense 0..m-1."
        )
    order = np.argsort(ti, kind="stable") if np.any(np.diff(ti) < 0) else np.arange(n_rows)
    return arrays["reward"], arrays["rho"], ti, arrays["terminal"], order


def _choose(representation: str, m: int, n: int, one_hot: bool) -> str:
    if representation == "auto":
        if 2 * 8 * m * n * n <= DENSE_MAX_BYTES:
            return "dense"
        return "tabular" if one_hot else "compact"
    return representation


def _build(
    *,
    m: int,
    n: int,
    tau: np.ndarray,
    norm: np.ndarray,
    reward: np.ndarray,
    rho: np.ndarray,
    gamma: float,
    terminal: np.ndarray,
    normalization: str,
    rep: str,
    phi: np.ndarray | None = None,
    next_phi: np.ndarray | None = None,
    s: np.ndarray | None = None,
    sn: np.ndarray | None = None,
) -> TrajectoryStats:
    """Assemble stats from rows sorted by trajectory (either feature rows or one-hot indices)."""
    offsets = np.concatenate([[0], np.cumsum(tau)]).astype(np.int64)
    owner = np.repeat(np.arange(m, dtype=np.int64), tau)
    rho_store = None if np.all(rho == 1.0) else np.ascontiguousarray(rho)
    rw = norm[owner] * rho
    if s is not None:
        gn = np.where(terminal, 0.0, float(gamma))
        sn = np.where(terminal, s, sn)
        b = np.bincount(owner * n + s, rw * reward, m * n).reshape(m, n)
        stats = TrajectoryStats(
            representation="tabular", tau=tau, b=b, normalization=normalization,
            offsets=offsets, norm=norm, rho=rho_store, s=s.astype(np.int64), sn=sn.astype(np.int64),
            gn=gn,
        )
    else:
        e = phi - float(gamma) * np.where(terminal[:, None], 0.0, next_phi)
        b = np.add.reduceat(phi * (rw * reward)[:, None], offsets[:-1], axis=0)
        stats = TrajectoryStats(
            representation="compact", tau=tau, b=b, normalization=normalization,
            offsets=offsets, norm=norm, rho=rho_store, p=np.ascontiguousarray(phi), e=e,
        )
    if rep == "dense":
        A, b, C = stats.dense()
        return TrajectoryStats.from_dense(A, b, C, tau=tau, normalization=normalization)
    return stats


def _norms(tau: np.ndarray, normalization: str, length_scale: float | None) -> np.ndarray:
    if normalization == "trajectory_mean":
        return 1.0 / tau.astype(np.float64)
    return np.full(len(tau), 1.0 / float(length_scale))  # type: ignore[arg-type]


def trajectory_statistics(
    phi: np.ndarray,
    next_phi: np.ndarray,
    reward: np.ndarray,
    rho: np.ndarray,
    traj_index: np.ndarray,
    n_trajectories: int,
    *,
    gamma: float,
    terminal: np.ndarray,
    normalization: Normalization = "transition",
    length_scale: float | None = None,
    representation: Representation = "auto",
) -> TrajectoryStats:
    """Per-trajectory statistics from featurised transitions (vectorised; rows in any order).

    Args:
        phi: (T, n) features of S_t.
        next_phi: (T, n) features of S_{t+1} (ignored on terminal rows).
        reward: (T,) rewards R_t.
        rho: (T,) importance ratios >= 0.
        traj_index: (T,) trajectory ids, every id in 0..n_trajectories-1 present.
        n_trajectories: m.
        gamma: discount in [0, 1].
        terminal: (T,) bool; terminal rows get phi'_t = 0.
        normalization: "transition" (sum / length_scale) or "trajectory_mean" (mean, the paper).
        length_scale: public L > 0, required for "transition".
        representation: "auto", "dense", "compact" or "tabular" (needs one-hot phi and next_phi).

    Returns:
        TrajectoryStats; the order of rows within a trajectory does not matter.

    Raises:
        ConfigError: invalid gamma, normalization, length_scale or representation.
        SchemaError, DataError: malformed arrays.
    """
    owner = "trajectory_statistics"
    phi = np.asarray(phi, dtype=np.float64)
    next_phi = np.asarray(next_phi, dtype=np.float64)
    if phi.ndim != 2 or next_phi.shape != phi.shape:
        raise SchemaError(
            f"{owner}: phi and next_phi must both be (T, n); got {phi.shape} and {next_phi.shape}."
        )
    if not (np.all(np.isfinite(phi)) and np.all(np.isfinite(next_phi))):
        raise DataError(f"{owner}: features must be finite.")
    reward, rho, ti, terminal, order = _validate_common(
        owner, phi.shape[0], reward, rho, traj_index, n_trajectories, terminal, gamma,
        normalization, length_scale, representation,
    )
    m, n = int(n_trajectories), phi.shape[1]
    phi, next_phi, reward, rho, ti, terminal = (
        a[order] for a in (phi, next_phi, reward, rho, ti, terminal)
    )
    tau = np.bincount(ti, minlength=m).astype(np.int64)
    norm = _norms(tau, normalization, length_scale)
    oh = oh_next = None
    if representation in ("auto", "tabular"):
        oh = _one_hot_indices(phi)
        oh_next = _one_hot_indices(next_phi)
    one_hot = oh is not None and oh_next is not None and bool(np.all(oh[1]))
    if representation == "tabular" and not one_hot:
        raise DataError(
            f"{owner}: representation='tabular' needs one-hot phi rows and one-hot or zero "
            "next_phi rows; use 'compact' or 'dense' for other features."
        )
    rep = _choose(representation, m, n, one_hot)
    if rep == "tabular":
        terminal = terminal | ~oh_next[1]  # all-zero next features behave as terminal
        return _build(m=m, n=n, tau=tau, norm=norm, reward=reward, rho=rho, gamma=gamma,
                      terminal=terminal, normalization=normalization, rep=rep, s=oh[0],
                      sn=oh_next[0])
    return _build(m=m, n=n, tau=tau, norm=norm, reward=reward, rho=rho, gamma=gamma,
                  terminal=terminal, normalization=normalization, rep=rep, phi=phi,
                  next_phi=next_phi)


def statistics_from_transitions(
    transitions: Transitions,
    feature_map: FeatureMap,
    rho: np.ndarray,
    *,
    gamma: float,
    normalization: Normalization = "transition",
    length_scale: float | None = None,
    representation: Representation = "auto",
) -> TrajectoryStats:
    """Per-trajectory statistics of a :class:`Transitions` batch under a feature map.

    Tabular feature maps never materialise one-hot rows (the tabular or dense-by-bincount path is
    used), so the chain at m = 5e5 fits in memory.

    Args:
        transitions: the batch (sorted by trajectory, dense ids).
        feature_map: phi.
        rho: (T,) importance ratios, e.g. from ``policies.importance_ratios``.
        gamma, normalization, length_scale, representation: as in :func:`trajectory_statistics`;
            "compact" with a tabular map means "tabular".

    Returns:
        TrajectoryStats.
    """
    tr = transitions
    if not isinstance(feature_map, TabularFeatures):
        return trajectory_statistics(
            feature_map(tr.state), feature_map(tr.next_state), tr.reward, rho, tr.traj_index,
            tr.n_trajectories, gamma=gamma, terminal=tr.terminal, normalization=normalization,
            length_scale=length_scale, representation=representation,
        )
    owner = "statistics_from_transitions"
    reward, rho_a, ti, terminal, order = _validate_common(
        owner, tr.n_transitions, tr.reward, rho, tr.traj_index, tr.n_trajectories, tr.terminal,
        gamma, normalization, length_scale, representation,
    )
    s = feature_map.indices(tr.state)[order]
    nxt = np.asarray(tr.next_state, dtype=np.float64)[order].copy()
    terminal = terminal[order]
    nxt[terminal, 0] = 0.0  # any valid index; its features are zeroed
    sn = feature_map.indices(nxt)
    m, n = tr.n_trajectories, feature_map.n_features
    tau = np.bincount(ti, minlength=m).astype(np.int64)
    rep = _choose(representation, m, n, True)
    rep = "tabular" if rep == "compact" else rep
    return _build(m=m, n=n, tau=tau, norm=_norms(tau, normalization, length_scale),
                  reward=reward[order], rho=rho_a[order], gamma=gamma, terminal=terminal,
                  normalization=normalization, rep=rep, s=s, sn=sn)


def population_sums(
    batch: Transitions,
    target: Policy,
    features: FeatureMap,
    *,
    gamma: float,
    length_scale: float | None,
    next_is_following_state: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sums over the trajectories of ``batch`` of A_i, b_i, C_i (population estimates: divide by m).

    Per trajectory weight ``w_i = 1/length_scale`` (``transition``) or ``1/tau_i`` when
    ``length_scale`` is None (``trajectory_mean``); ``A_i = w_i sum_t rho_t phi_t (phi_t - gamma
    phi'_t)^T``, ``b_i = w_i sum_t rho_t R_t phi_t``, ``C_i = w_i sum_t phi_t phi_t^T`` with
    ``phi' = 0`` on terminal steps and ``rho_t = target(a_t|s_t) / behavior_prob_t``.

    ``next_is_following_state``: the domain records each step's next state as the next row's
    state (true for noiseless simulators), so only the trajectories' last next states are
    featurised. Products run in row blocks of 512: one huge tall-skinny ``X^T Y`` was up to 50x
    slower on a busy machine (OpenBLAS threading).
    """
    probs = target.probabilities(batch.state)[np.arange(batch.n_transitions), batch.action]
    rho = probs / batch.behavior_prob
    if length_scale is None:
        w = 1.0 / batch.lengths[batch.traj_index]
    else:
        w = np.full(batch.n_transitions, 1.0 / length_scale)
    phi = features(batch.state)
    if next_is_following_state:
        last = batch.offsets[1:] - 1
        nphi = np.empty_like(phi)
        nphi[:-1] = phi[1:]
        nphi[last] = features(batch.next_state[last])
    else:
        nphi = features(batch.next_state)
    nphi[batch.terminal] = 0.0
    wphi = phi * w[:, None]
    n = phi.shape[1]
    A, C = np.zeros((n, n)), np.zeros((n, n))
    b = (wphi * (rho * batch.reward)[:, None]).sum(axis=0)
    for lo in range(0, batch.n_transitions, 512):
        rows = slice(lo, lo + 512)
        A += (wphi[rows] * rho[rows, None]).T @ (phi[rows] - gamma * nphi[rows])
        C += wphi[rows].T @ phi[rows]
    return A, b, C

"""Compiled inner loop of the single-trial GPOPE fast path (numba), with a numpy fallback.

The sequential GTD2 steps cannot be vectorised across steps; in numpy each step costs a handful
of small calls (~1 us each), which dominates for small n. :func:`dense_steps` runs a chunk of
steps on dense statistics (n <= :data:`JIT_MAX_FEATURES`) as one compiled loop with exactly the
arithmetic of the numpy path (clip to h, step, noise, tail sum); the clip is total, as
:func:`gpope.core.mechanisms.clipping.clip_rows` (non-finite or overflowing gradients are mapped to norm <= h
too). numba compiles it on first use (a second or two, cached on disk when the package directory
is writable); without numba (or with ``GPOPE_NO_JIT=1``)
:func:`dense_steps` returns False and the caller runs its numpy loop.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from gpope.core.jit import numba_module

__all__ = ["JIT_MAX_FEATURES", "StepChunk", "dense_steps", "jit_available", "poisson_steps"]

#: Above this many features the numpy path (BLAS matrix-vector products) is as fast or faster.
JIT_MAX_FEATURES = 64


class StepChunk(NamedTuple):
    """Consecutive single-trial steps of one plan chunk, run in place on the iterate.

    Attributes:
        x: (2n,) iterate [theta, w], updated in place.
        acc: (n,) sum of the averaged thetas, updated in place.
        beta: (L,) step sizes of the chunk's L steps.
        h: clip bound of each gradient (inf: no clipping).
        z: (L, 2n) scaled noise subtracted after each step, or None.
        c0: global index of the chunk's first step.
        avg_from: first step whose theta enters ``acc``.
    """

    x: np.ndarray
    acc: np.ndarray
    beta: np.ndarray
    h: float
    z: np.ndarray | None
    c0: int
    avg_from: int


# The compiled helpers the compiled loops call, set by _compiled(). The loops reach them as module
# globals (numba resolves those when it compiles), not as closure variables: numba's on-disk cache
# key includes the pickled closure cells, and a pickled dispatcher differs in every process, so a
# closure would make every process compile again.
_clip_special: Callable | None = None
_factor: Callable | None = None
_finish: Callable | None = None
_add_clipped: Callable | None = None


@functools.cache
def _compiled() -> tuple[Callable, Callable, Callable, Callable] | None:
    """The compiled loops (single-trial dense; Poisson dense, tabular, sparse), None without numba."""
    global _clip_special, _factor, _finish, _add_clipped
    numba = numba_module()
    if numba is None:
        return None

    @numba.njit(cache=True, nogil=True)
    def clip_special(g, h):  # pragma: no cover - compiled
        # The rare rows of gpope.core.mechanisms.clipping.clip_rows (norm overflowed, inf or NaN),
        # clipped in place; returns the factor the caller multiplies g by: always 1.0.
        d = g.shape[0]
        has_nan = False
        n_inf = 0
        scale = 0.0
        for k in range(d):
            v = g[k]
            if v != v:
                has_nan = True
            elif np.isinf(v):
                n_inf += 1
            elif abs(v) > scale:
                scale = abs(v)
        if has_nan:  # no direction can be recovered: the zero row
            for k in range(d):
                g[k] = 0.0
            return 1.0
        if n_inf > 0:  # the sign direction of the infinite entries
            c = h / np.sqrt(n_inf)
            for k in range(d):
                g[k] = c * np.sign(g[k]) if np.isinf(g[k]) else 0.0
            return 1.0
        nu2 = 0.0  # finite but the squared norm overflowed: rescale by the largest magnitude
        for k in range(d):
            nu2 += (g[k] / scale) ** 2
        c = h / np.sqrt(nu2)
        for k in range(d):
            g[k] = (g[k] / scale) * c
        return 1.0

    @numba.njit(cache=True, nogil=True)
    def factor(g, nrm, h):  # pragma: no cover - compiled
        # The clip factor of g (norm nrm).
        if nrm <= h or h == np.inf:
            return 1.0
        if nrm < np.inf:
            return h / nrm
        return _clip_special(g, h)

    @numba.njit(cache=True, nogil=True)
    def finish(x, acc, upd, scale, z, has_z, s, step, avg_from):  # pragma: no cover - compiled
        R, n2 = x.shape
        n = n2 // 2
        for r in range(R):
            for j in range(n2):
                x[r, j] -= scale * upd[r, j]
                if has_z:
                    x[r, j] -= z[s, r, j]
                upd[r, j] = 0.0
            if step >= avg_from:
                for j in range(n):
                    acc[r, j] += x[r, j]

    @numba.njit(cache=True, nogil=True)
    def add_clipped(g, h, upd, r):  # pragma: no cover - compiled
        # upd[r] += g clipped to norm h (the norm summed in index order)
        nrm2 = 0.0
        for c in range(g.shape[0]):
            nrm2 += g[c] * g[c]
        f = _factor(g, np.sqrt(nrm2), h)
        for c in range(g.shape[0]):
            upd[r, c] += f * g[c]

    _clip_special, _factor, _finish, _add_clipped = clip_special, factor, finish, add_clipped

    @numba.njit(cache=True, nogil=True)
    def steps(blocks, bs, x, acc, beta, h, z, has_z, c0, avg_from):  # pragma: no cover - compiled
        L = blocks.shape[0]
        n = bs.shape[1]
        g = np.empty(2 * n)  # [gt; gw]
        for s in range(L):
            blk = blocks[s]
            nrm2 = 0.0
            for i in range(n):  # gw = [A | C] x - b   (the w gradient)
                v = -bs[s, i]
                for j in range(2 * n):
                    v += blk[i, j] * x[j]
                g[n + i] = v
                nrm2 += v * v
            for j in range(n):  # gt = A^T w        (minus the theta gradient)
                v = 0.0
                for i in range(n):
                    v += x[n + i] * blk[i, j]
                g[j] = v
                nrm2 += v * v
            nrm = np.sqrt(nrm2)
            if nrm <= h:
                f = beta[s]
            elif nrm < np.inf:
                f = beta[s] * h / nrm
            else:  # overflow, inf or NaN: total clip (gpope.core.mechanisms.clipping), then a plain step
                f = beta[s] * _clip_special(g, h)
            for j in range(n):
                x[j] += f * g[j]
                x[n + j] -= f * g[n + j]
            if has_z:
                for j in range(2 * n):
                    x[j] -= z[s, j]
            if c0 + s >= avg_from:
                for j in range(n):
                    acc[j] += x[j]

    @numba.njit(cache=True, nogil=True)
    def dense(ac, b, members, owner, offs, s0, s1, x, acc, beta, div, h, z, has_z, c0,
              avg_from):  # pragma: no cover - compiled
        R, n2 = x.shape
        n = n2 // 2
        g = np.empty(n2)
        upd = np.zeros((R, n2))
        for s in range(s0, s1):
            for k in range(offs[s], offs[s + 1]):
                j = members[k]
                r = owner[k]
                nrm2 = 0.0
                for i in range(n):  # w gradient: [A | C] x - b
                    v = -b[j, i]
                    for c in range(n2):
                        v += ac[j, i, c] * x[r, c]
                    g[n + i] = v
                    nrm2 += v * v
                for c in range(n):  # theta gradient: -A^T w
                    v = 0.0
                    for i in range(n):
                        v += x[r, n + i] * ac[j, i, c]
                    g[c] = -v
                    nrm2 += v * v
                f = _factor(g, np.sqrt(nrm2), h)
                for c in range(n2):
                    upd[r, c] += f * g[c]
            _finish(x, acc, upd, beta[s] / div, z, has_z, s, c0 + s, avg_from)

    @numba.njit(cache=True, nogil=True)
    def tabular(st, sn, gn, rho, has_rho, row0, tau, norm, b, members, owner, offs, s0, s1, x,
                acc, beta, div, h, z, has_z, c0, avg_from):  # pragma: no cover - compiled
        R, n2 = x.shape
        n = n2 // 2
        g = np.zeros(n2)
        upd = np.zeros((R, n2))
        for s in range(s0, s1):
            for k in range(offs[s], offs[s + 1]):
                j = members[k]
                r = owner[k]
                for c in range(n2):
                    g[c] = 0.0
                for i in range(n):
                    g[n + i] = -b[j, i]
                nj = norm[j]
                for t in range(row0[j], row0[j] + tau[j]):
                    a = st[t]
                    a2 = sn[t]
                    rw = nj * rho[t] if has_rho else nj
                    pw = x[r, n + a]
                    et = x[r, a] - gn[t] * x[r, a2]
                    q = rw * pw
                    g[a2] += q * gn[t]
                    g[a] -= q
                    g[n + a] += rw * et + nj * pw
                _add_clipped(g, h, upd, r)
            _finish(x, acc, upd, beta[s] / div, z, has_z, s, c0 + s, avg_from)

    @numba.njit(cache=True, nogil=True)
    def sparse(row0, ea, ex, ev, b, members, owner, offs, s0, s1, x, acc, beta, div, h, z,
               has_z, c0, avg_from):  # pragma: no cover - compiled
        # Sparse layout: entry (a, x-position c, v) adds v * x[c] to the w-part's row a and, for
        # A entries (c < n), subtracts v * w[a] from the theta-part's column c.
        R, n2 = x.shape
        n = n2 // 2
        g = np.zeros(n2)
        upd = np.zeros((R, n2))
        for s in range(s0, s1):
            for k in range(offs[s], offs[s + 1]):
                j = members[k]
                r = owner[k]
                for c in range(n):
                    g[c] = 0.0
                    g[n + c] = -b[j, c]
                for e in range(row0[j], row0[j + 1]):
                    a = ea[e]
                    c = ex[e]
                    v = ev[e]
                    g[n + a] += v * x[r, c]
                    if c < n:
                        g[c] -= v * x[r, n + a]
                _add_clipped(g, h, upd, r)
            _finish(x, acc, upd, beta[s] / div, z, has_z, s, c0 + s, avg_from)

    return steps, dense, tabular, sparse


def jit_available() -> bool:
    """True when the compiled loop is in use."""
    return _compiled() is not None


def dense_steps(blocks: np.ndarray, bs: np.ndarray, chunk: StepChunk) -> bool:
    """Run the chunk's steps in place on ``chunk.x`` and ``chunk.acc``; False if not compiled.

    blocks: (L, n, 2n) gathered [A_j | C_j]; bs: (L, n) gathered b_j.
    """
    if bs.shape[1] > JIT_MAX_FEATURES:
        return False
    fns = _compiled()
    if fns is None:
        return False
    z = chunk.z
    zz = z if z is not None else np.zeros((1, chunk.x.shape[0]))
    fns[0](np.ascontiguousarray(blocks), np.ascontiguousarray(bs), chunk.x, chunk.acc,
       np.ascontiguousarray(chunk.beta, dtype=np.float64), float(chunk.h),
       np.ascontiguousarray(zz), z is not None, int(chunk.c0), int(chunk.avg_from))
    return True


def poisson_steps(stats: object, members: np.ndarray, owner: np.ndarray, offsets: np.ndarray,
                  s0: int, s1: int, x: np.ndarray, acc: np.ndarray, beta: np.ndarray, div: float,
                  h: float, z: np.ndarray | None, c0: int, avg_from: int) -> bool:
    """Run Poisson steps s0..s1-1 of a plan chunk for R trials in place; False if not compiled.

    Same arithmetic as the numpy loop of :mod:`gpope.core.gpope.solver`: per step, the clipped gradients
    of the batch members (at their trial's iterate) are summed per trial, x -= beta_s / div * sum,
    then the scaled noise z[s] (L, R, 2n) is subtracted and acc (R, n) gets the tail sum. Works on
    ``dense`` (n <= :data:`JIT_MAX_FEATURES`), ``tabular`` and ``sparse`` statistics.
    """
    rep = getattr(stats, "representation", None)
    fns = _compiled()
    if fns is None or rep not in ("dense", "tabular", "sparse"):
        return False
    n = stats.n  # type: ignore[attr-defined]
    if rep == "dense" and n > JIT_MAX_FEATURES:
        return False
    has_z = z is not None
    zz = z if has_z else np.zeros((1, 1, x.shape[1]))
    beta = np.ascontiguousarray(beta, dtype=np.float64)
    common = (members, owner, offsets, int(s0), int(s1), x, acc, beta, float(div), float(h), zz,
              has_z, int(c0), int(avg_from))
    if rep == "dense":
        fns[1](stats._ac, stats._b, *common)  # type: ignore[attr-defined]
        return True
    if rep == "sparse":
        st = stats
        fns[3](st._offsets, st._ea, st._ex, st._ev, st._b, *common)  # type: ignore[attr-defined]
        return True
    st = stats  # tabular
    rho = st._rho if st._rho is not None else np.ones(1)  # type: ignore[attr-defined]
    fns[2](st._s, st._sn, st._gn, rho, st._rho is not None,  # type: ignore[attr-defined]
           st._offsets, st.tau, st._norm, st._b, *common)  # type: ignore[attr-defined]
    return True

"""Compiled inner loop of the single-trial GPOPE fast path (numba), with a numpy fallback.

The sequential GTD2 steps cannot be vectorised across steps; in numpy each step costs a handful
of small calls (~1 us each), which dominates for small n. :func:`dense_steps` runs a chunk of
steps on dense statistics (n <= :data:`JIT_MAX_FEATURES`) as one compiled loop with exactly the
arithmetic of the numpy path (clip to h, step, noise, tail sum); the clip is total, as
:func:`gpope.core.clipping.clip_rows` (non-finite or overflowing gradients are mapped to norm <= h
too). numba compiles it on first use (a second or two, cached on disk when the package directory
is writable); without numba (or with ``GPOPE_NO_JIT=1``)
:func:`dense_steps` returns False and the caller runs its numpy loop.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np

__all__ = ["JIT_MAX_FEATURES", "dense_steps", "jit_available"]

#: Above this many features the numpy path (BLAS matrix-vector products) is as fast or faster.
JIT_MAX_FEATURES = 64


@functools.cache
def _compiled() -> Callable | None:
    if os.environ.get("GPOPE_NO_JIT"):
        return None
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a pinned dependency
        return None

    @numba.njit(cache=True, nogil=True)
    def total_clip(gt, gw, h):  # pragma: no cover - compiled
        # The rare path of gpope.core.clipping.clip_rows on [gt; gw], in place; returns the
        # factor the caller multiplies the (now clipped) parts by: always 1.0.
        n = gt.shape[0]
        has_nan = False
        n_inf = 0
        scale = 0.0
        for k in range(2 * n):
            v = gt[k] if k < n else gw[k - n]
            if v != v:
                has_nan = True
            elif np.isinf(v):
                n_inf += 1
            elif abs(v) > scale:
                scale = abs(v)
        if has_nan:  # no direction can be recovered: the zero row
            for i in range(n):
                gt[i] = 0.0
                gw[i] = 0.0
            return 1.0
        if n_inf > 0:  # the sign direction of the infinite entries
            c = h / np.sqrt(n_inf)
            for i in range(n):
                gt[i] = c * np.sign(gt[i]) if np.isinf(gt[i]) else 0.0
                gw[i] = c * np.sign(gw[i]) if np.isinf(gw[i]) else 0.0
            return 1.0
        nu2 = 0.0  # finite but the squared norm overflowed: rescale by the largest magnitude
        for i in range(n):
            nu2 += (gt[i] / scale) ** 2 + (gw[i] / scale) ** 2
        c = h / np.sqrt(nu2)
        for i in range(n):
            gt[i] = (gt[i] / scale) * c
            gw[i] = (gw[i] / scale) * c
        return 1.0

    @numba.njit(cache=True, nogil=True)
    def steps(blocks, bs, x, acc, beta, h, z, has_z, c0, avg_from):  # pragma: no cover - compiled
        L = blocks.shape[0]
        n = bs.shape[1]
        gw = np.empty(n)
        gt = np.empty(n)
        for s in range(L):
            blk = blocks[s]
            nrm2 = 0.0
            for i in range(n):  # gw = [A | C] x - b   (the w gradient)
                v = -bs[s, i]
                for j in range(2 * n):
                    v += blk[i, j] * x[j]
                gw[i] = v
                nrm2 += v * v
            for j in range(n):  # gt = A^T w        (minus the theta gradient)
                v = 0.0
                for i in range(n):
                    v += x[n + i] * blk[i, j]
                gt[j] = v
                nrm2 += v * v
            nrm = np.sqrt(nrm2)
            if nrm <= h:
                f = beta[s]
            elif nrm < np.inf:
                f = beta[s] * h / nrm
            else:  # overflow, inf or NaN: total clip (gpope.core.clipping), then a plain step
                f = beta[s] * total_clip(gt, gw, h)
            for j in range(n):
                x[j] += f * gt[j]
                x[n + j] -= f * gw[j]
            if has_z:
                for j in range(2 * n):
                    x[j] -= z[s, j]
            if c0 + s >= avg_from:
                for j in range(n):
                    acc[j] += x[j]

    return steps


def jit_available() -> bool:
    """True when the compiled loop is in use."""
    return _compiled() is not None


def dense_steps(
    blocks: np.ndarray,
    bs: np.ndarray,
    x: np.ndarray,
    acc: np.ndarray,
    beta: np.ndarray,
    h: float,
    z: np.ndarray | None,
    c0: int,
    avg_from: int,
) -> bool:
    """Run the chunk's steps in place on x (2n,) and acc (n,); False if not compiled.

    blocks: (L, n, 2n) gathered [A_j | C_j]; bs: (L, n) gathered b_j; z: (L, 2n) scaled noise.
    """
    if bs.shape[1] > JIT_MAX_FEATURES:
        return False
    fn = _compiled()
    if fn is None:
        return False
    zz = z if z is not None else np.zeros((1, x.shape[0]))
    fn(np.ascontiguousarray(blocks), np.ascontiguousarray(bs), x, acc,
       np.ascontiguousarray(beta, dtype=np.float64), float(h), np.ascontiguousarray(zz),
       z is not None, int(c0), int(avg_from))
    return True

"""Compiled inner loop of the single-trial GPOPE fast path (numba), with a numpy fallback.

The sequential GTD2 steps cannot be vectorised across steps; in numpy each step costs a handful
of small calls (~1 us each), which dominates for small n. :func:`dense_steps` runs a chunk of
steps on dense statistics (n <= :data:`JIT_MAX_FEATURES`) as one compiled loop with exactly the arithmetic of the numpy path
(clip to h, step, noise, tail sum). numba compiles it on first use (a second or two, cached on
disk when the package directory is writable); without numba (or with ``GPOPE_NO_JIT=1``)
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
            f = beta[s] if nrm <= h else beta[s] * h / nrm
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

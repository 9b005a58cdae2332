"""Scoring GPOPE candidates on private data: the SSP release of in-memory statistics and a
pessimistic private MSPBE.

The release is the SSP mechanism of :mod:`gpope.core.ssp` with one group: rows clipped jointly
to ``clip``, summed, N(0, (sigma clip)^2) added to every entry: ``GaussianDpEvent(sigma)``
under add/remove-one (Dwork and Roth 2014, Thm. A.1).

Score (:func:`selection_mspbe`). Under the noisy means ``A~ = A + dA``, ``b~ = b + db`` the
residual of theta gains ``e = dA theta - db ~ N(0, v I)``, ``v = s^2 (||theta||^2 + 1)``. With
``W = C_floor^-1`` fixed, ``Q = r~^T W r~`` has ``E[Q] = MSPBE_W(theta) + v tr(W)`` and
``Var[Q] = 4 v r^T W^2 r + 2 v^2 tr(W^2)``. The score subtracts the mean (else noise favours
small thetas) and adds ``z`` estimated std (else a diverged run's huge theta can win by chance).
Post-processing of the release (Dwork and Roth 2014, Prop. 2.1).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from gpope.core.ssp import (
    NoisyStatistics,
    clip_statistics,
    noise_norm_bound,
    release_noisy_statistics,
    statistics_vectors,
)
from gpope.core.statistics import TrajectoryStats
from gpope.core.validation import check_number
from gpope.errors import ConfigError

__all__ = ["floored_c_inverse", "noisy_statistics", "selection_mspbe", "selection_relative_mspbe",
           "statistics_blocks", "statistics_norms"]

_BLOCK_ROWS = 2_000_000  # transitions x n per block of statistics_blocks (bounds scratch memory)


def statistics_blocks(
    stats: TrajectoryStats, block: int | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Per-trajectory (ids, A (k, n, n), b (k, n), C (k, n, n)) in blocks of trajectories.

    Built from ``stats.gradients``: at (theta, w) = (e_j, 0) the w-part of the gradient is
    ``A_i e_j - b_i``, at (0, e_j) it is ``C_i e_j - b_i`` and at (0, 0) it is ``-b_i``.
    """
    n, m = stats.n, stats.m
    if block is None:
        per = max(1.0, float(np.mean(stats.tau))) * n
        block = max(1, int(_BLOCK_ROWS // per))
    eye = np.eye(n)
    zeros_n = np.zeros(n)
    for lo in range(0, m, block):
        ids = np.arange(lo, min(m, lo + block), dtype=np.int64)
        k = len(ids)
        b = -stats.gradients(ids, zeros_n, zeros_n)[:, n:]
        rep = np.repeat(ids, n)
        basis = np.tile(eye, (k, 1))
        zero = np.zeros_like(basis)
        a_cols = stats.gradients(rep, basis, zero)[:, n:].reshape(k, n, n)  # [i, j] = A_i e_j - b_i
        c_cols = stats.gradients(rep, zero, basis)[:, n:].reshape(k, n, n)
        A = np.swapaxes(a_cols + b[:, None, :], 1, 2)
        C = np.swapaxes(c_cols + b[:, None, :], 1, 2)
        yield ids, A, b, C


def statistics_norms(stats: TrajectoryStats) -> np.ndarray:
    """(m,) L2 norm of each trajectory's ``[vec A_i, b_i, vec C_i]`` (private; never release)."""
    out = np.empty(stats.m)
    for ids, A, b, C in statistics_blocks(stats):
        out[ids] = np.linalg.norm(statistics_vectors(A, b, C), axis=1)
    return out


def noisy_statistics(stats: TrajectoryStats, *, clip: float, noise_multiplier: float,
                     rng: np.random.Generator, m: int | None = None) -> NoisyStatistics:
    """The SSP release (one group) of in-memory statistics, ``GaussianDpEvent(noise_multiplier)``,
    divided by ``m``: the run's public count (the released m~ under add/remove-one, ``stats.m``
    under replace-one)."""
    h = check_number("noisy_statistics", "clip", clip, gt=0.0)
    sigma = check_number("noisy_statistics", "noise_multiplier", noise_multiplier, gt=0.0)
    n = stats.n
    total = np.zeros((1, 2 * n * n + n))
    for _, A, b, C in statistics_blocks(stats):
        total[0] += clip_statistics(statistics_vectors(A, b, C), h).sum(axis=0)
    return release_noisy_statistics(total, n=n, m=stats.m if m is None else m, sigma=sigma,
                                    clip=h, rng=rng)


def _means(noisy: NoisyStatistics) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    if not isinstance(noisy, NoisyStatistics):
        raise ConfigError(f"Scoring needs gpope.core.ssp.NoisyStatistics; got "
                          f"{type(noisy).__name__}.")
    A, b, C = noisy.pooled()
    m = float(noisy.m)
    return A / m, b / m, C / m, noisy.pooled_noise_std() / m


def floored_c_inverse(noisy: NoisyStatistics) -> np.ndarray:
    """Inverse of the noisy mean C with eigenvalues floored at the noise's spectral bound
    (:func:`gpope.core.ssp.noise_norm_bound`, the floor of :func:`gpope.core.ssp.private_mspbe`)."""
    _, _, C, s = _means(noisy)
    w, V = np.linalg.eigh(0.5 * (C + C.T))
    floor = max(noise_norm_bound(noisy.n, s), 1e-12 * max(1.0, float(np.abs(w).max())))
    return (V / np.maximum(w, floor)) @ V.T


def selection_mspbe(theta: np.ndarray, noisy: NoisyStatistics, *, z: float = 1.0) -> np.ndarray:
    """(R,) debiased private MSPBE of each theta (R, n) or (n,) plus ``z`` noise standard
    deviations (see the module docstring; ``z = 0``: the debiased estimate). May be negative."""
    zz = check_number("selection_mspbe", "z", z, ge=0.0)
    A, b, _, s = _means(noisy)
    W = floored_c_inverse(noisy)
    th = np.atleast_2d(np.asarray(theta, dtype=np.float64))
    r = th @ A.T - b
    Wr = r @ W
    v = s * s * (np.einsum("ri,ri->r", th, th) + 1.0)
    out = np.einsum("ri,ri->r", r, Wr) - v * float(np.trace(W))
    if zz > 0:
        var = 4.0 * v * np.einsum("ri,ri->r", Wr, Wr) + 2.0 * v * v * float(np.sum(W * W))
        out = out + zz * np.sqrt(var)
    return out


def selection_relative_mspbe(theta: np.ndarray, noisy: NoisyStatistics, *,
                             z: float = 1.0) -> np.ndarray:
    """:func:`selection_mspbe` divided by the debiased private MSPBE of theta = 0 (or, if that is
    not positive, the plain one): about 1 at theta = 0, 0 at the fixed point."""
    zero = np.zeros((1, noisy.n))
    ref = float(selection_mspbe(zero, noisy, z=0.0)[0])
    if not ref > 0:
        _, b, _, _ = _means(noisy)
        ref = float(b @ floored_c_inverse(noisy) @ b)
    return selection_mspbe(theta, noisy, z=z) / ref

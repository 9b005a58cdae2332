"""Evaluation metrics: MSPBE, relative MSPBE, value error (BASELINES.md section 4).

``MSPBE(theta) = ||Phi theta - Pi T^pi (Phi theta)||_D^2 = (A theta - b)^T C^{-1} (A theta - b)``
(Sutton et al. 2009; Liu et al. 2015) under the data (behaviour) distribution. For reporting, use
the true model or a large held-out sample, never the training batch of a private run. Every
function takes one ``theta`` (n,) or a batch (R, n) and returns one value per row.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from gpope.errors import ConfigError, DataError, SchemaError

__all__ = ["mspbe", "relative_mspbe", "value_error", "values"]


def _theta(theta: object, n: int) -> tuple[np.ndarray, bool]:
    arr = np.asarray(theta, dtype=np.float64)
    if arr.ndim not in (1, 2) or arr.shape[-1] != n:
        raise SchemaError(f"'theta' must have shape ({n},) or (R, {n}); got {arr.shape}.")
    if not np.all(np.isfinite(arr)):
        raise DataError("'theta' contains non-finite values (NaN or inf).")
    return np.atleast_2d(arr), arr.ndim == 1


def _system(A: object, b: object, C: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    A_a = np.asarray(A, dtype=np.float64)
    if A_a.ndim != 2 or A_a.shape[0] != A_a.shape[1]:
        raise SchemaError(f"'A' must be a square (n, n) matrix; got {A_a.shape}.")
    n = A_a.shape[0]
    b_a = np.asarray(b, dtype=np.float64)
    C_a = np.asarray(C, dtype=np.float64)
    if b_a.shape != (n,) or C_a.shape != (n, n):
        raise SchemaError(
            f"'b' must have shape ({n},) and 'C' shape ({n}, {n}); got {b_a.shape} and {C_a.shape}."
        )
    for name, arr in (("A", A_a), ("b", b_a), ("C", C_a)):
        if not np.all(np.isfinite(arr)):
            raise DataError(f"'{name}' contains non-finite values (NaN or inf).")
    return A_a, b_a, C_a


def _c_inverse_norm(residual: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Row-wise ``r^T C^{-1} r`` for residuals (R, n): a Cholesky solve when C is positive definite,
    else the pseudo-inverse (the norm restricted to the range of C)."""
    sym = 0.5 * (C + C.T)
    try:
        factor = scipy.linalg.cho_factor(sym, lower=True, check_finite=False)
        solved = scipy.linalg.cho_solve(factor, residual.T, check_finite=False).T
    except np.linalg.LinAlgError:
        solved = (np.linalg.pinv(sym, hermitian=True) @ residual.T).T
    return np.einsum("ri,ri->r", residual, solved)


def mspbe(theta: object, A: object, b: object, C: object) -> float | np.ndarray:
    """Mean squared projected Bellman error ``(A theta - b)^T C^{-1} (A theta - b)``: non-negative,
    the projection form ``||Phi theta - Pi T (Phi theta)||_D^2`` and twice the saddle value
    ``max_y <b - A theta, y> - y^T C y / 2`` (BASELINES.md 4); with a singular C, measured on its
    range. A float for (n,) theta, (R,) for (R, n)."""
    A_a, b_a, C_a = _system(A, b, C)
    th, single = _theta(theta, A_a.shape[0])
    residual = th @ A_a.T - b_a
    out = np.maximum(_c_inverse_norm(residual, C_a), 0.0)
    return float(out[0]) if single else out


def relative_mspbe(
    theta: object, A: object, b: object, C: object, *, normalizer: float | None = None
) -> float | np.ndarray:
    """MSPBE divided by ``normalizer`` (> 0), by default ``MSPBE(0) = b^T C^{-1} b``: scale-free
    and 1 at ``theta = 0`` (with tabular features ``MSPBE(0) = E_{s~d}[r_pi(s)^2]``, the GPOPE
    paper's "normalised by the average reward")."""
    A_a, b_a, C_a = _system(A, b, C)
    if normalizer is None:
        norm = float(_c_inverse_norm(b_a[None, :], C_a)[0])
        if not norm > 0:
            raise DataError("MSPBE(0) = b^T C^-1 b is 0; pass an explicit 'normalizer'.")
    else:
        norm = float(normalizer)
        if not (np.isfinite(norm) and norm > 0):
            raise ConfigError(
                f"The 'normalizer' parameter of relative_mspbe must be > 0. Got {normalizer!r} instead."
            )
    return mspbe(theta, A_a, b_a, C_a) / norm


def values(theta: object, phi_ref: object) -> np.ndarray:
    """Value estimates ``phi_ref @ theta``: (K,) for (n,) theta, (R, K) for (R, n)."""
    phi = np.asarray(phi_ref, dtype=np.float64)
    if phi.ndim != 2:
        raise SchemaError(f"'phi_ref' must have shape (K, n); got {phi.shape}.")
    th, single = _theta(theta, phi.shape[1])
    out = th @ phi.T
    return out[0] if single else out


def value_error(
    theta: object, phi_ref: object, v_true: object, weights: object | None = None
) -> float | np.ndarray:
    """Root (weighted) mean squared value error ``sqrt(sum_k w_k (phi_k^T theta - v_k)^2 /
    sum_k w_k)``: the RMS error over the K reference states, or with a distribution ``weights``
    Balle et al.'s ``||V - Phi theta||_rho`` (BASELINES.md 1.10)."""
    est = np.atleast_2d(values(theta, phi_ref))
    K = est.shape[1]
    v = np.asarray(v_true, dtype=np.float64)
    if v.shape != (K,):
        raise SchemaError(f"'v_true' must have shape ({K},); got {v.shape}.")
    if weights is None:
        w = np.full(K, 1.0 / K)
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (K,):
            raise SchemaError(f"'weights' must have shape ({K},); got {w.shape}.")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ConfigError("'weights' must be finite, >= 0 and not all zero.")
        w = w / w.sum()
    out = np.sqrt(((est - v) ** 2) @ w)
    return float(out[0]) if np.ndim(theta) == 1 else out

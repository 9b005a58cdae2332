"""Estimators and smooth-sensitivity bounds behind DP-LSW / DP-LSL (BASELINES.md 1.3-1.6).

Pure functions of the first-visit statistics ``(m_s, Fbar_s)`` and the public inputs; the
mechanisms in :mod:`gpope.core.baselines.dp_ls` combine them. Formulas and the choices made on
the open points are listed in that module's docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np

from gpope.core.baselines._common import as_matrix, as_vector, solve_system
from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError

__all__ = ["LSLSensitivity", "lsl_estimate", "lsl_regularization", "lsl_smooth_sensitivity",
           "lsw_estimate", "lsw_smooth_sensitivity", "nrs_constants"]

LSLSensitivity = Literal["authors", "derived"]
_CHUNK_ELEMENTS = 1 << 18


def nrs_constants(epsilon: float, delta: float, d: int) -> tuple[float, float]:
    """Gaussian smooth-sensitivity constants ``(a_inv, beta)`` (BASELINES.md 1.5; NRS 2007).

    ``a_inv = 1/alpha = 5 sqrt(2 ln(2/delta)) / epsilon``, ``beta = epsilon / (4 (d + ln(2/delta)))``
    for epsilon in (0, 1] (the admissibility lemma needs epsilon <= 1) and d features.
    """
    eps = check_number("DP-LSW/DP-LSL", "epsilon", epsilon, gt=0.0, le=1.0)
    dlt = check_number("DP-LSW/DP-LSL", "delta", delta, gt=0.0, lt=1.0)
    dim = check_int("DP-LSW/DP-LSL", "d", d, ge=1)
    log_term = math.log(2.0 / dlt)
    return 5.0 * math.sqrt(2.0 * log_term) / eps, eps / (4.0 * (dim + log_term))


def _smooth_max(term: Callable[[np.ndarray], np.ndarray], k_max: int, beta: float, n: int) -> float:
    """``max_{k=0..k_max} e^{-k beta} term(k)`` for a non-decreasing ``term``, chunked over k.

    Stops early once ``e^{-k beta} term(k_max)`` (an upper bound on every later term) falls
    below the running maximum.
    """
    ceiling = float(term(np.array([k_max]))[0])
    chunk = max(1, _CHUNK_ELEMENTS // max(n, 1))
    best = 0.0
    for start in range(0, k_max + 1, chunk):
        if math.exp(-start * beta) * ceiling <= best:
            break
        ks = np.arange(start, min(start + chunk, k_max + 1))
        best = max(best, float(np.max(np.exp(-beta * ks) * term(ks))))
    return best


def lsw_estimate(fbar: object, features: object, weights: object) -> np.ndarray:
    """Non-private LSW ``(Phi^T Gam Phi)^{-1} Phi^T Gam Fbar``, ``Gam = diag(rho)`` (BASELINES 1.3):
    (d,) theta_W of (N,) returns, (N, d) features and (N,) weights (minimum-norm if rank
    deficient)."""
    phi = as_matrix("features", features)
    rho = as_vector("weights", weights, phi.shape[0])
    f = as_vector("fbar", fbar, phi.shape[0])
    weighted = phi * rho[:, None]
    return solve_system(weighted.T @ phi, weighted.T @ f)[0]


def lsl_estimate(counts: object, fbar: object, features: object, weights: object,
                 regularization: float) -> np.ndarray:
    """Non-private LSL (BASELINES 1.4): (d,) ``(Phi^T G Phi + (lambda/2) I)^{-1} Phi^T G Fbar``,
    ``G = diag(rho_s m_s)``, the minimiser of the per-trajectory ridge loss J_L."""
    phi = as_matrix("features", features)
    N, d = phi.shape
    lam = check_number("lsl_estimate", "regularization", regularization, gt=0.0)
    g = as_vector("weights", weights, N) * as_vector("counts", counts, N)
    weighted = phi * g[:, None]
    A = weighted.T @ phi + 0.5 * lam * np.eye(d)
    return solve_system(A, weighted.T @ as_vector("fbar", fbar, N))[0]


def lsl_regularization(n_trajectories: int, features: object, weights: object, *, c: float = 100.0,
                       p: float = 0.4) -> float:
    """Authors' ridge schedule ``lambda = ||rho||_inf ||Phi||_F^2 + c m^p`` (BASELINES 1.4).

    Public: depends only on m (public under replace-one) and public inputs. The offset makes
    ``lambda > ||rho||_inf ||Phi||_F^2`` as the authors' noise formula requires.
    """
    m = check_int("lsl_regularization", "n_trajectories", n_trajectories, ge=1)
    c_f = check_number("lsl_regularization", "c", c, gt=0.0)
    p_f = check_number("lsl_regularization", "p", p, ge=0.0)
    phi = as_matrix("features", features)
    rho = as_vector("weights", weights, phi.shape[0])
    return float(rho.max() * np.sum(phi**2) + c_f * m**p_f)


def lsw_smooth_sensitivity(counts: object, features: object, weights: object, *, f_max: float,
                           beta: float) -> float:
    """Beta-smooth sensitivity bound S_W(X) of LSW (BASELINES 1.6).

    ``S_W = F_max ||(Gam^{1/2} Phi)^+||_2 sqrt(Psi_W)``, ``Psi_W = max_{k=0..K} e^{-k beta}
    sum_s rho_s / max(m_s - k, 1)^2``, ``K = max_s m_s``. Spectral norm of the pseudo-inverse.

    Returns:
        S_W(X) >= the local sensitivity ``max ||theta_W(X) - theta_W(X')||`` over replace-one
        neighbours, with ``S_W(X) <= e^beta S_W(X')``.
    """
    check_number("lsw_smooth_sensitivity", "f_max", f_max, gt=0.0)
    check_number("lsw_smooth_sensitivity", "beta", beta, gt=0.0)
    phi = as_matrix("features", features)
    rho = as_vector("weights", weights, phi.shape[0])
    m_s = as_vector("counts", counts, phi.shape[0])
    support = rho > 0
    rho_s, m_sup = rho[support], m_s[support]
    singular = np.linalg.svd(np.sqrt(rho)[:, None] * phi, compute_uv=False)
    positive = singular[singular > singular.max() * max(phi.shape) * np.finfo(float).eps]
    if positive.size == 0:
        raise ConfigError("LSW needs features that are not all zero on the support of 'weights'.")
    pinv_norm = 1.0 / positive.min()

    def term(ks: np.ndarray) -> np.ndarray:
        floors = np.maximum(m_sup[None, :] - ks[:, None], 1.0)
        return (rho_s[None, :] / floors**2).sum(axis=1)

    psi = _smooth_max(term, int(m_sup.max()), beta, m_sup.size)
    return float(f_max * pinv_norm * math.sqrt(psi))


def lsl_smooth_sensitivity(counts: object, features: object, weights: object, *,
                           n_trajectories: int, regularization: float, f_max: float, beta: float,
                           sensitivity: LSLSensitivity = "authors") -> float:
    """Beta-smooth sensitivity bound S_L(X) of LSL (BASELINES 1.6).

    ``"authors"``: ``S = 2 F_max ||Phi||_F / (lambda - ||rho||_inf ||Phi||_F^2) sqrt(Psi_L)``,
    ``Psi_L = max_k e^{-k beta} (c_lam sqrt(sum_s rho_s min(m_s + k, m)) + ||rho||_2)^2``,
    ``c_lam = ||Phi||_F ||rho||_inf / sqrt(2 lambda)``; needs ``lambda > ||rho||_inf ||Phi||_F^2``.
    ``"derived"``: ``S = max_k e^{-k beta} (2 F_max / lambda)(1 + sqrt(2 sum_s rho_s
    min(m_s + k, m) / lambda))``; needs ``||phi(s)||_2 <= 1`` and ``sum_s rho_s <= 1``.
    """
    phi = as_matrix("features", features)
    rho = as_vector("weights", weights, phi.shape[0])
    m_s = as_vector("counts", counts, phi.shape[0])
    m = check_int("lsl_smooth_sensitivity", "n_trajectories", n_trajectories, ge=1)
    lam = check_number("lsl_smooth_sensitivity", "regularization", regularization, gt=0.0)
    check_number("lsl_smooth_sensitivity", "f_max", f_max, gt=0.0)
    check_number("lsl_smooth_sensitivity", "beta", beta, gt=0.0)
    check_choice("lsl_smooth_sensitivity", "sensitivity", sensitivity, ("authors", "derived"))
    k_max = int(m - m_s[rho > 0].min()) if np.any(rho > 0) else 0
    k_max = max(k_max, 0)

    def mass(ks: np.ndarray) -> np.ndarray:
        return (rho[None, :] * np.minimum(m_s[None, :] + ks[:, None], m)).sum(axis=1)

    if sensitivity == "authors":
        norm_phi = float(np.linalg.norm(phi))  # Frobenius, as in the authors' code
        gap = lam - rho.max() * norm_phi**2
        if gap <= 0:
            raise ConfigError("The 'regularization' parameter of DP-LSL must be > ||rho||_inf "
                              f"||Phi||_F^2 = {rho.max() * norm_phi**2!r} for the authors' bound. "
                              f"Got {lam!r} instead.")
        c_lam = norm_phi * rho.max() / math.sqrt(2.0 * lam)
        rho_norm = float(np.linalg.norm(rho))
        psi = _smooth_max(lambda ks: (c_lam * np.sqrt(mass(ks)) + rho_norm) ** 2, k_max, beta,
                          rho.size)
        return float(2.0 * f_max * norm_phi / gap * math.sqrt(psi))
    if np.any(np.sum(phi**2, axis=1) > 1.0 + 1e-9) or rho.sum() > 1.0 + 1e-9:
        raise ConfigError(
            "The derived DP-LSL bound needs ||phi(s)||_2 <= 1 for every state and sum(rho) <= 1."
        )
    return _smooth_max(lambda ks: (2.0 * f_max / lam) * (1.0 + np.sqrt(2.0 * mass(ks) / lam)),
                       k_max, beta, rho.size)

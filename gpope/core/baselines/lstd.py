"""Least-squares temporal difference learning: LSTD(0), LSTD(lambda), off-policy LSTD.

Formulas (BASELINES.md section 2; Bradtke & Barto 1996, Boyan 2002, off-policy traces of
Bertsekas & Yu 2009), over ``T`` transitions ``(phi_t, R_t, phi'_t)``:

    z_t   = rho_t (gamma lambda z_{t-1} + phi_t)          (z reset at each episode start)
    A_hat = (1/T) sum_t z_t (phi_t - gamma phi'_t)^T
    b_hat = (1/T) sum_t z_t R_t
    theta = (A_hat + eta I)^{-1} b_hat                    (ridge convention (i))

With ``lambda = 0`` the trace is ``rho_t phi_t`` (plain off-policy LSTD(0)); on-policy
``rho_t = 1``. ``phi'_t`` is zero when ``S_{t+1}`` is terminal; a truncated episode keeps it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Required, TypedDict, Unpack

import numpy as np

from gpope.core.baselines._common import (
    as_mask,
    as_matrix,
    as_vector,
    episode_layout,
    forward_trace,
    solve_system,
)
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_number
from gpope.errors import ConfigError, DataError, SchemaError

__all__ = ["LSTDOptions", "LSTDResult", "lstd", "lstd_from_transitions"]

FeatureFn = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, eq=False)
class LSTDResult:
    """Solution of a least-squares TD system ``A theta = b``.

    Not private: computed from the data without noise; never release it under a DP claim.

    Attributes:
        theta: (n,) weight vector solving ``A theta = b`` (least squares if A is singular).
        A: (n, n) the system matrix that was solved (including any ridge / initial term).
        b: (n,) right-hand side.
        n_samples: T, the number of transitions used.
        solver: ``"solve"`` (A invertible) or ``"lstsq"`` (minimum-norm least-squares fallback).
    """

    theta: np.ndarray
    A: np.ndarray
    b: np.ndarray
    n_samples: int
    solver: str


def _prepare(owner: str, phi: object, next_phi: object, reward: object, rho: object | None,
             terminal: object | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    phi_a = as_matrix("phi", phi)
    T, _ = phi_a.shape
    next_a = as_matrix("next_phi", next_phi, rows=T)
    if next_a.shape != phi_a.shape:
        raise SchemaError(
            f"{owner}: 'next_phi' must have the shape of 'phi' {phi_a.shape}; got {next_a.shape}."
        )
    reward_a = as_vector("reward", reward, T)
    rho_a = np.ones(T) if rho is None else as_vector("rho", rho, T)
    if np.any(rho_a < 0):
        raise DataError(f"{owner}: importance ratios 'rho' must be >= 0.")
    term = as_mask("terminal", terminal, T)
    if term.any():
        next_a = np.where(term[:, None], 0.0, next_a)
    return phi_a, next_a, reward_a, rho_a


def lstd(phi: object, next_phi: object, reward: object, rho: object | None = None, *, gamma: float,
         ridge: float = 0.0, lam: float = 0.0, traj_index: object | None = None,
         terminal: object | None = None) -> LSTDResult:
    """LSTD(lambda), on- or off-policy, with ridge convention (i) ``A_hat + eta I``.

    Args:
        phi: (T, n) features ``phi(S_t)``.
        next_phi: (T, n) features ``phi(S_{t+1})``; zero (or flagged in ``terminal``) where
            ``S_{t+1}`` is terminal; kept as is for truncated episodes.
        reward: (T,) rewards ``R_t`` of the transitions.
        rho: (T,) per-decision importance ratios ``pi/mu``; None means on-policy (all ones).
        gamma: discount in [0, 1].
        ridge: eta >= 0 added to the normalised ``A_hat`` (BASELINES.md 2, convention (i));
            equivalent to recursive LSTD started at ``A_0 = T * eta * I``.
        lam: trace parameter lambda in [0, 1]; ``lam > 0`` needs ``traj_index``.
        traj_index: (T,) trajectory ids, rows grouped by trajectory in time order (traces are
            reset at each new trajectory). Not needed when ``lam == 0``.
        terminal: optional (T,) bool; rows flagged True get ``next_phi = 0``.

    Returns:
        LSTDResult with ``A = A_hat + eta I``, ``b = b_hat`` (both divided by T) and ``theta``.
        ``np.linalg.solve`` is used, with a ``lstsq`` fallback when A is singular.
    """
    gamma_f = check_number("lstd", "gamma", gamma, ge=0.0, le=1.0)
    ridge_f = check_number("lstd", "ridge", ridge, ge=0.0)
    lam_f = check_number("lstd", "lam", lam, ge=0.0, le=1.0)
    phi_a, next_a, reward_a, rho_a = _prepare("lstd", phi, next_phi, reward, rho, terminal)
    T, n = phi_a.shape
    if T == 0:
        raise ConfigError("lstd needs at least one transition; got T = 0.")
    if lam_f > 0.0:
        if traj_index is None:
            raise ConfigError("lstd with lam > 0 needs 'traj_index' to reset traces per episode.")
        z = forward_trace(phi_a, rho_a, gamma_f * lam_f, episode_layout(traj_index, T))
    else:
        z = rho_a[:, None] * phi_a
    A = z.T @ (phi_a - gamma_f * next_a) / T
    b = z.T @ reward_a / T
    A_solved = A + ridge_f * np.eye(n)
    theta, solver = solve_system(A_solved, b)
    return LSTDResult(theta=theta, A=A_solved, b=b, n_samples=T, solver=solver)


class LSTDOptions(TypedDict, total=False):
    """The keywords :func:`lstd_from_transitions` passes on to :func:`lstd` (documented there):
    ``gamma`` (required), ``ridge`` and ``lam``."""

    gamma: Required[float]
    ridge: float
    lam: float


def lstd_from_transitions(transitions: Transitions, feature_map: FeatureFn,
                          rho: object | None = None, **options: Unpack[LSTDOptions]) -> LSTDResult:
    """:func:`lstd` on a :class:`Transitions` batch sorted by (traj_index, t) and a feature map
    ``(T, d) states -> (T, n)``; terminal rows have zero next features, truncated rows keep them."""
    return lstd(feature_map(transitions.state), feature_map(transitions.next_state),
                transitions.reward, rho, traj_index=transitions.traj_index,
                terminal=transitions.terminal, **options)

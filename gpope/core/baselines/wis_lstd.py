"""WIS-LSTD(lambda): weighted-importance-sampling LSTD (Mahmood, van Hasselt & Sutton, NeurIPS 2014).

The recursive algorithm of BASELINES.md section 3 (author code ``wislstd.py``), per episode with
``z = u = 0, V = 0`` reset at its start and ``A = a0 I, b = 0`` kept across episodes::

    z <- rho_t (gamma lambda z + phi)
    b <- b + R_t z + (rho_t - 1) u
    A <- A + z (phi - g' phi')^T + (rho_t - 1) V
    u <- g' lambda (rho_t u + R_t z)
    V <- g' lambda (rho_t V + z (phi - phi')^T)          # phi', not g' phi' (author code)
    theta = solve(A, b)

with ``g' = gamma`` (0 if ``S_{t+1}`` is terminal).

Batch evaluation [DERIVED here, equal to the recursion up to rounding, checked against a literal
transcription in the tests]: unrolling ``u`` and ``V`` gives, with ``c_t = g'_t lambda``,
``e_t = phi_t - g'_t phi'_t``, ``d_t = phi_t - phi'_t``,

    Q_t = (rho_{t+1} - 1) + c_{t+1} rho_{t+1} Q_{t+1}   (Q = 0 at the last step of an episode)
    W_t = c_t Q_t
    A   = a0 I + sum_t z_t (e_t + W_t d_t)^T,   b = sum_t z_t R_t (1 + W_t)

so the (n x n) matrices ``V`` are never stored: one forward pass for ``z``, one backward pass
for the scalars ``Q`` (both vectorised across trajectories), and two matrix products.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpope.core.baselines._common import (
    backward_accumulate,
    episode_layout,
    forward_trace,
    solve_system,
)
from gpope.core.baselines.lstd import LSTDResult, _prepare
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_number
from gpope.errors import ConfigError

__all__ = ["wis_lstd", "wis_lstd_from_transitions"]


def wis_lstd(phi: object, next_phi: object, reward: object, rho: object | None, traj_index: object,
             *, gamma: float, lam: float = 0.0, a0: float = 1e-6,
             terminal: object | None = None) -> LSTDResult:
    """WIS-LSTD(lambda) with constant gamma and lambda (BASELINES.md section 3).

    Args:
        phi: (T, n) features ``phi(S_t)``.
        next_phi: (T, n) features ``phi(S_{t+1})``; zero (or flagged in ``terminal``) where
            ``S_{t+1}`` is terminal (then ``g' = 0``); kept for truncated episodes.
        reward: (T,) rewards ``R_t``.
        rho: (T,) per-decision importance ratios ``pi(A_t|S_t)/mu(A_t|S_t)``; None = all ones.
        traj_index: (T,) trajectory ids; rows grouped by trajectory, in time order. Each
            trajectory is one episode (z, u, V reset at its start).
        gamma: discount in [0, 1].
        lam: lambda in [0, 1].
        a0: initial ``A = a0 I`` (author code ``inita``), >= 0.
        terminal: optional (T,) bool; True rows get ``next_phi = 0`` and ``g' = 0``.

    Returns:
        LSTDResult with the accumulated (unnormalised) ``A`` (including ``a0 I``), ``b`` and
        ``theta = solve(A, b)`` (``lstsq`` fallback when singular). Guarantees: at ``lam = 0``
        equals off-policy LSTD(0) with ridge ``a0 / T``; with ``rho = 1`` equals LSTD(lambda).
    """
    gamma_f = check_number("wis_lstd", "gamma", gamma, ge=0.0, le=1.0)
    lam_f = check_number("wis_lstd", "lam", lam, ge=0.0, le=1.0)
    a0_f = check_number("wis_lstd", "a0", a0, ge=0.0)
    phi_a, next_a, reward_a, rho_a = _prepare("wis_lstd", phi, next_phi, reward, rho, terminal)
    T, n = phi_a.shape
    if T == 0:
        raise ConfigError("wis_lstd needs at least one transition; got T = 0.")
    layout = episode_layout(traj_index, T)
    g_next = np.full(T, gamma_f)
    if terminal is not None:
        g_next[np.asarray(terminal, dtype=bool)] = 0.0
    z = forward_trace(phi_a, rho_a, gamma_f * lam_f, layout)
    c = g_next * lam_f
    # P_t = (rho_t - 1) + c_t rho_t P_{t+1}; Q_t = P_{t+1} inside the episode, 0 at its end.
    p = backward_accumulate(rho_a - 1.0, c * rho_a, layout)
    q = np.zeros(T)
    for k in range(layout.max_len - 1):
        rows = layout.rows(k)[: layout.active[k + 1]]
        q[rows] = p[rows + 1]
    w = c * q
    A = a0_f * np.eye(n) + z.T @ (phi_a - g_next[:, None] * next_a + w[:, None] * (phi_a - next_a))
    b = z.T @ (reward_a * (1.0 + w))
    theta, solver = solve_system(A, b)
    return LSTDResult(theta=theta, A=A, b=b, n_samples=T, solver=solver)


def wis_lstd_from_transitions(transitions: Transitions,
                              feature_map: Callable[[np.ndarray], np.ndarray], rho: object | None,
                              *, gamma: float, lam: float = 0.0, a0: float = 1e-6) -> LSTDResult:
    """:func:`wis_lstd` on a :class:`Transitions` batch sorted by (traj_index, t), a feature map
    ``(T, d) states -> (T, n)`` and (T,) importance ratios."""
    return wis_lstd(feature_map(transitions.state), feature_map(transitions.next_state),
                    transitions.reward, rho, transitions.traj_index, gamma=gamma, lam=lam, a0=a0,
                    terminal=transitions.terminal)

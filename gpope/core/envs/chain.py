"""Chain: the on-policy tabular domain of the GPOPE paper (after Balle et al. 2016).

Specification (``chain-v1``; defaults are the paper's settings):

| quantity | value |
|---|---|
| states | ``s = 0 .. n_states - 1`` on a line (default 40); ``n_states - 1`` is absorbing (terminal) |
| observation | ``(1,)`` float64 holding the integer state |
| actions | one action, ``0``; the behaviour probability of every step is 1 |
| start | uniform over the non-absorbing states ``0 .. n_states - 2`` |
| dynamics | from ``s < n_states - 1``: stay with probability ``p_stay`` (0.5), else move to ``s + 1`` |
| reward | 1 on the transition into the absorbing state, else 0 |
| discount | ``gamma`` (0.99) |
| episode end | terminal on entering the absorbing state; truncated after ``max_steps`` (1000) steps |
| features | one-hot over all ``n_states`` states (:func:`feature_map`); the absorbing state's next |
| | features are zero by the terminal convention, so that coordinate is never visited |

Exact values: with ``k = n_states - 1 - s`` moves still needed,
``V(s) = gamma^(k-1) ((1 - p) / (1 - p gamma))^k`` for ``s < n_states - 1`` and ``V = 0`` at the
absorbing state (:func:`exact_values`); the same numbers solve ``(I - gamma P) V = r``
(:func:`exact_model`).

Truncation: an episode from start ``s`` needs a negative-binomial number of steps (``k`` successes
of probability ``1 - p``); it is truncated iff fewer than ``k`` moves happen in ``max_steps`` steps.
At the defaults this probability is about 2e-234 (about 3e-21 with Balle et al.'s cap of 200); a
truncated last transition keeps its next state.

Ground truth for MSPBE: :func:`population_statistics` gives the exact expected per-trajectory
``A, b, C`` under this episode sampling for both normalisations, the cap included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpope.core.envs.episodes import StepLog
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.core.features import FeatureMap

__all__ = ["ChainConfig", "exact_model", "exact_values", "feature_map", "generate", "initial",
           "population_statistics", "step"]

VERSION = "chain-v1"


@dataclass(frozen=True)
class ChainConfig:
    """Parameters of the chain.

    Attributes:
        n_states: number of states including the absorbing one (>= 2).
        p_stay: probability of staying in place, in [0, 1).
        gamma: discount factor in [0, 1].
        max_steps: trajectory cap (truncation, not termination), >= 1.
    """

    n_states: int = 40
    p_stay: float = 0.5
    gamma: float = 0.99
    max_steps: int = 1000

    def __post_init__(self) -> None:
        owner = "ChainConfig"
        object.__setattr__(self, "n_states", check_int(owner, "n_states", self.n_states, ge=2))
        object.__setattr__(self, "p_stay", check_number(owner, "p_stay", self.p_stay, ge=0.0, lt=1.0))
        object.__setattr__(self, "gamma", check_number(owner, "gamma", self.gamma, ge=0.0, le=1.0))
        object.__setattr__(self, "max_steps", check_int(owner, "max_steps", self.max_steps, ge=1))

    @property
    def terminal_state(self) -> int:
        """The absorbing state ``n_states - 1``."""
        return self.n_states - 1


def _config(config: ChainConfig | None) -> ChainConfig:
    if config is None:
        return ChainConfig()
    if not isinstance(config, ChainConfig):
        raise ConfigError(f"The 'config' parameter must be a ChainConfig. Got {type(config).__name__} instead.")
    return config


def feature_map(config: ChainConfig | None = None) -> FeatureMap:
    """One-hot features over all ``n_states`` states (``TabularFeatures(n_states)``)."""
    from gpope.core.features import TabularFeatures

    return TabularFeatures(_config(config).n_states)


def exact_values(config: ChainConfig | None = None) -> np.ndarray:
    """(n_states,) exact values from the closed form; 0 at the absorbing state."""
    cfg = _config(config)
    k = cfg.n_states - 1 - np.arange(cfg.n_states, dtype=np.float64)
    p, g = cfg.p_stay, cfg.gamma
    values = np.zeros(cfg.n_states)
    live = k > 0
    values[live] = g ** (k[live] - 1) * ((1.0 - p) / (1.0 - p * g)) ** k[live]
    return values


def exact_model(config: ChainConfig | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chain as a Markov reward process over all ``n_states`` states.

    Returns:
        ``(P, r, mu)``: ``P`` (n, n) transition matrix whose absorbing row is zero (episodes end
        there, so ``V = 0``); ``r`` (n,) expected one-step reward (``1 - p_stay`` at ``n - 2``);
        ``mu`` (n,) start distribution (uniform over ``0 .. n - 2``). ``solve(I - gamma P, r)`` is
        the value function.
    """
    cfg = _config(config)
    n, p = cfg.n_states, cfg.p_stay
    live = np.arange(n - 1)
    P = np.zeros((n, n))
    P[live, live] = p
    P[live, live + 1] = 1.0 - p
    r = np.zeros(n)
    r[n - 2] = 1.0 - p
    mu = np.zeros(n)
    mu[: n - 1] = 1.0 / (n - 1)
    return P, r, mu


def initial(rng: np.random.Generator, config: ChainConfig | None = None, size: int = 1) -> np.ndarray:
    """(size,) int64 start states, uniform over ``0 .. n_states - 2``."""
    cfg = _config(config)
    return rng.integers(0, cfg.n_states - 1, size=size, dtype=np.int64)


def step(states: np.ndarray, rng: np.random.Generator,
         config: ChainConfig | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step from non-absorbing ``states`` (k,) int64: one uniform per state.

    Returns:
        ``(next_states (k,) int64, rewards (k,) float64, terminal (k,) bool)``.
    """
    cfg = _config(config)
    states = np.asarray(states, dtype=np.int64)
    moved = rng.random(states.shape) >= cfg.p_stay
    nxt = states + moved
    terminal = nxt == cfg.terminal_state
    return nxt, terminal.astype(np.float64), terminal


def generate(n_trajectories: int, rng: np.random.Generator,
             config: ChainConfig | None = None) -> Transitions:
    """Simulate ``n_trajectories`` independent episodes, all at once (a loop over time only; one
    uniform per start and per step): :class:`Transitions` with ``state``/``next_state`` (T, 1)
    float64 integer states, action 0, ``behavior_prob`` 1, ``terminal`` on entering the absorbing
    state, ``truncated`` on the ``max_steps``-th step of an unfinished episode.
    """
    cfg = _config(config)
    m = check_int("chain.generate", "n_trajectories", n_trajectories, ge=1)
    state = initial(rng, cfg, m)
    alive = np.arange(m, dtype=np.int64)
    log = StepLog(m)
    for t in range(cfg.max_steps):
        nxt, reward, term = step(state, rng, cfg)
        k = len(alive)
        log.add(t, alive, state=state.astype(np.float64)[:, None], action=np.zeros(k, np.int64),
                reward=reward, next_state=nxt.astype(np.float64)[:, None], terminal=term,
                behavior_prob=np.ones(k))
        keep = ~term
        alive, state = alive[keep], nxt[keep]
        if len(alive) == 0:
            break
    return log.transitions(cfg.max_steps)


def _alive_distributions(P: np.ndarray, mu: np.ndarray, terminal: int, horizon: int) -> np.ndarray:
    """(horizon, n) probability of being in each non-absorbing state at step t, still running."""
    alpha = np.empty((horizon, len(mu)))
    a = mu.copy()
    for t in range(horizon):
        alpha[t] = a
        a = a @ P
        a[terminal] = 0.0
    return alpha


def population_statistics(config: ChainConfig | None = None,
                          normalization: Literal["transition", "trajectory_mean"] = "transition",
                          length_scale: float | None = None, *,
                          drop_terminal: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact expected per-trajectory statistics for the one-hot features of :func:`feature_map`.

    With per-transition terms ``phi_t (phi_t - gamma phi_{t+1})^T``, ``R_t phi_t`` and
    ``phi_t phi_t^T`` (``phi_{t+1} = 0`` when terminal, kept when truncated), ``A, b, C`` are the
    expectations over episodes of their trajectory sums divided by the public ``length_scale`` L
    (``"transition"``) or by the trajectory length tau (``"trajectory_mean"``, the paper). Both
    are exact, including the ``max_steps`` cap: with ``alpha_t(s)`` the probability of being in
    ``s`` at step t and ``W_t(s')`` the expected weight (1/L, or ``E[1/tau]`` given the state after
    step t), the expected weight of each transition ``s -> s'`` is ``sum_t alpha_t(s) P(s,s') W_t(s')``.

    For ``"transition"``, ``A = D (I - gamma P)``, ``b = D r``, ``C = D`` with ``D = diag(expected
    visits) / L``, so the fixed point ``A^{-1} b`` is exactly :func:`exact_values`.

    Returns ``(A (n, n), b (n,), C (n, n))``, n = n_states; ``drop_terminal`` drops the absorbing
    state's coordinate (an identically zero row and column), giving invertible n - 1 dimensions.
    """
    cfg = _config(config)
    check_choice("population_statistics", "normalization", normalization, ("transition", "trajectory_mean"))
    if normalization == "transition":
        scale = check_number("population_statistics", "length_scale", length_scale, gt=0.0)
    P, _, mu = exact_model(cfg)
    n, H, term = cfg.n_states, cfg.max_steps, cfg.terminal_state
    alpha = _alive_distributions(P, mu, term, H)
    if normalization == "transition":
        sigma = alpha.sum(axis=0)[:, None] * P / scale
    else:
        sigma = np.zeros((n, n))
        w_next = np.zeros(n)  # W_{t+1}; unused at t = H - 1
        for t in range(H - 1, -1, -1):
            # W_t(s'): expected 1/tau given the state after step t is s'.
            w = np.full(n, 1.0 / H) if t == H - 1 else P @ w_next
            w[term] = 1.0 / (t + 1)
            sigma += alpha[t][:, None] * P * w[None, :]
            w_next = w
    reward = np.zeros((n, n))
    reward[n - 2, term] = 1.0
    visits = sigma.sum(axis=1)
    next_part = sigma.copy()
    next_part[:, term] = 0.0  # terminal convention: next features are zero
    A = np.diag(visits) - cfg.gamma * next_part
    b = (sigma * reward).sum(axis=1)
    C = np.diag(visits)
    if drop_terminal:
        keep = np.arange(n) != term
        return A[np.ix_(keep, keep)], b[keep], C[np.ix_(keep, keep)]
    return A, b, C

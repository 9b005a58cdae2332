"""Mountain car: gymnasium's ``MountainCar-v0``, vectorised over many episodes.

Specification (identical to gymnasium 1.4 ``MountainCar-v0``, which stays the reference; a test
checks :func:`step` and :func:`generate` against ``gymnasium.envs.classic_control.MountainCarEnv``
bit for bit on the float64 internal state):

| index | observation | min | max |
|---|---|---|---|
| 0 | position x | -1.2 | 0.6 |
| 1 | velocity v | -0.07 | 0.07 |

- Actions: 0 push left, 1 no push, 2 push right.
- Dynamics (deterministic), with force 0.001 and gravity 0.0025, in this order of operations::

      v <- clip(v + ((a - 1) * 0.001 + cos(3 x) * (-0.0025)), -0.07, 0.07)
      x <- clip(x + v, -1.2, 0.6)
      v <- 0 if x == -1.2 and v < 0

- Reward: -1 on every step.
- Start: x ~ U[-0.6, -0.4], v = 0.
- Episode end: terminal when x >= 0.5 and v >= 0 (next features zero); after ``max_steps`` (200,
  gymnasium's time limit) an unfinished episode is truncated: its last transition keeps its next
  state. A step that both reaches the goal and hits the limit is terminal.
- States are kept in float64 (gymnasium's internal state); gymnasium's observations are the same
  values rounded to float32.
- Features: the order-5 Fourier basis over the public bounds ``LOW``/``HIGH``, 36 features
  (:func:`feature_map`).
- Policies: the stored Q-learned artifact ``mountaincar_q_v1`` (see ``train_mountaincar.py``),
  used greedy, epsilon-greedy or softmax (:func:`learned_policy`); the paper's off-policy target is
  the uniform random policy.
- Ground truth: :func:`monte_carlo_values` at the public :data:`REFERENCE_STATES` and
  :func:`large_sample_statistics` (A, b, C from a large independent sample).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

import numpy as np

from gpope.core.envs.episodes import StepLog
from gpope.core.policies import (
    EpsilonGreedyPolicy,
    Policy,
    SoftmaxPolicy,
    UniformPolicy,
    load_policy,
    sample_actions,
)
from gpope.core.statistics import population_statistics
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import DataError, SchemaError

if TYPE_CHECKING:
    from gpope.core.features import FeatureMap

__all__ = ["DEFAULT_ARTIFACT", "HIGH", "LOW", "MAX_STEPS", "N_ACTIONS", "REFERENCE_STATES",
           "VERSION", "feature_map", "generate", "initial", "large_sample_statistics",
           "learned_policy", "monte_carlo_values", "step", "uniform_policy"]

VERSION = "mountaincar-v1"
#: Public state bounds (position, velocity).
LOW: tuple[float, float] = (-1.2, -0.07)
HIGH: tuple[float, float] = (0.6, 0.07)
N_ACTIONS = 3
MAX_STEPS = 200
FORCE = 0.001
GRAVITY = 0.0025
GOAL_POSITION = 0.5
GOAL_VELOCITY = 0.0
START_LOW, START_HIGH = -0.6, -0.4
DEFAULT_ARTIFACT = "mountaincar_q_v1"

#: Public reference states (position, velocity) at which value estimates are reported.
REFERENCE_STATES = np.array([[-0.5, 0.0], [-0.6, 0.0], [-0.4, 0.0], [-1.0, 0.0], [-0.5, -0.04],
                             [-0.5, 0.04], [0.0, 0.0], [0.3, 0.03]])
REFERENCE_STATES.setflags(write=False)


def feature_map(order: int = 5) -> FeatureMap:
    """The full Fourier basis of ``order`` over ``LOW``/``HIGH``: ``(order + 1)^2`` features."""
    from gpope.core.features import FourierFeatures

    return FourierFeatures(order, LOW, HIGH)


def initial(rng: np.random.Generator, size: int = 1) -> np.ndarray:
    """(size, 2) start states: x ~ U[-0.6, -0.4], v = 0."""
    out = np.zeros((size, 2))
    out[:, 0] = rng.uniform(START_LOW, START_HIGH, size=size)
    return out


def step(states: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One deterministic step of (k, 2) states (x, v) under (k,) actions in {0, 1, 2}, in
    gymnasium's float64 arithmetic: ``(next_states (k, 2), rewards (k,) all -1, terminated (k,))``."""
    states = np.asarray(states, dtype=np.float64)
    actions = np.asarray(actions)
    if states.ndim != 2 or states.shape[1] != 2 or actions.shape != (states.shape[0],):
        raise SchemaError(f"mountaincar.step needs states (k, 2) and actions (k,); got "
                          f"{states.shape} and {actions.shape}.")
    if actions.size and (actions.min() < 0 or actions.max() > 2):
        raise DataError("Mountain car actions must be 0, 1 or 2.")
    x, v = states[:, 0], states[:, 1]
    v = v + ((actions.astype(np.float64) - 1.0) * FORCE + np.cos(3.0 * x) * (-GRAVITY))
    v = np.clip(v, -HIGH[1], HIGH[1])
    x = np.clip(x + v, LOW[0], HIGH[0])
    v = np.where((x == LOW[0]) & (v < 0), 0.0, v)
    terminated = (x >= GOAL_POSITION) & (v >= GOAL_VELOCITY)
    return np.stack([x, v], axis=1), np.full(len(x), -1.0), terminated


def generate(n_trajectories: int, rng: np.random.Generator, policy: Policy,
             max_steps: int = MAX_STEPS) -> Transitions:
    """Simulate ``n_trajectories`` episodes under the behaviour ``policy`` (its probability of
    each taken action logged), all at once: :class:`Transitions` with (T, 2) float64 states, sorted
    by (traj_index, t). ``rng`` draws the start states and one uniform per decision."""
    m = check_int("mountaincar.generate", "n_trajectories", n_trajectories, ge=1)
    max_steps = check_int("mountaincar.generate", "max_steps", max_steps, ge=1)
    if policy.n_actions != N_ACTIONS:
        raise SchemaError(f"A mountain car policy needs 3 actions; got {policy.n_actions}.")
    state = initial(rng, m)
    alive = np.arange(m, dtype=np.int64)
    log = StepLog(m)
    for t in range(max_steps):
        actions, probs = sample_actions(policy, state, rng)
        nxt, reward, term = step(state, actions)
        log.add(t, alive, state=state, action=actions, reward=reward, next_state=nxt,
                terminal=term, behavior_prob=probs)
        keep = ~term
        alive, state = alive[keep], nxt[keep]
        if len(alive) == 0:
            break
    return log.transitions(max_steps)


def learned_policy(kind: Literal["greedy", "epsilon_greedy", "softmax"] = "greedy", *,
                   epsilon: float = 0.1, temperature: float = 1.0,
                   name: str = DEFAULT_ARTIFACT) -> Policy:
    """The Q-learned policy of artifact ``name``: greedy, epsilon-greedy (``epsilon``) or softmax
    (``temperature``, in units of the Q values: about minus steps-to-go) over its Q. Against the
    uniform target, epsilon-greedy bounds the ratio by ``1 / epsilon``; softmax ratios are
    heavy-tailed."""
    check_choice("learned_policy", "kind", kind, ("greedy", "epsilon_greedy", "softmax"))
    stored = load_policy(name)
    q = stored.q  # type: ignore[attr-defined]
    if kind == "greedy":
        return EpsilonGreedyPolicy(q, 0.0)
    if kind == "epsilon_greedy":
        return EpsilonGreedyPolicy(q, epsilon)
    return SoftmaxPolicy(q, temperature)


def uniform_policy() -> Policy:
    """The paper's off-policy target: each action with probability 1/3."""
    return UniformPolicy(N_ACTIONS)


def monte_carlo_values(policy: Policy, states: np.ndarray, rng: np.random.Generator,
                       n_rollouts: int = 1000, gamma: float = 1.0, *, tolerance: float = 1e-4,
                       max_horizon: int = 100_000) -> tuple[np.ndarray, np.ndarray]:
    """Monte Carlo values ``V(s) = E[sum_t gamma^t R_t | S_0 = s]`` with no time limit.

    This is the value that TD-style estimates from time-limited data target (truncated
    transitions bootstrap). All ``k * n_rollouts`` rollouts run as one vector. For ``gamma < 1``
    rollouts stop after ``H`` steps with ``gamma^H / (1 - gamma) <= tolerance``, which bounds the
    bias by ``tolerance`` (rewards are -1); for ``gamma = 1`` they run to the goal and a
    :class:`DataError` is raised if any is still running after ``max_horizon`` steps. Returns
    ``(values (k,), standard_errors (k,))`` of (k, 2) start states.
    """
    states = np.asarray(states, dtype=np.float64)
    if states.ndim != 2 or states.shape[1] != 2:
        raise SchemaError(f"states must have shape (k, 2); got {states.shape}.")
    n_rollouts = check_int("monte_carlo_values", "n_rollouts", n_rollouts, ge=2)
    gamma = check_number("monte_carlo_values", "gamma", gamma, ge=0.0, le=1.0)
    tolerance = check_number("monte_carlo_values", "tolerance", tolerance, gt=0.0)
    max_horizon = check_int("monte_carlo_values", "max_horizon", max_horizon, ge=1)
    if gamma < 1.0:
        horizon = 1 if gamma == 0.0 else math.ceil(math.log(tolerance * (1.0 - gamma)) / math.log(gamma))
        horizon = min(max(horizon, 1), max_horizon)
    else:
        horizon = max_horizon
    k = states.shape[0]
    state = np.repeat(states, n_rollouts, axis=0)
    returns = np.zeros(len(state))
    alive = np.arange(len(state))
    discount = 1.0
    for _ in range(horizon):
        actions, _ = sample_actions(policy, state, rng)
        nxt, reward, term = step(state, actions)
        returns[alive] += discount * reward
        discount *= gamma
        keep = ~term
        alive, state = alive[keep], nxt[keep]
        if len(alive) == 0:
            break
    if gamma == 1.0 and len(alive):
        raise DataError(f"{len(alive)} Monte Carlo rollouts did not reach the goal within "
                        f"{max_horizon} steps; use gamma < 1 or raise max_horizon.")
    per_state = returns.reshape(k, n_rollouts)
    return per_state.mean(axis=1), per_state.std(axis=1, ddof=1) / math.sqrt(n_rollouts)


def large_sample_statistics(behavior: Policy, target: Policy, rng: np.random.Generator, *,
                            gamma: float,
                            normalization: Literal["transition", "trajectory_mean"] = "transition",
                            length_scale: float | None = None, n_trajectories: int = 10_000,
                            features: FeatureMap | None = None, max_steps: int = MAX_STEPS,
                            chunk: int = 2_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Population ``A, b, C`` (mean over trajectories) estimated from a large independent sample.

    Per trajectory ``i`` with weight ``w_i = 1/L`` (``"transition"``) or ``1/tau_i``
    (``"trajectory_mean"``): ``A_i = w_i sum_t rho_t phi_t (phi_t - gamma phi'_t)^T``,
    ``b_i = w_i sum_t rho_t R_t phi_t``, ``C_i = w_i sum_t phi_t phi_t^T``, with ``phi' = 0`` on
    terminal steps and ``rho_t = target(a_t|s_t) / behavior(a_t|s_t)``. Generated in chunks of
    ``chunk`` trajectories, so memory stays bounded. Returns ``(A (n, n), b (n,), C (n, n))`` for
    the features (default :func:`feature_map`).
    """
    return population_statistics(lambda size: generate(size, rng, behavior, max_steps), target,
                                 features if features is not None else feature_map(), gamma=gamma,
                                 normalization=normalization, length_scale=length_scale,
                                 n_trajectories=n_trajectories, chunk=chunk,
                                 next_is_following_state=True)

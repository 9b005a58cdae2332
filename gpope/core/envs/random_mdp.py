"""Random MDPs with exactly known values: a test bed that no part of gpope was tuned on.

Specification (``random_mdp-v1``; every instance is a pure function of its
:class:`RandomMDPConfig`, its seed included):

| quantity | value |
|---|---|
| states | ``0 .. n_states - 1`` non-terminal, ``n_states .. n_states + n_terminal - 1`` terminal |
| observation | ``features="tabular"``: ``(1,)`` float64 holding the integer state; |
| | ``features="linear"``: ``(d,)`` float64, a fixed random vector ``x(s)`` in [0, 1]^d |
| actions | ``0 .. n_actions - 1`` |
| dynamics | ``P(. | s, a)``: a sparse random row over ``branching`` next states, plus a |
| | probability ``terminate`` (per state, action, around ``1 / mean_length``) of a terminal state |
| reward | Bernoulli: ``r_max`` with probability ``p(s, a)``, else 0 (``features="tabular"``); |
| | ``features="linear"``: the deterministic ``r(s, a) = r_pi(s)`` that puts V in the span |
| behaviour | ``mu(a | s)``: Dirichlet rows mixed with the uniform row (every action has probability |
| | at least ``min_behaviour / n_actions``) |
| target | ``pi(a | s)``: Dirichlet rows mixed with ``mu`` so that ``pi / mu <= ratio_bound`` |
| | (tabular); a softmax over linear action values of ``[1, x(s)]`` whose temperature keeps |
| | ``pi / mu <= ratio_bound`` (linear; expressible in a spec as ``kind: softmax``) |
| start | a random distribution over the non-terminal states |
| episode end | terminal on entering a terminal state; truncated after ``max_steps`` steps |

Exact values: ``V = (I - gamma P_pi)^-1 r_pi`` on the non-terminal states (P_pi substochastic:
the missing mass is termination), :meth:`RandomMDP.values`. They are the values the data
identify whatever the cap, since a truncated last step keeps its next state and bootstraps.
Values lie in [0, 1] with maximum 1 (tabular: rewards scaled so that ``max_s V(s) = 1``; linear:
V spans [0.1, 1]), so value errors are on the scale of the issue's targets.

Linear variant: ``V = X w`` for a random ``w`` and ``X`` the (n_states, d) observation vectors with
a leading constant coordinate in the features (``constant_identity``); the reward that makes this
exact is ``r_pi = (I - gamma P_pi) V``, paid deterministically on every action. LSTD with those
features is unbiased, and its error comes from the data and the privacy noise only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from gpope.core.envs.episodes import StepLog
from gpope.core.policies import Policy, policy_from_dict
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_choice, check_int, check_number

__all__ = ["RandomMDP", "RandomMDPConfig", "random_mdp"]

FeatureKind = Literal["tabular", "linear"]


@dataclass(frozen=True)
class RandomMDPConfig:
    """One random MDP instance (all public).

    Attributes:
        seed: seed of the instance (dynamics, rewards, policies, start, observation vectors).
        n_states: non-terminal states, >= 2.
        n_actions: actions, >= 2.
        n_terminal: terminal states, >= 1.
        branching: non-terminal successors per (state, action), in 1..n_states.
        mean_length: about the mean episode length (termination probability ~ 1 / mean_length).
        max_steps: episode cap (truncation), >= 1.
        gamma: discount in (0, 1].
        ratio_bound: largest pi(a|s) / mu(a|s), >= 1.
        min_behaviour: every action has behaviour probability >= min_behaviour / n_actions.
        features: ``"tabular"`` (integer state) or ``"linear"`` (a d-vector per state).
        n_dims: d of the linear observation vectors (``features="linear"``), < n_states.
        reference_count: number of public reference states (the first in a fixed random order).
    """

    seed: int = 0
    n_states: int = 16
    n_actions: int = 4
    n_terminal: int = 2
    branching: int = 3
    mean_length: float = 15.0
    max_steps: int = 60
    gamma: float = 0.95
    ratio_bound: float = 3.0
    min_behaviour: float = 0.5
    features: FeatureKind = "tabular"
    n_dims: int = 4
    reference_count: int = 4

    def __post_init__(self) -> None:
        o = "RandomMDPConfig"
        check_int(o, "seed", self.seed, ge=0)
        check_int(o, "n_states", self.n_states, ge=2)
        check_int(o, "n_actions", self.n_actions, ge=2)
        check_int(o, "n_terminal", self.n_terminal, ge=1)
        check_int(o, "branching", self.branching, ge=1, le=self.n_states)
        check_number(o, "mean_length", self.mean_length, ge=1.0)
        check_int(o, "max_steps", self.max_steps, ge=1)
        check_number(o, "gamma", self.gamma, gt=0.0, le=1.0)
        check_number(o, "ratio_bound", self.ratio_bound, ge=1.0)
        check_number(o, "min_behaviour", self.min_behaviour, gt=0.0, le=1.0)
        check_choice(o, "features", self.features, ("tabular", "linear"))
        check_int(o, "n_dims", self.n_dims, ge=1, le=self.n_states - 1)
        check_int(o, "reference_count", self.reference_count, ge=1, le=self.n_states)

    @classmethod
    def drawn(cls, seed: int, *, features: FeatureKind = "tabular") -> RandomMDPConfig:
        """A config of varied size and horizon drawn from ``seed`` (the benchmark's instances):
        8-24 states, 2-5 actions, 1-3 terminal states, mean length 5-30, gamma 0.9-0.99,
        ratio bound 2-5, cap 2-4 mean lengths."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x6D6470]))
        n_states = int(rng.integers(8, 25))
        mean_length = float(rng.uniform(5.0, 30.0))
        return cls(seed=seed, n_states=n_states, n_actions=int(rng.integers(2, 6)),
                   n_terminal=int(rng.integers(1, 4)),
                   branching=int(rng.integers(2, min(5, n_states) + 1)), mean_length=mean_length,
                   max_steps=int(mean_length * rng.uniform(2.0, 4.0)) + 1,
                   gamma=float(rng.choice([0.9, 0.95, 0.98, 0.99])),
                   ratio_bound=float(rng.uniform(2.0, 5.0)), features=features,
                   n_dims=min(int(rng.integers(2, 6)), n_states - 1))  # fmt: skip


def _dirichlet_rows(rng: np.random.Generator, rows: int, cols: int, alpha: float) -> np.ndarray:
    return rng.dirichlet(np.full(cols, alpha), size=rows)


@dataclass(frozen=True, eq=False)
class RandomMDP:
    """A generated instance: model arrays, policies and exact values.

    Attributes:
        config: the instance's config.
        P: (S, A, S + K) transition probabilities (rows sum to 1; the last K columns terminate).
        reward_prob: (S, A) probability of paying ``r_max`` (tabular variant).
        reward_mean: (S, A) expected reward.
        r_max: the reward paid (tabular) or the largest |reward| (linear); public bound.
        behaviour: (S, A) mu; target: (S, A) pi.
        start: (S,) start distribution.
        observations: (S + K, d) observation vectors (linear variant; terminal rows unused).
        target_spec: pi as a spec's ``target_policy`` mapping (``kind: tabular`` or ``softmax``).
    """

    config: RandomMDPConfig
    P: np.ndarray
    reward_prob: np.ndarray
    reward_mean: np.ndarray
    r_max: float
    behaviour: np.ndarray
    target: np.ndarray
    start: np.ndarray
    observations: np.ndarray

    @property
    def n_states(self) -> int:
        """Non-terminal states S."""
        return self.config.n_states

    target_spec: dict[str, Any]

    def target_policy(self) -> Policy:
        """pi as a policy of the observations: the spec's ``target_policy``."""
        return policy_from_dict(self.target_spec)

    def max_ratio(self) -> float:
        """max over (s, a) of pi(a|s) / mu(a|s) (<= ``config.ratio_bound``)."""
        return float(np.max(self.target / self.behaviour))

    def values(self) -> np.ndarray:
        """(S,) exact V^pi of the non-terminal states: ``(I - gamma P_pi)^-1 r_pi``."""
        S = self.n_states
        P_pi = np.einsum("sa,sat->st", self.target, self.P[:, :, :S])
        r_pi = np.einsum("sa,sa->s", self.target, self.reward_mean)
        return np.linalg.solve(np.eye(S) - self.config.gamma * P_pi, r_pi)

    def reference_states(self) -> dict[str, list[float]]:
        """``{"s<i>": observation}`` for ``config.reference_count`` public reference states."""
        order = np.random.default_rng(np.random.SeedSequence([self.config.seed, 0x726566]))
        chosen = sorted(order.permutation(self.n_states)[: self.config.reference_count].tolist())
        return {f"s{i}": self.observe(np.array([i]))[0].tolist() for i in chosen}

    def reference_values(self) -> dict[str, float]:
        """Exact values at :meth:`reference_states` (same keys)."""
        v = self.values()
        return {name: float(v[int(name[1:])]) for name in self.reference_states()}

    def spec_mapping(self, name: str) -> dict[str, Any]:
        """An evaluation spec (the YAML mapping) of this MDP as an analyst would write it for own
        data: no ``domain``, no ``evaluation:`` block; public bounds from the design (the ratio
        bound, the reward range), ``length_scale`` = the episode cap, the target policy's table."""
        c = self.config
        low = 0.0 if c.features == "tabular" else -self.r_max
        return {
            "name": name, "gamma": c.gamma, "normalization": "transition",
            "length_scale": c.max_steps, "feature_map": self.feature_map(),
            "importance_weight_bound": _round_up(self.max_ratio()),
            "reward_bounds": [-_round_up(-low) if low else 0.0, _round_up(self.r_max)],
            "target_policy": self.target_spec, "reference_states": self.reference_states(),
        }  # fmt: skip

    def observe(self, states: np.ndarray) -> np.ndarray:
        """(T, d) observations of integer states (T,): the state itself, or its vector."""
        states = np.asarray(states, dtype=np.int64)
        if self.config.features == "tabular":
            return states.astype(np.float64)[:, None]
        return self.observations[states]

    def feature_map(self) -> dict[str, Any]:
        """The spec's ``feature_map`` mapping: one-hot over S + K states, or ``constant_identity``
        over the observation box [0, 1]^d."""
        if self.config.features == "tabular":
            return {"kind": "tabular", "n_states": self.n_states + self.config.n_terminal}
        d = self.config.n_dims
        return {"kind": "constant_identity", "low": [0.0] * d, "high": [1.0] * d}

    def generate(self, n_trajectories: int, rng: np.random.Generator,
                 max_steps: int | None = None) -> Transitions:
        """``n_trajectories`` episodes under mu (a loop over time only, vectorised over episodes).

        Returns:
            :class:`Transitions` sorted by (trajectory, t): terminal on entering a terminal state
            (its next observation is the terminal state's), truncated on the cap's last step.
        """
        m = check_int("RandomMDP.generate", "n_trajectories", n_trajectories, ge=1)
        cap = check_int("RandomMDP.generate", "max_steps", max_steps or self.config.max_steps,
                        ge=1)  # fmt: skip
        S = self.behaviour.shape[0]
        cum_mu = np.cumsum(self.behaviour, axis=1)
        cum_P = np.cumsum(self.P, axis=2)
        state = _draw(rng, np.broadcast_to(np.cumsum(self.start), (m, S)))
        alive = np.arange(m, dtype=np.int64)
        log = StepLog(m)
        for t in range(cap):
            action = _draw(rng, cum_mu[state])
            nxt = _draw(rng, cum_P[state, action])
            if self.config.features == "tabular":
                reward = self.r_max * (rng.random(len(state)) < self.reward_prob[state, action])
            else:
                reward = self.reward_mean[state, action]
            log.add(t, alive, state=self.observe(state), action=action.astype(np.int64),
                    reward=np.asarray(reward, dtype=np.float64), next_state=self.observe(nxt),
                    terminal=nxt >= S, behavior_prob=self.behaviour[state, action])
            keep = nxt < S
            alive, state = alive[keep], nxt[keep]
            if len(alive) == 0:
                break
        return log.transitions(cap)


def _round_up(x: float) -> float:
    """``x`` rounded up at the 4th significant digit (a public bound a person would write)."""
    scale = 10.0 ** (math.floor(math.log10(abs(x))) - 3)
    return float(math.ceil(x / scale * (1.0 + 1e-12)) * scale)


def _pad_rows(table: np.ndarray, extra: int) -> np.ndarray:
    A = table.shape[1]
    return np.vstack([table, np.full((extra, A), 1.0 / A)])


def _draw(rng: np.random.Generator, cumulative: np.ndarray) -> np.ndarray:
    """One index per row of (k, n) cumulative probabilities."""
    u = rng.random(cumulative.shape[0]) * cumulative[:, -1]
    return np.minimum((cumulative < u[:, None]).sum(axis=1), cumulative.shape[1] - 1)


@functools.lru_cache(maxsize=64)
def random_mdp(config: RandomMDPConfig) -> RandomMDP:
    """The instance of ``config`` (deterministic: the same config gives the same arrays)."""
    c = config
    rng = np.random.default_rng(np.random.SeedSequence([c.seed, 0x524D44]))
    S, A, K = c.n_states, c.n_actions, c.n_terminal
    P = np.zeros((S, A, S + K))
    p_end = np.clip(rng.gamma(4.0, 1.0 / (4.0 * c.mean_length), size=(S, A)), 0.0, 0.9)
    for s in range(S):
        for a in range(A):
            succ = rng.choice(S, size=c.branching, replace=False)
            P[s, a, succ] = (1.0 - p_end[s, a]) * rng.dirichlet(np.ones(c.branching))
            P[s, a, S + rng.integers(K)] += p_end[s, a]
    mu = (1.0 - c.min_behaviour) * _dirichlet_rows(rng, S, A, 1.0) + c.min_behaviour / A
    raw = _dirichlet_rows(rng, S, A, 0.5)
    start = rng.dirichlet(np.ones(S))
    observations = rng.random((S + K, c.n_dims))
    if c.features == "tabular":
        # the largest mix of raw into mu that keeps pi / mu <= ratio_bound
        excess = np.max(raw / mu, axis=1, keepdims=True)
        lam = np.where(excess > c.ratio_bound, (c.ratio_bound - 1.0) / (excess - 1.0), 1.0)
        pi = lam * raw + (1.0 - lam) * mu
        target_spec: dict[str, Any] = {"kind": "tabular", "probs": _pad_rows(pi, K).tolist()}
    else:
        target_spec = _softmax_target(rng.normal(size=(A, c.n_dims + 1)), observations[:S], mu,
                                      c.ratio_bound)
        pi = policy_from_dict(target_spec).probabilities(observations[:S])
    P_pi = np.einsum("sa,sat->st", pi, P[:, :, :S])
    if c.features == "tabular":
        prob = rng.beta(0.7, 1.5, size=(S, A))
        v = np.linalg.solve(np.eye(S) - c.gamma * P_pi, np.einsum("sa,sa->s", pi, prob))
        r_max = 1.0 / float(np.max(np.abs(v)))
        mean = r_max * prob
    else:
        raw_v = observations[:S] @ rng.normal(size=c.n_dims)
        values = 0.1 + 0.9 * (raw_v - raw_v.min()) / max(float(np.ptp(raw_v)), 1e-12)
        r_pi = values - c.gamma * P_pi @ values
        prob = np.zeros((S, A))
        mean = np.repeat(r_pi[:, None], A, axis=1)
        r_max = float(np.max(np.abs(r_pi)))
    return RandomMDP(config=c, P=P, reward_prob=prob, reward_mean=mean, r_max=r_max,
                     behaviour=mu, target=pi, start=start, observations=observations,
                     target_spec=target_spec)


def _softmax_target(weights: np.ndarray, x: np.ndarray, mu: np.ndarray,
                    ratio_bound: float) -> dict[str, Any]:
    """A softmax policy over ``weights . [1, x]`` whose temperature (bisected on a log scale) keeps
    ``pi / mu <= ratio_bound``; a large temperature tends to uniform, whose ratio is at most
    ``1 / min_behaviour <= ratio_bound`` when that holds, else the largest temperature tried."""
    d = x.shape[1]
    q = {"kind": "linear_q", "weights": weights.tolist(),
         "feature_map": {"kind": "constant_identity", "low": [0.0] * d, "high": [1.0] * d}}

    def spec(temperature: float) -> dict[str, Any]:
        return {"kind": "softmax", "temperature": float(temperature), "q": q}

    def ratio(log_t: float) -> float:
        return float(np.max(policy_from_dict(spec(10.0**log_t)).probabilities(x) / mu))

    lo, hi = -2.0, 3.0
    if ratio(lo) <= ratio_bound:
        return spec(10.0**lo)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if ratio(mid) <= ratio_bound else (mid, hi)
    return spec(10.0**hi)

"""Policies over discrete actions, importance ratios and vectorised action sampling.

A policy maps raw states ``(T, d)`` to action probabilities ``(T, n_actions)`` whose rows sum to
1 (the :class:`Policy` protocol); policies are small frozen objects that serialise to dicts with
a ``"kind"`` key and back (:func:`policy_from_dict`), and stored artifacts
(``envs/artifacts/*.json``) hold learned ones (:func:`load_policy`). :class:`EpsilonGreedyPolicy`
(``epsilon = 0``: greedy; ties share the greedy mass) and :class:`SoftmaxPolicy` act on action
values, usually a :class:`LinearQ`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from gpope.core.validation import check_int, check_number
from gpope.errors import ConfigError, DataError, SchemaError

if TYPE_CHECKING:
    from gpope.core.features import FeatureMap
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["ARTIFACTS_DIR", "ActionValues", "EpsilonGreedyPolicy", "FixedActionPolicy", "LinearQ",
           "Policy", "SoftmaxPolicy", "TabularPolicy", "UniformPolicy", "action_values_from_dict",
           "available_policies", "importance_ratios", "load_artifact", "load_policy",
           "policy_from_dict", "sample_actions"]

#: Directory of the stored policy artifacts (JSON), shipped with the package.
ARTIFACTS_DIR = Path(__file__).resolve().parent / "envs" / "artifacts"

_ROW_SUM_TOL = 1e-9


@runtime_checkable
class Policy(Protocol):
    """A stochastic policy over ``n_actions`` discrete actions."""

    n_actions: int

    def probabilities(self, states: np.ndarray) -> np.ndarray:
        """Action probabilities ``(T, n_actions)`` for raw states ``(T, d)``; rows sum to 1."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description with key ``"kind"``."""
        ...


@runtime_checkable
class ActionValues(Protocol):
    """Action values ``Q(s, a)`` over ``n_actions`` actions (e.g. :class:`LinearQ`)."""

    n_actions: int

    def values(self, states: np.ndarray) -> np.ndarray:
        """Action values ``(T, n_actions)`` for raw states ``(T, d)``."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description with key ``"kind"``."""
        ...


def _as_states(states: np.ndarray) -> np.ndarray:
    arr = np.asarray(states, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise SchemaError(f"states must have shape (T, d); got {np.shape(states)}.")
    return arr


@dataclass(frozen=True)
class UniformPolicy:
    """Every action with probability ``1 / n_actions``, whatever the state."""

    n_actions: int

    def __post_init__(self) -> None:
        check_int("UniformPolicy", "n_actions", self.n_actions, ge=1)

    def probabilities(self, states: np.ndarray) -> np.ndarray:
        """(T, n_actions) constant rows ``1 / n_actions``."""
        n = _as_states(states).shape[0]
        return np.full((n, self.n_actions), 1.0 / self.n_actions)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "uniform", "n_actions": self.n_actions}


@dataclass(frozen=True)
class FixedActionPolicy:
    """Always ``action`` (probability 1) out of ``n_actions``."""

    action: int
    n_actions: int

    def __post_init__(self) -> None:
        check_int("FixedActionPolicy", "n_actions", self.n_actions, ge=1)
        check_int("FixedActionPolicy", "action", self.action, ge=0, le=self.n_actions - 1)

    def probabilities(self, states: np.ndarray) -> np.ndarray:
        """(T, n_actions) one-hot rows at ``action``."""
        n = _as_states(states).shape[0]
        out = np.zeros((n, self.n_actions))
        out[:, self.action] = 1.0
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "fixed_action", "action": self.action, "n_actions": self.n_actions}


def _validated_table(owner: str, name: str, value: Any) -> np.ndarray:
    arr = np.array(value, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be a non-empty 2-D array. "
            f"Got shape {arr.shape} instead."
        )
    if not np.all(np.isfinite(arr)):
        raise ConfigError(f"The {name!r} parameter of {owner} must be finite. Got non-finite values.")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class TabularPolicy:
    """A probability table over integer states: ``pi(a | s) = probs[s, a]``, rows non-negative and
    summing to 1 (within 1e-9), the state in column 0, or the product grid of declared
    ``variables`` (row-major, read from the first state columns)."""

    probs: np.ndarray
    variables: Any = None
    n_actions: int = field(init=False)

    def __post_init__(self) -> None:
        probs = _validated_table("TabularPolicy", "probs", self.probs)
        if np.any(probs < 0) or np.any(np.abs(probs.sum(axis=1) - 1.0) > _ROW_SUM_TOL):
            raise ConfigError(
                "The 'probs' parameter of TabularPolicy must have non-negative rows summing to 1. "
                f"Got row sums in [{probs.sum(axis=1).min()}, {probs.sum(axis=1).max()}] instead."
            )
        if self.variables is not None:
            from gpope.core.features import DiscreteVariables

            variables = DiscreteVariables.parse(self.variables)
            if probs.shape[0] != variables.size:
                raise ConfigError(
                    f"The 'probs' parameter of TabularPolicy must have one row per state of the "
                    f"declared variables ({variables.size}: {variables.describe()}). Got "
                    f"{probs.shape[0]} rows instead.")
            object.__setattr__(self, "variables", variables)
        object.__setattr__(self, "probs", probs)
        object.__setattr__(self, "n_actions", int(probs.shape[1]))

    def probabilities(self, states: np.ndarray) -> np.ndarray:
        """(T, A) rows ``probs[s]`` for the integer states in column 0 of ``states`` (T, d), or
        for the declared variables' levels in its first columns."""
        if self.variables is not None:
            return self.probs[self.variables.codes("TabularPolicy", _as_states(states))]
        col = _as_states(states)[:, 0]
        idx = col.astype(np.int64)
        if np.any(idx != col) or np.any(idx < 0) or np.any(idx >= self.probs.shape[0]):
            raise DataError(
                f"TabularPolicy needs integer states in 0..{self.probs.shape[0] - 1} in column 0 "
                "(the dataset's first variable); some states are not (their values are private "
                "data and are not quoted). Give the spec's target_policy.probs one row per state "
                "the first variable takes, or check the state encoding."
            )
        return self.probs[idx]

    def to_dict(self) -> dict[str, Any]:
        if self.variables is not None:
            return {"kind": "tabular", "variables": self.variables.to_list(),
                    "probs": self.probs.tolist()}
        return {"kind": "tabular", "probs": self.probs.tolist()}


def _tabular_from_dict(d: dict[str, Any]) -> TabularPolicy:
    """A tabular policy; with ``variables``, ``probs`` may map state names (``"lactate=2,bp=0"``)
    to rows, with a ``default`` row for every state not named."""
    if d.get("variables") is None:
        return TabularPolicy(np.asarray(d["probs"], dtype=np.float64))
    from gpope.core.features import DiscreteVariables

    variables = DiscreteVariables.parse(d["variables"])
    probs = d["probs"]
    if isinstance(probs, dict):
        rows: dict[int, Any] = {}
        index = {name: i for i, name in enumerate(variables.state_names())}
        strides = [math.prod(variables.levels[j + 1:]) for j in range(len(variables.levels))]
        for name, row in probs.items():
            if name == "default":
                continue
            levels = variables.parse_state(f"target_policy.probs[{name!r}]", name)
            i = sum(v * st for v, st in zip(levels, strides, strict=True))
            rows[i] = row
        missing = [n for n, i in index.items() if i not in rows]
        if missing and "default" not in probs:
            raise ConfigError(
                f"target_policy.probs gives no row for {len(missing)} state(s) of the declared "
                f"variables, e.g. {missing[0]!r}; give one row per state or a 'default' row.")
        probs = [rows.get(i, probs.get("default")) for i in range(variables.size)]
    return TabularPolicy(np.asarray(probs, dtype=np.float64), variables)


@dataclass(frozen=True, eq=False)
class LinearQ:
    """Linear action values ``Q(s, a) = weights[a] . phi(s)``.

    Attributes:
        weights: (A, n) one weight vector per action.
        feature_map: a :class:`gpope.core.features.FeatureMap` with ``n_features == n``.
    """

    weights: np.ndarray
    feature_map: FeatureMap
    n_actions: int = field(init=False)

    def __post_init__(self) -> None:
        weights = _validated_table("LinearQ", "weights", self.weights)
        n = int(getattr(self.feature_map, "n_features", -1))
        if weights.shape[1] != n:
            raise ConfigError(
                f"The 'weights' parameter of LinearQ must have shape (A, {n}) to match the feature "
                f"map. Got shape {weights.shape} instead."
            )
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "n_actions", int(weights.shape[0]))

    def values(self, states: np.ndarray) -> np.ndarray:
        """(T, A) action values for raw states (T, d)."""
        return self.feature_map(_as_states(states)) @ self.weights.T

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "linear_q",
            "weights": self.weights.tolist(),
            "feature_map": self.feature_map.to_dict(),
        }


@dataclass(frozen=True, eq=False)
class EpsilonGreedyPolicy:
    """Greedy in ``q`` with probability ``1 - epsilon``, uniform with probability ``epsilon``.

    ``pi(a|s) = epsilon / A + (1 - epsilon) * 1[a in argmax] / |argmax|``: ties between maximal
    actions (exact equality) split the greedy mass evenly. ``epsilon = 0`` is the greedy policy.
    """

    q: ActionValues
    epsilon: float = 0.0
    n_actions: int = field(init=False)

    def __post_init__(self) -> None:
        check_number("EpsilonGreedyPolicy", "epsilon", self.epsilon, ge=0.0, le=1.0)
        object.__setattr__(self, "epsilon", float(self.epsilon))
        object.__setattr__(self, "n_actions", int(self.q.n_actions))

    def probabilities(self, states: np.ndarray) -> np.ndarray:
        """(T, A) epsilon-greedy probabilities for raw states (T, d)."""
        q = np.asarray(self.q.values(states), dtype=np.float64)
        best = q == q.max(axis=1, keepdims=True)
        greedy = best / best.sum(axis=1, keepdims=True)
        return self.epsilon / self.n_actions + (1.0 - self.epsilon) * greedy

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "epsilon_greedy", "epsilon": self.epsilon, "q": self.q.to_dict()}


@dataclass(frozen=True, eq=False)
class SoftmaxPolicy:
    """Boltzmann policy ``pi(a|s) proportional to exp(Q(s, a) / temperature)``.

    Computed stably (the row maximum is subtracted before exponentiation), so huge values or tiny
    temperatures never overflow; the limit of a tiny temperature is the greedy policy.
    """

    q: ActionValues
    temperature: float = 1.0
    n_actions: int = field(init=False)

    def __post_init__(self) -> None:
        check_number("SoftmaxPolicy", "temperature", self.temperature, gt=0.0)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "n_actions", int(self.q.n_actions))

    def probabilities(self, states: np.ndarray) -> np.ndarray:
        """(T, A) softmax probabilities for raw states (T, d)."""
        q = np.asarray(self.q.values(states), dtype=np.float64)
        with np.errstate(over="ignore"):
            # Shift by the row maximum first: the exponent is <= 0, so nothing overflows.
            z = np.exp((q - q.max(axis=1, keepdims=True)) / self.temperature)
        return z / z.sum(axis=1, keepdims=True)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "softmax", "temperature": self.temperature, "q": self.q.to_dict()}


def action_values_from_dict(d: dict[str, Any]) -> ActionValues:
    """Rebuild action values from :meth:`LinearQ.to_dict` output."""
    kind = d.get("kind") if isinstance(d, dict) else None
    if kind != "linear_q":
        raise ConfigError(f"The 'kind' of action values must be 'linear_q'. Got {kind!r} instead.")
    _require_keys("q (action values)", d, _POLICY_KEYS["linear_q"])
    from gpope.core.features import feature_map_from_dict

    return LinearQ(np.asarray(d["weights"], dtype=np.float64), feature_map_from_dict(d["feature_map"]))


def policy_from_dict(d: dict[str, Any]) -> Policy:
    """Rebuild a policy from its ``to_dict()`` output (kinds: uniform, fixed_action, tabular,
    epsilon_greedy, softmax)."""
    kind = d.get("kind") if isinstance(d, dict) else None
    if kind in _POLICY_KEYS:
        _require_keys("policy", d, _POLICY_KEYS[kind])
    if kind == "uniform":
        return UniformPolicy(int(d["n_actions"]))
    if kind == "fixed_action":
        return FixedActionPolicy(int(d["action"]), int(d["n_actions"]))
    if kind == "tabular":
        return _tabular_from_dict(d)
    if kind == "epsilon_greedy":
        return EpsilonGreedyPolicy(action_values_from_dict(d["q"]), float(d["epsilon"]))
    if kind == "softmax":
        return SoftmaxPolicy(action_values_from_dict(d["q"]), float(d["temperature"]))
    raise ConfigError(
        "The 'kind' of a policy must be one of 'uniform', 'fixed_action', 'tabular', "
        f"'epsilon_greedy', 'softmax'. Got {kind!r} instead."
    )


#: The keys each policy kind (and ``linear_q`` action values) must give, besides ``kind``.
_POLICY_KEYS: dict[str, tuple[str, ...]] = {
    "uniform": ("n_actions",), "fixed_action": ("action", "n_actions"), "tabular": ("probs",),
    "epsilon_greedy": ("epsilon", "q"), "softmax": ("temperature", "q"),
    "linear_q": ("weights", "feature_map"),
}


def _require_keys(what: str, d: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Refuse a mapping of a known kind without one of its keys, naming every key the kind takes."""
    missing = [k for k in keys if k not in d]
    if missing:
        raise ConfigError(
            f"A {what} of kind {d['kind']!r} needs the key(s) {', '.join(map(repr, missing))}; "
            f"it takes kind, {', '.join(keys)} (docs/OWN_DATA.md, 'The evaluation spec', "
            "has the YAML of each kind)."
        )


def available_policies() -> list[str]:
    """Names of the stored policy artifacts (file stems in :data:`ARTIFACTS_DIR`), sorted."""
    if not ARTIFACTS_DIR.is_dir():
        return []
    return sorted(p.stem for p in ARTIFACTS_DIR.glob("*.json"))


def load_artifact(name: str) -> dict[str, Any]:
    """The whole JSON artifact ``name`` (e.g. ``"mountaincar_q_v1"``): policy plus provenance."""
    if not isinstance(name, str) or not re.fullmatch(r"[a-z0-9_]+", name):
        raise ConfigError(
            "The 'name' parameter of load_policy must be an artifact name of lowercase letters, "
            f"digits and underscores. Got {name!r} instead."
        )
    path = ARTIFACTS_DIR / f"{name}.json"
    if not path.is_file():
        listed = ", ".join(repr(n) for n in available_policies()) or "none"
        raise ConfigError(
            f"The 'name' parameter of load_policy must be one of {listed}. Got {name!r} instead."
        )
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def load_policy(name: str) -> Policy:
    """The policy stored in artifact ``name`` (its ``"policy"`` entry, see :func:`policy_from_dict`)."""
    return policy_from_dict(load_artifact(name)["policy"])


def importance_ratios(target: Policy, transitions: Transitions) -> np.ndarray:
    """(T,) per-decision ratios ``pi(a_t | s_t) / behavior_prob_t`` (0 where pi gives a_t no mass)."""
    probs = np.asarray(target.probabilities(transitions.state), dtype=np.float64)
    action = np.asarray(transitions.action, dtype=np.int64)
    if probs.shape != (len(action), target.n_actions):
        raise SchemaError(
            f"target.probabilities returned shape {probs.shape}; expected {(len(action), target.n_actions)}."
        )
    if len(action) and (action.min() < 0 or action.max() >= target.n_actions):
        raise DataError(f"Transition actions must lie in 0..{target.n_actions - 1} for this target.")
    with np.errstate(over="ignore", divide="ignore"):  # a tiny propensity: inf, clamped later
        return probs[np.arange(len(action)), action] / np.asarray(
            transitions.behavior_prob, dtype=np.float64)


def sample_actions(
    policy: Policy, states: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``(actions, probs)``: one action per state (T, d) by inverse CDF, one uniform per row, as
    (T,) int64, and (T,) float64 ``pi(action | state)``; an action of probability 0 is never drawn.
    """
    probs = np.asarray(policy.probabilities(states), dtype=np.float64)
    n, n_actions = probs.shape
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(n) * cdf[:, -1]
    actions = (cdf <= u[:, None]).sum(axis=1)
    # Rounding can push u onto the total mass: fall back to the last action with positive mass.
    over = actions >= n_actions
    if np.any(over):
        last_positive = n_actions - 1 - np.argmax(probs[over, ::-1] > 0, axis=1)
        actions[over] = last_positive
    actions = actions.astype(np.int64)
    return actions, probs[np.arange(n), actions]

"""The state-action value route: values of the target policy without behaviour probabilities.

An extract without logged propensities cannot weight a transition by ``pi(a|s) / mu(a|s)``.
LSTDQ does not need to: it fits ``Q(s, a) = theta . phi(s, a)`` with ``phi(s, a) = phi(s) (x)
e_a`` (the state's features in the block of the action taken), and per trajectory::

    A_i = norm_i * sum_t phi(s_t, a_t) (phi(s_t, a_t) - gamma phi_pi(s'_t))^T
    b_i = norm_i * sum_t r_t phi(s_t, a_t)
    C_i = norm_i * sum_t phi(s_t, a_t) phi(s_t, a_t)^T

with ``phi_pi(s) = sum_a pi(a|s) phi(s, a)`` (0 on terminal rows). Only the target policy
(public) enters. ``V(s) = sum_a pi(a|s) Q(s, a) = theta . phi_pi(s)``.

The statistics have the value route's shape (``n |A|`` features), so the tuning-free default
releases them unchanged: :func:`state_action_spec` gives it a spec whose feature map is
:class:`StateActionFeatures` (called on states it returns ``phi_pi``, so the reference values
are V).

What the data must satisfy: every action the target takes at a visited state must have been
taken there often enough to be supported (else its value is unidentified and the interval
unbounded), and ``Q`` must lie in the span of ``phi(s, a)``: exact for a tabular state map, an
approximation error (not covered by the interval) otherwise.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.validation import check_int

if TYPE_CHECKING:
    from gpope.core.spec import EvaluationSpec
    from gpope.core.trajectories.stats import TrajectoryStats
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["StateActionFeatures", "is_state_action", "state_action_spec", "state_action_statistics",
           "value_spec"]


@dataclass(frozen=True)
class StateActionFeatures:
    """``phi(s, a) = phi(s) (x) e_a`` (block of action a: columns ``a n .. (a + 1) n - 1``) over the
    state map ``base`` and the public target ``policy``. Called on states (the FeatureMap protocol)
    it returns ``phi_pi(s) = sum_a pi(a|s) phi(s, a)``, so a spec with this map releases V."""

    base: Any
    policy: Any

    def __post_init__(self) -> None:
        check_int("StateActionFeatures", "n_actions", self.policy.n_actions, ge=1)

    @property
    def n_actions(self) -> int:
        """|A|, the target policy's number of actions."""
        return int(self.policy.n_actions)

    @property
    def n_features(self) -> int:
        """n |A|."""
        return int(self.base.n_features) * self.n_actions

    def pairs(self, states: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """(T, n |A|) features of the taken pairs ``phi(s_t, a_t)``."""
        phi = np.asarray(self.base(states), dtype=np.float64)
        a = np.asarray(actions, dtype=np.int64)
        out = np.zeros((phi.shape[0], self.n_actions, phi.shape[1]))
        out[np.arange(phi.shape[0]), a] = phi
        return out.reshape(phi.shape[0], -1)

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """(T, n |A|) ``phi_pi(s)``: the block of each action weighted by ``pi(a|s)``."""
        phi = np.asarray(self.base(states), dtype=np.float64)
        pi = np.asarray(self.policy.probabilities(states), dtype=np.float64)
        return (pi[:, :, None] * phi[:, None, :]).reshape(phi.shape[0], -1)

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "state_action", "base": ..., "n_actions": |A|}`` (the policy is the spec's)."""
        return {"kind": "state_action", "base": self.base.to_dict(), "n_actions": self.n_actions}


def is_state_action(spec: EvaluationSpec) -> bool:
    """Whether ``spec`` is a state-action fit's spec (:func:`state_action_spec`)."""
    return isinstance(spec.feature_map, StateActionFeatures)


def state_action_spec(spec: EvaluationSpec) -> EvaluationSpec:
    """The spec of the state-action fit of ``spec``: its map becomes :class:`StateActionFeatures`,
    everything else is kept (so :meth:`~gpope.core.spec.EvaluationSpec.reference_values` gives V
    at the same states, and :func:`value_spec` gives ``spec`` back); its ``spec_id`` differs, so
    the two routes' statistics never share a partition."""
    if is_state_action(spec):
        return spec
    return dataclasses.replace(
        spec, feature_map=StateActionFeatures(spec.feature_map, spec.target_policy),
        evaluation=None)


def value_spec(spec: EvaluationSpec) -> EvaluationSpec:
    """The value spec a :func:`state_action_spec` was made from (``spec`` itself otherwise)."""
    if not is_state_action(spec):
        return spec
    return dataclasses.replace(spec, feature_map=spec.feature_map.base)


def state_action_statistics(transitions: Transitions, spec: EvaluationSpec, *,
                            representation: str = "compact", bound: bool = True) -> TrajectoryStats:
    """Per-trajectory LSTDQ statistics (module docstring) of ``transitions`` under ``spec`` (the
    value spec or its :func:`state_action_spec`): rewards clamped to the public ``reward_bounds``
    and scaled by ``reward_scale`` (``bound`` False: taken as given); ``behavior_prob`` is never
    read."""
    from gpope.core.bounds import clamp_to_public_bounds
    from gpope.core.statistics import trajectory_statistics

    qspec = state_action_spec(spec)
    fmap = qspec.feature_map
    tr = transitions
    reward, scale = np.asarray(tr.reward, dtype=np.float64), 1.0
    if bound:
        _, reward, _ = clamp_to_public_bounds(np.ones(tr.n_transitions), reward,
                                              importance_weight_bound=None,
                                              reward_bounds=qspec.reward_bounds)
        scale = qspec.reward_scale
    nxt = np.asarray(tr.next_state, dtype=np.float64).copy()
    if tr.n_transitions and np.any(tr.terminal):
        nxt[tr.terminal] = tr.state[tr.terminal]  # any valid state: terminal rows are zeroed
    return trajectory_statistics(
        fmap.pairs(tr.state, tr.action), fmap(nxt), reward * scale,
        np.ones(tr.n_transitions), tr.traj_index, tr.n_trajectories, gamma=qspec.gamma,
        terminal=tr.terminal, normalization=qspec.normalization,
        length_scale=qspec.length_scale, representation=representation)


def behaviour_rules(spec: EvaluationSpec, settings: Any) -> Any:
    """The behaviour estimate's public rules (the settings' ``behaviour``) when a run on
    ``spec`` (a state-action spec) estimates the behaviour policy: its estimator estimates it
    (:attr:`gpope.core.estimators.Estimator.estimates_behaviour`) and the state map is tabular;
    else None (the pair fit is released as it is)."""
    from gpope.core.estimators import get
    from gpope.core.features import TabularFeatures

    if (not is_state_action(spec) or not get(settings.estimator).estimates_behaviour
            or not isinstance(spec.feature_map.base, TabularFeatures)):
        return None
    return settings.behaviour

"""The core's statistics of a Transitions batch under an evaluation spec: the one definition the
stats stage (per Spark partition), the public cohorts and the core experiments share.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gpope.core.spec import EvaluationSpec

__all__ = ["bounded", "missing_prob", "policy_terms", "statistics_and_counts",
           "statistics_of_transitions"]


def statistics_of_transitions(transitions: Any, spec: EvaluationSpec, *,
                              representation: str = "dense") -> Any:
    """The per-trajectory statistics of a Transitions batch under ``spec`` (dense unless
    ``representation`` says otherwise): importance ratios and raw rewards clamped to the spec's
    public bounds (:func:`gpope.core.bounds.clamp_to_public_bounds`), rewards multiplied by its
    public ``reward_scale``; nothing else is changed."""
    return statistics_and_counts(transitions, spec, representation=representation)[0]


def statistics_and_counts(transitions: Any, spec: EvaluationSpec, *,
                           representation: str = "dense", with_terms: bool = False) -> Any:
    """:func:`statistics_of_transitions` and the clamp counts of the same clamping; with
    ``with_terms`` also the policy value terms (:func:`policy_terms`) of the same batch."""
    rho, reward, counts = bounded(transitions, spec)
    terms = policy_terms(dataclasses.replace(transitions, reward=reward), rho, spec) \
        if with_terms else None
    if spec.reward_scale != 1.0 or reward is not transitions.reward:
        transitions = dataclasses.replace(transitions, reward=reward * spec.reward_scale)
    stats = _statistics(transitions, spec, rho, representation=representation)
    return (stats, counts, terms) if with_terms else (stats, counts)


def policy_terms(transitions: Any, rho: np.ndarray, spec: EvaluationSpec) -> np.ndarray | None:
    """(m, 3 + n) per-trajectory (g, a, n) of :func:`gpope.core.policy_value.policy_value_terms`
    (raw reward units, ratios and rewards already clamped to the spec's public bounds) followed
    by the first state's features phi(s_0) (the direct method's first-state mean,
    :mod:`gpope.core.policy_value_direct`), or None when the spec lacks a public bound the
    policy value release needs. A state-action spec (no logged propensities) gets the terms with
    every ratio 1 (``rho`` from :func:`bounded`: J(behaviour) only, J(target) comes from the
    direct method) and the first-state features of its value map."""
    from gpope.core.policy_value import policy_value_terms, policy_value_unavailable, spec_bounds
    from gpope.core.policy_value_direct import first_state_features
    from gpope.core.state_action import value_spec

    if policy_value_unavailable(spec):
        return None
    t = policy_value_terms(transitions, rho, spec_bounds(spec))
    return np.concatenate([np.stack([t.g, t.a, t.n], axis=1),
                           first_state_features(transitions, value_spec(spec).feature_map)],
                          axis=1)


def bounded(transitions: Any, spec: EvaluationSpec) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """(rho, raw reward, clamp counts) of a batch under the spec's public bounds."""
    from gpope.core.bounds import clamp_to_public_bounds
    from gpope.core.policies import importance_ratios
    from gpope.core.state_action import is_state_action

    if is_state_action(spec):  # no propensities logged: no ratio, rewards bounded only
        rho = np.ones(transitions.n_transitions)
        return clamp_to_public_bounds(rho, transitions.reward, importance_weight_bound=None,
                                      reward_bounds=spec.reward_bounds)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        rho = importance_ratios(spec.target_policy, transitions)
    return clamp_to_public_bounds(
        rho, transitions.reward, importance_weight_bound=spec.importance_weight_bound,
        reward_bounds=spec.reward_bounds)


def _statistics(transitions: Any, spec: EvaluationSpec, rho: np.ndarray, *,
                representation: str = "dense") -> Any:
    from gpope.core.state_action import is_state_action, state_action_statistics
    from gpope.core.statistics import statistics_from_transitions

    if is_state_action(spec):  # LSTDQ rows (gpope.core.state_action), rewards already bounded
        return state_action_statistics(transitions, spec, representation=representation,
                                       bound=False)
    return statistics_from_transitions(transitions, spec.feature_map, rho, gamma=spec.gamma,
                                       normalization=spec.normalization,
                                       length_scale=spec.length_scale,
                                       representation=representation)


def missing_prob(spec: EvaluationSpec) -> float | None:
    """A state-action fit never reads ``behavior_prob`` (null when not logged): any value."""
    from gpope.core.state_action import is_state_action

    return 1.0 if is_state_action(spec) else None

"""Policies: probability rows, closed-form epsilon-greedy/softmax, ratios, sampling, round trips."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import softmax as scipy_softmax
from scipy.stats import chisquare

from gpope.core.features import FourierFeatures, TabularFeatures
from gpope.core.policies import (
    EpsilonGreedyPolicy,
    FixedActionPolicy,
    LinearQ,
    Policy,
    SoftmaxPolicy,
    TabularPolicy,
    UniformPolicy,
    importance_ratios,
    load_policy,
    policy_from_dict,
    sample_actions,
)
from gpope.core.trajectories.transitions import Transitions
from gpope.errors import ConfigError, DataError


class TableQ:
    """Action values read from a table by the integer state (test double)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = np.asarray(table, dtype=np.float64)
        self.n_actions = self.table.shape[1]

    def values(self, states: np.ndarray) -> np.ndarray:
        return self.table[np.asarray(states)[:, 0].astype(int)]

    def to_dict(self) -> dict:
        return {"kind": "table_q"}


def _linear_q(rng: np.random.Generator) -> LinearQ:
    fmap = FourierFeatures(2, (-1.0, -1.0), (1.0, 1.0))
    return LinearQ(rng.normal(size=(3, fmap.n_features)), fmap)


def _all_policies(rng: np.random.Generator) -> list[Policy]:
    q = _linear_q(rng)
    probs = rng.dirichlet(np.ones(3), size=5)
    return [
        UniformPolicy(3),
        FixedActionPolicy(2, 3),
        TabularPolicy(probs),
        EpsilonGreedyPolicy(q, 0.0),
        EpsilonGreedyPolicy(q, 0.2),
        SoftmaxPolicy(q, 0.5),
    ]


def _states_for(policy: Policy, rng: np.random.Generator, n: int = 50) -> np.ndarray:
    if isinstance(policy, TabularPolicy):
        return rng.integers(0, policy.probs.shape[0], size=(n, 1)).astype(float)
    return rng.uniform(-1.0, 1.0, size=(n, 2))


def test_probability_rows_are_distributions():
    rng = np.random.default_rng(0)
    for policy in _all_policies(rng):
        p = policy.probabilities(_states_for(policy, rng))
        assert p.shape == (50, 3)
        assert np.all(p >= 0)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)


def test_uniform_and_fixed_action_closed_forms():
    states = np.zeros((4, 2))
    np.testing.assert_array_equal(UniformPolicy(4).probabilities(states), np.full((4, 4), 0.25))
    np.testing.assert_array_equal(
        FixedActionPolicy(1, 3).probabilities(states), np.tile([0.0, 1.0, 0.0], (4, 1))
    )


def test_epsilon_greedy_closed_form_with_ties():
    q = TableQ([[1.0, 3.0, 3.0], [5.0, 0.0, -1.0], [2.0, 2.0, 2.0]])
    states = np.array([[0.0], [1.0], [2.0]])
    got = EpsilonGreedyPolicy(q, 0.3).probabilities(states)
    expected = np.array(
        [[0.1, 0.1 + 0.35, 0.1 + 0.35], [0.1 + 0.7, 0.1, 0.1], [1 / 3, 1 / 3, 1 / 3]]
    )
    np.testing.assert_allclose(got, expected, atol=1e-15)
    greedy = EpsilonGreedyPolicy(q, 0.0).probabilities(states)
    np.testing.assert_allclose(greedy, [[0, 0.5, 0.5], [1, 0, 0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-15)


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.floats(-50, 50), min_size=2, max_size=5),
    temperature=st.floats(0.05, 20.0),
)
def test_softmax_matches_scipy(values, temperature):
    table = np.array([values])
    got = SoftmaxPolicy(TableQ(table), temperature).probabilities(np.zeros((1, 1)))
    np.testing.assert_allclose(got, scipy_softmax(table / temperature, axis=1), rtol=1e-12, atol=1e-300)


def test_softmax_is_stable_for_huge_values_and_tiny_temperature():
    q = TableQ([[1e6, 0.0, -1e6], [-1e308, -1e308, -1e308]])
    p = SoftmaxPolicy(q, 1e-3).probabilities(np.array([[0.0], [1.0]]))
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p, [[1.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]], atol=1e-15)


def _tabular_transitions(rng: np.random.Generator, n_states: int, n_actions: int, m: int) -> Transitions:
    lengths = rng.integers(1, 6, size=m)
    traj = np.repeat(np.arange(m), lengths)
    T = len(traj)
    t = np.concatenate([np.arange(k) for k in lengths])
    state = rng.integers(0, n_states, size=(T, 1)).astype(float)
    return Transitions(
        traj_index=traj,
        t=t,
        state=state,
        action=rng.integers(0, n_actions, size=T),
        reward=rng.normal(size=T),
        next_state=state.copy(),
        terminal=np.zeros(T, dtype=bool),
        truncated=np.zeros(T, dtype=bool),
        behavior_prob=rng.uniform(0.05, 1.0, size=T),
        n_trajectories=m,
    )


def test_importance_ratios_brute_force():
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(4), size=6)
    probs[2] = [0.0, 0.0, 1.0, 0.0]
    target = TabularPolicy(probs)
    tr = _tabular_transitions(rng, 6, 4, 30)
    expected = np.array(
        [
            probs[int(tr.state[i, 0]), tr.action[i]] / tr.behavior_prob[i]
            for i in range(tr.n_transitions)
        ]
    )
    np.testing.assert_allclose(importance_ratios(target, tr), expected, rtol=1e-15)


def test_sampling_frequencies_match_probabilities():
    rng = np.random.default_rng(2)
    probs = np.array([[0.2, 0.5, 0.3, 0.0], [0.0, 0.0, 0.0, 1.0], [0.7, 0.0, 0.1, 0.2]])
    policy = TabularPolicy(probs)
    n = 30_000
    for s in range(3):
        states = np.full((n, 1), float(s))
        actions, p = sample_actions(policy, states, rng)
        assert actions.dtype == np.int64
        np.testing.assert_array_equal(p, probs[s, actions])
        counts = np.bincount(actions, minlength=4)
        support = probs[s] > 0
        assert np.all(counts[~support] == 0)
        if support.sum() > 1:
            stat = chisquare(counts[support], n * probs[s, support])
            assert stat.pvalue > 1e-4, (s, counts)


def test_sampling_is_deterministic_and_one_uniform_per_row():
    policy = TabularPolicy(np.array([[0.25, 0.25, 0.5]]))
    states = np.zeros((1000, 1))
    a1, _ = sample_actions(policy, states, np.random.default_rng(5))
    a2, _ = sample_actions(policy, states, np.random.default_rng(5))
    np.testing.assert_array_equal(a1, a2)
    # Inverse CDF with one uniform per row: reproduce from the same stream.
    u = np.random.default_rng(5).random(1000)
    np.testing.assert_array_equal(a1, np.where(u < 0.25, 0, np.where(u < 0.5, 1, 2)))


def test_to_dict_round_trip_through_json():
    rng = np.random.default_rng(3)
    tab_q = LinearQ(rng.normal(size=(2, 4)), TabularFeatures(4))
    policies = [*_all_policies(rng), SoftmaxPolicy(tab_q, 2.0)]
    for policy in policies:
        back = policy_from_dict(json.loads(json.dumps(policy.to_dict())))
        assert type(back) is type(policy)
        assert back.to_dict() == policy.to_dict()
        states = _states_for(policy, rng) if policy is not policies[-1] else np.arange(4.0)[:, None]
        np.testing.assert_array_equal(back.probabilities(states), policy.probabilities(states))


def test_linear_q_values_closed_form():
    rng = np.random.default_rng(4)
    fmap = TabularFeatures(5)
    w = rng.normal(size=(3, 5))
    states = np.array([[0.0], [4.0], [2.0]])
    np.testing.assert_array_equal(LinearQ(w, fmap).values(states), w[:, [0, 4, 2]].T)


def test_validation_errors():
    with pytest.raises(ConfigError, match="'epsilon' parameter of EpsilonGreedyPolicy"):
        EpsilonGreedyPolicy(TableQ([[0.0]]), 1.5)
    with pytest.raises(ConfigError, match="'temperature' parameter of SoftmaxPolicy must be > 0"):
        SoftmaxPolicy(TableQ([[0.0]]), 0.0)
    with pytest.raises(ConfigError, match="summing to 1"):
        TabularPolicy(np.array([[0.5, 0.4]]))
    with pytest.raises(ConfigError, match="'action' parameter of FixedActionPolicy"):
        FixedActionPolicy(3, 3)
    with pytest.raises(ConfigError, match=r"shape \(A, 4\)"):
        LinearQ(np.zeros((3, 5)), TabularFeatures(4))
    with pytest.raises(ConfigError, match="'kind' of a policy"):
        policy_from_dict({"kind": "nope"})
    with pytest.raises(DataError):
        TabularPolicy(np.eye(2)).probabilities(np.array([[2.0]]))
    with pytest.raises(ConfigError, match="mountaincar_q_v1"):
        load_policy("no_such_policy")
    with pytest.raises(ConfigError, match="lowercase"):
        load_policy("../policies")


def test_load_policy_mountaincar_artifact():
    policy = load_policy("mountaincar_q_v1")
    assert isinstance(policy, EpsilonGreedyPolicy) and policy.epsilon == 0.0
    assert policy.n_actions == 3
    assert policy.q.weights.shape == (3, 36)
    p = policy.probabilities(np.array([[-0.5, 0.0], [0.2, 0.05]]))
    np.testing.assert_allclose(p.sum(axis=1), 1.0)


@pytest.mark.parametrize(("d", "missing"), [
    ({"kind": "softmax", "q": {"kind": "linear_q", "weights": [[0.0]],
                               "feature_map": {"kind": "tabular", "n_states": 1}}},
     "'temperature'; it takes kind, temperature, q"),
    ({"kind": "epsilon_greedy", "epsilon": 0.1}, "'q'; it takes kind, epsilon, q"),
    ({"kind": "softmax", "temperature": 1.0, "q": {"kind": "linear_q", "weights": [[0.0]]}},
     "'feature_map'; it takes kind, weights, feature_map"),
    ({"kind": "tabular"}, "'probs'"),
])
def test_a_policy_without_a_key_of_its_kind_names_the_key_and_the_docs(d, missing):
    with pytest.raises(ConfigError, match=f"needs the key\\(s\\) {missing}.*OWN_DATA"):
        policy_from_dict(d)

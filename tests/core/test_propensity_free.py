"""Own data without logged propensities: the state-action fit and the private behaviour estimate.

Oracles: hand-written transitions whose LSTDQ sums are written out by hand, a random MDP's exact
values (``(I - gamma P_pi)^-1 r_pi``) for a noise-free solve on many episodes, empirical action
frequencies, and dp-accounting's own epsilon of the plan's composed event.
"""

from __future__ import annotations

import dataclasses

import dp_accounting
import numpy as np
import pytest

from gpope.core import behaviour_estimate as be
from gpope.core.spec import EvaluationSpec
from gpope.core.state_action import (
    StateActionFeatures,
    state_action_spec,
    state_action_statistics,
    value_spec,
)
from gpope.core.trajectories.transitions import Transitions

PI = [[0.25, 0.75], [1.0, 0.0]]
SPEC = EvaluationSpec.from_mapping({
    "name": "two_states", "gamma": 0.5, "normalization": "transition", "length_scale": 4,
    "importance_weight_bound": 4.0, "reward_bounds": [0.0, 1.0],
    "feature_map": {"kind": "tabular", "n_states": 2},
    "target_policy": {"kind": "tabular", "probs": PI},
    "reference_states": {"s0": [0], "s1": [1]}})


def _transitions(rows, m, behavior_prob=None):
    c = list(zip(*rows, strict=True))  # (traj, state, action, reward, next, terminal)
    n = len(rows)
    return Transitions(
        traj_index=np.array(c[0]), t=np.zeros(n, dtype=np.int64),
        state=np.array(c[1], dtype=float)[:, None], action=np.array(c[2]),
        reward=np.array(c[3], dtype=float), next_state=np.array(c[4], dtype=float)[:, None],
        terminal=np.array(c[5], dtype=bool), truncated=np.zeros(n, dtype=bool),
        behavior_prob=np.full(n, 0.5) if behavior_prob is None else np.asarray(behavior_prob),
        n_trajectories=m)


def test_state_action_statistics_are_the_lstdq_sums_written_out():
    # one trajectory: (s0, a1, r 1, -> s1), (s1, a0, r 0, terminal); features index a * 2 + s
    tr = _transitions([(0, 0, 1, 1.0, 1, False), (0, 1, 0, 0.0, 0, True)], 1)
    A, b, C = (x[0] for x in state_action_statistics(tr, SPEC, representation="dense").dense())
    e = np.eye(4)
    phi_pi_s1 = PI[1][0] * e[1] + PI[1][1] * e[3]  # sum_a pi(a|s1) phi(s1, a)
    want_A = (np.outer(e[2], e[2] - 0.5 * phi_pi_s1) + np.outer(e[1], e[1])) / 4
    np.testing.assert_allclose(A, want_A)
    np.testing.assert_allclose(b, e[2] / 4)
    np.testing.assert_allclose(C, (np.outer(e[2], e[2]) + np.outer(e[1], e[1])) / 4)
    # behavior_prob is never read: any logged value gives the same statistics
    again = state_action_statistics(dataclasses.replace(tr, behavior_prob=np.array([1.0, 0.01])),
                                    SPEC, representation="dense").dense()[0][0]
    np.testing.assert_array_equal(again, A)


def test_state_action_spec_releases_v_as_the_policy_average_of_q():
    q = state_action_spec(SPEC)
    assert isinstance(q.feature_map, StateActionFeatures) and q.n_features == 4
    assert q.reference_names == SPEC.reference_names and q.spec_id != SPEC.spec_id
    assert value_spec(q) == SPEC and state_action_spec(q) is q
    # no ratio in the pair statistics: the clip grid's top takes a weight of 1, not the spec's 4
    from gpope.core.untuned.release import statistics_norm_bound

    assert statistics_norm_bound(q) == pytest.approx(np.hypot(1.5, 1.0) + 1.0)
    theta = np.array([1.0, 2.0, 3.0, 4.0])  # Q(s0,a0), Q(s1,a0), Q(s0,a1), Q(s1,a1)
    np.testing.assert_allclose(q.reference_values(theta), [0.25 * 1 + 0.75 * 3, 2.0])


def test_noise_free_tabular_lstdq_is_the_empirical_models_value_without_propensities():
    # oracle: the certainty-equivalence model counted from the same transitions (N(s,a),
    # N(s,a,s') over non-terminal successors, summed rewards), Q = r^ + gamma P^ pi Q solved
    # directly; the LSTDQ fixed point of one-hot pairs is that Q, whatever was logged
    from gpope.core.envs.registry import get_domain, random_mdp_of

    name = "random_mdp/3"
    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping("rm3"))
    tr = get_domain(name).generate(2000, np.random.default_rng(0), None, mdp.config.max_steps)
    tr = dataclasses.replace(tr, behavior_prob=np.ones(tr.n_transitions))  # nothing logged
    A, b, _ = (x.sum(axis=0) for x in state_action_statistics(tr, spec).dense())
    keep = np.diag(A) > 0  # pairs visited (the spec's terminal states never are)
    theta = np.zeros(len(b))
    theta[keep] = np.linalg.solve(A[np.ix_(keep, keep)], b[keep])
    S, K = spec.n_features, spec.target_policy.n_actions
    s, a = tr.state[:, 0].astype(int), tr.action
    s2, live = tr.next_state[:, 0].astype(int), ~tr.terminal
    n_sa, r_sa, n_sas = np.zeros((S, K)), np.zeros((S, K)), np.zeros((S, K, S))
    np.add.at(n_sa, (s, a), 1.0)
    np.add.at(r_sa, (s, a), np.clip(tr.reward, *spec.reward_bounds))
    np.add.at(n_sas, (s[live], a[live], s2[live]), 1.0)
    seen = (n_sa > 0).ravel()
    assert np.array_equal(seen, keep.reshape(K, S).T.ravel())
    pi = spec.target_policy.probabilities(np.arange(S, dtype=float)[:, None])  # (S, K)
    P = n_sas / np.maximum(n_sa, 1.0)[:, :, None]  # (S, K, S)
    M = np.eye(S * K) - spec.gamma * np.einsum("skt,tb->sktb", P, pi).reshape(S * K, S * K)
    q = np.zeros(S * K)
    q[seen] = np.linalg.solve(M[np.ix_(seen, seen)], (r_sa / np.maximum(n_sa, 1.0)).ravel()[seen])
    q = q.reshape(S, K)  # index s * K + a
    np.testing.assert_allclose(theta.reshape(K, S).T, q, rtol=1e-8, atol=1e-10)
    v = (pi * q).sum(axis=1)
    ref = spec.reference_array()[:, 0].astype(int)
    np.testing.assert_allclose(state_action_spec(spec).reference_values(theta), v[ref], rtol=1e-8)


def test_behaviour_estimate_is_the_action_frequencies_when_the_noise_vanishes():
    rows = [(0, 0, 0, 0.0, 1, False), (0, 1, 0, 0.0, 0, False), (1, 0, 1, 0.0, 0, False),
            (1, 0, 1, 0.0, 1, False), (2, 0, 0, 0.0, 0, True)]
    tr = _transitions(rows, 3)
    k = be.count_rows(tr, SPEC)
    np.testing.assert_allclose(k.sum(axis=0) * 4, [2, 2, 1, 0])  # cells s * 2 + a
    idx = np.arange(3)
    est = be.release_behaviour(lambda kern, w: kern(idx, k)[0], n_states=2, n_actions=2, m=3,
                               sigma_quantile=1e-9, sigma_counts=1e-9,
                               settings=be.BehaviourSettings(clip_quantile=1.0),
                               rng=np.random.default_rng(0))
    np.testing.assert_allclose(est.probs, [[0.5, 0.5], [1.0, 0.0]], atol=1e-6)
    weighted = be.with_estimated_propensities(tr, SPEC, est)
    np.testing.assert_allclose(weighted.behavior_prob[:4], [0.5, 1.0, 0.5, 0.5], atol=1e-6)


def test_a_state_action_map_is_refused_for_counts():
    from gpope.errors import ConfigError

    spec = dataclasses.replace(SPEC, feature_map=__import__(
        "gpope.core.features", fromlist=["x"]).ConstantIdentityFeatures(low=(0.0,), high=(1.0,)))
    with pytest.raises(ConfigError, match="tabular feature map"):
        be.count_rows(_transitions([(0, 0, 0, 0.0, 0, True)], 1), spec)


def test_the_behaviour_estimate_joins_the_runs_one_composed_event():
    # a run without logged propensities: the plan's behaviour component takes its shares of the
    # one Gaussian mechanism and dp-accounting certifies the composed event at most epsilon
    from dp_accounting.pld import PLDAccountant

    from gpope.core.evaluation import plan_release
    from tests.core.test_release_plan import Settings

    settings = Settings(estimator="untuned", policy_value_share=0.3, epsilon=1.0, delta=1e-6,
                        accountant="auto")
    rules = be.BehaviourSettings(share=0.15, quantile_share=0.02)
    plan = plan_release(settings, m=20_000, spec=SPEC, layout="dense", statistics_clip=None,
                        behaviour=rules)
    assert [c.name for c in plan.components] == ["untuned", "behaviour", "policy_value"]
    beh = {c.name: c for c in plan.components}.get("behaviour")
    assert beh.share == pytest.approx(0.17)
    logged = plan_release(settings, m=20_000, spec=SPEC, layout="dense", statistics_clip=None)
    # the estimator's share shrinks by the behaviour's: its SSP sums are noisier
    assert plan.untuned_sigmas.statistics > logged.untuned_sigmas.statistics
    pld = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    pld.compose(plan.event)
    assert plan.spent_epsilon <= 1.0 and pld.get_epsilon(1e-6) <= 1.0 + 1e-3
    # the counts' multiplier is the run's joint one over sqrt(share): 1 / sigma^2 adds up
    leaves = beh.event.events
    mu2 = sum(1.0 / e.noise_multiplier ** 2 for e in leaves)
    assert mu2 == pytest.approx(1.0 / beh.sigma ** 2)
    assert 1.0 / leaves[1].noise_multiplier ** 2 == pytest.approx(mu2 * 0.15 / 0.17)


def test_the_pair_statistics_give_the_value_statistics_under_any_propensities():
    # oracle: the stats stage's own computation from the transitions with behavior_prob set to
    # the propensities; the state-action rows (stored once, no propensity read) transformed by
    # them give the same rows, and their C diagonal the same count rows
    from gpope.core.envs.registry import get_domain, random_mdp_of
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    name = "random_mdp/4"
    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping("rm4"))
    tr = get_domain(name).generate(300, np.random.default_rng(1), None, mdp.config.max_steps)
    S, K = spec.n_features, spec.target_policy.n_actions
    probs = np.random.default_rng(2).dirichlet(np.ones(K), size=S)
    probs[0] = 1e-3  # a ratio above the weight bound: clamped like the stats stage clamps it
    est = be.BehaviourEstimate(probs=probs, clip=1.0, noise_std=0.0)
    want = statistics_vectors(*statistics_of_transitions(
        be.with_estimated_propensities(tr, spec, est), spec).dense())
    pairs = statistics_vectors(*state_action_statistics(tr, spec).dense())
    np.testing.assert_allclose(be.value_rows_from_pairs(pairs, spec, probs), want,
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(be.count_rows_from_pairs(pairs, spec), be.count_rows(tr, spec),
                               rtol=1e-12, atol=1e-15)


def test_the_pair_fit_over_a_tabular_map_gets_no_approximation_note():
    # one-hot pairs fit Q exactly: the NOTE about a map's approximation error is for other maps
    from gpope.core.features import ConstantIdentityFeatures
    from gpope.shell.evaluate.report import approximation_note

    assert approximation_note(state_action_spec(SPEC)) is None
    linear = dataclasses.replace(SPEC, feature_map=ConstantIdentityFeatures(low=(0.0,), high=(1.0,)))
    assert "approximation error" in approximation_note(state_action_spec(linear))


def test_the_pair_statistics_over_two_discrete_variables_are_the_hand_encoded_ones():
    # a ward charting lactate and bp bands (4 x 4) is the 16-state MDP hand-encoded as
    # 4 * lactate + bp: the value rows from the pairs (the route without propensities) are the
    # same to the last bit, the target policy read per named state
    import dataclasses

    from gpope.core.envs.registry import get_domain, random_mdp_of

    name = "random_mdp/4"
    mdp = random_mdp_of(name)
    coded = mdp.spec_mapping("rm4")
    grid = {"lactate": 4, "bp": 4}
    named = {f"lactate={i // 4},bp={i % 4}": row
             for i, row in enumerate(coded["target_policy"]["probs"])}
    two = dict(coded, feature_map={"kind": "tabular", "variables": grid},
               target_policy={"kind": "tabular", "variables": grid, "probs": named},
               reference_states={k: {"lactate": int(v[0]) // 4, "bp": int(v[0]) % 4}
                                 for k, v in coded["reference_states"].items()})
    spec1, spec2 = EvaluationSpec.from_mapping(coded), EvaluationSpec.from_mapping(two)
    tr = get_domain(name).generate(200, np.random.default_rng(3), None, mdp.config.max_steps)

    def charted(states: np.ndarray) -> np.ndarray:
        s = states[:, 0].astype(np.int64)
        return np.column_stack([s // 4, s % 4]).astype(np.float64)

    tr2 = dataclasses.replace(tr, state=charted(tr.state), next_state=charted(tr.next_state))
    from gpope.core.ssp import statistics_vectors

    pairs1 = statistics_vectors(*state_action_statistics(tr, spec1).dense())
    pairs2 = statistics_vectors(*state_action_statistics(tr2, spec2).dense())
    np.testing.assert_array_equal(pairs1, pairs2)
    probs = np.random.default_rng(4).dirichlet(np.ones(spec1.target_policy.n_actions), size=16)
    np.testing.assert_array_equal(be.value_rows_from_pairs(pairs2, spec2, probs),
                                  be.value_rows_from_pairs(pairs1, spec1, probs))


def test_without_logged_ratios_the_policy_terms_are_the_recorded_returns():
    # ratios 1 (no propensity is read), so g = a = the discounted recorded return written out by
    # hand, and the first-state features are the value map's one-hot, not the pair map's
    from gpope.core.trajectories.batch import bounded, policy_terms

    rows = [(0, 0, 1, 1.0, 1, False), (0, 1, 0, 1.0, 0, True), (1, 1, 0, 0.5, 0, True)]
    tr = dataclasses.replace(_transitions(rows, 2), t=np.array([0, 1, 0]),
                             behavior_prob=np.full(3, 0.01))  # never read
    qspec = state_action_spec(SPEC)
    rho, reward, _ = bounded(tr, qspec)
    terms = policy_terms(dataclasses.replace(tr, reward=reward), rho, qspec)
    np.testing.assert_allclose(terms[:, 0], [1.0 + 0.5 * 1.0, 0.5])  # gamma 0.5
    np.testing.assert_allclose(terms[:, 1], terms[:, 0])
    np.testing.assert_allclose(terms[:, 3:], [[1.0, 0.0], [0.0, 1.0]])


def test_without_logged_ratios_an_unidentified_j_target_is_the_public_range():
    from gpope.core.policy_value import spec_bounds
    from gpope.core.policy_value_direct import ESTIMANDS, public_range_rows
    from gpope.core.policy_value_release import PolicyValueInterval, public_ranges

    ranges = public_ranges(spec_bounds(SPEC))
    iv = PolicyValueInterval(value=0.3, lower=0.2, upper=0.4, lower_bound=0.25, level=0.95)
    rows = public_range_rows({"policy_value": iv, "behaviour_value": iv, "policy_contrast": iv},
                             ranges, 0.95)
    assert rows["behaviour_value"] is iv
    # rewards in [0, 1], gamma 0.5, horizon 4: J(target) in [0, 1 + 0.5 + 0.25 + 0.125]
    assert (rows["policy_value"].lower, rows["policy_value"].upper) == (0.0, 1.875)
    assert rows["policy_value"].estimand == ESTIMANDS["public_range"]
    lo, hi = rows["policy_contrast"].lower, rows["policy_contrast"].upper
    assert (lo, hi) == tuple(ranges["policy_contrast"]) and lo < 0 < hi

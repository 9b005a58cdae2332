"""J(target) by the direct method: the first-state release, its interval, and the estimator's
functional interval. Oracles: exact means, an exact Bellman solve, a known categorical law."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import numpy as np
import pytest

from gpope.core.envs.registry import get_domain, random_mdp_of
from gpope.core.features import TabularFeatures
from gpope.core.policy_value_direct import (
    direct_interval,
    first_state_event,
    first_state_features,
    functional_level,
    one_hot_map,
    release_first_state,
    split_first_state,
)
from gpope.core.spec import EvaluationSpec
from gpope.core.untuned.release import (
    UntunedSettings,
    plan_untuned,
    release_untuned_rows,
    value_range,
)


def test_exact_first_state_release_is_the_mean_and_second_moment():
    rng = np.random.default_rng(0)
    phi = rng.uniform(-1.0, 1.0, (500, 3)) / math.sqrt(3.0)
    rel = release_first_state(phi, norm_bound=1.0, sigma=0.0, rng=rng)
    np.testing.assert_allclose(rel.mean, phi.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(rel.second, phi.T @ phi / 500, atol=1e-12)


def test_first_state_noise_is_the_gaussian_mechanism_at_sigma():
    """std = sigma x sensitivity sqrt 2 on the sums; the event is GaussianDpEvent(sigma)."""
    phi = np.eye(4)[np.arange(200) % 4]
    draws = np.array([release_first_state(phi, norm_bound=1.0, sigma=3.0,
                                          rng=np.random.default_rng(s)).mean for s in range(2000)])
    assert np.std(draws * 200, axis=0) == pytest.approx([3.0 * math.sqrt(2.0)] * 4, rel=0.06)
    assert first_state_event(3.0) == dp_accounting.GaussianDpEvent(3.0)
    rest, fs = split_first_state(2.0, 0.1)
    assert 1 / rest**2 + 1 / fs**2 == pytest.approx(1 / 2.0**2)


def test_one_hot_first_states_release_only_the_mean_at_sensitivity_1():
    """A one-hot map's z z^T is diag(z): the release is the sums of z alone, whose L2 sensitivity
    is 1 (one patient's row has norm 1), so the same Gaussian event at sigma carries noise std
    sigma, not sigma sqrt 2; the second moment is the mean's diagonal."""
    phi = np.eye(4)[np.arange(200) % 4]
    assert one_hot_map(TabularFeatures(n_states=4))
    exact = release_first_state(phi, norm_bound=1.0, sigma=0.0, rng=np.random.default_rng(0),
                                one_hot=True)
    np.testing.assert_allclose(exact.second, phi.T @ phi / 200, atol=1e-12)
    # neighbours (one patient added) move the released sums by at most 1 in L2
    for row in np.eye(4):
        more = release_first_state(np.vstack([phi, row]), norm_bound=1.0, sigma=0.0,
                                   rng=np.random.default_rng(0), one_hot=True)
        assert np.linalg.norm(more.mean * 201 - exact.mean * 200) <= 1.0 + 1e-9
    draws = np.array([release_first_state(phi, norm_bound=1.0, sigma=3.0, one_hot=True,
                                          rng=np.random.default_rng(s)).mean for s in range(2000)])
    assert np.std(draws * 200, axis=0) == pytest.approx([3.0] * 4, rel=0.06)
    noisy = release_first_state(phi, norm_bound=1.0, sigma=3.0, rng=np.random.default_rng(1),
                                one_hot=True)
    np.testing.assert_allclose(noisy.second, np.diag(noisy.mean), atol=1e-15)


@pytest.mark.parametrize("one_hot", [False, True])
def test_direct_interval_covers_a_known_first_state_law(one_hot):
    """theta known exactly (functional interval a point): what remains is the first states'
    sampling and the release's noise; 95% intervals cover mu0 . V in about 95% of draws."""
    p = np.array([0.5, 0.3, 0.15, 0.05])
    v = np.array([0.2, -1.0, 3.0, 10.0])
    truth = float(p @ v)
    rng = np.random.default_rng(4)
    hits, runs = 0, 400
    for _ in range(runs):
        phi = np.eye(4)[rng.choice(4, 2000, p=p)]
        first = release_first_state(phi, norm_bound=1.0, sigma=5.0, rng=rng, one_hot=one_hot)
        exact = float(first.mean @ v)
        iv = direct_interval(v, first, (exact, exact), level=0.95)
        hits += iv.lower <= truth <= iv.upper
    assert 0.93 * runs <= hits <= runs
    assert iv.lower_bound == iv.lower and iv.lower < iv.value < iv.upper


def test_direct_j_on_a_generated_mdp_covers_the_exact_first_state_value():
    """The default's theta, the first-state release, and their interval on a tabular MDP with
    terminal states (their features unsupported, charged at the largest |value|): the interval
    holds E_s0[V(s0)] of the exact Bellman solve and is far narrower than the value range."""
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    name = "random_mdp/11"
    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping("t"))
    tr = get_domain(name).generate(8000, np.random.default_rng(2), None, mdp.config.max_steps)
    rows = statistics_of_transitions(tr, spec).to_rows()
    vec = statistics_vectors(rows["A"], rows["b"], rows["C"])
    truth = float(mdp.start @ mdp.values())
    sig = plan_untuned(m=len(vec), epsilon=10.0, delta=1e-5, settings=UntunedSettings())
    rng = np.random.default_rng(5)
    first = release_first_state(first_state_features(tr, spec.feature_map), norm_bound=1.0,
                                sigma=sig.total, rng=rng)
    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1,
                               settings=UntunedSettings(), rng=rng,
                               functionals=(first.mean[None, :], [functional_level(0.95, 0.2)]))
    vr = value_range(spec)
    assert isinstance(spec.feature_map, TabularFeatures) and not rel.supported.all()
    iv = direct_interval(rel.theta, first, (rel.functionals.lower[0], rel.functionals.upper[0]),
                         level=0.95, value_range=vr, supported=rel.supported,
                         unsupported_bound=max(abs(vr[0]), abs(vr[1])))
    assert iv.lower <= truth <= iv.upper
    assert iv.upper - iv.lower < 0.1 * (vr[1] - vr[0])
    # the estimator's first-order error held in one Gaussian with the first states' noise
    joint = direct_interval(rel.theta, first, (rel.functionals.lower[0], rel.functionals.upper[0]),
                            level=0.95, value_range=vr, supported=rel.supported,
                            unsupported_bound=max(abs(vr[0]), abs(vr[1])),
                            functional_se=float(rel.functionals.se[0]))
    assert joint.lower <= truth <= joint.upper and joint.value == iv.value
    assert joint.upper - joint.lower < iv.upper - iv.lower
    # without a public bound for the unsupported features the interval is unbounded
    open_iv = direct_interval(rel.theta, first, (rel.functionals.lower[0],
                                                 rel.functionals.upper[0]),
                              level=0.95, supported=rel.supported)
    assert math.isinf(open_iv.lower) and math.isinf(open_iv.upper)


def test_the_public_rule_picks_the_direct_method_where_finite_else_the_identified_set():
    from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
    from gpope.core.policy_value_direct import ESTIMANDS, direct_levels, pick_policy_values
    from gpope.core.policy_value_release import PolicyValueSettings, release_policy_value

    rng = np.random.default_rng(8)
    bounds = PolicyValueBounds(gamma=0.9, horizon=10, weight_clip=4.0, reward_bounds=(0.0, 1.0))
    m = 3000
    terms = PolicyValueTerms(g=rng.uniform(0, 5, m), a=rng.uniform(0, 8, m),
                             n=rng.uniform(2, 6, m))
    s = PolicyValueSettings()
    rel = release_policy_value(terms, bounds, sigma=2.0, settings=s, rng=rng)
    theta = np.array([1.0, 2.0, 3.0])
    first = release_first_state(np.eye(3)[rng.choice(3, m)], norm_bound=1.0, sigma=2.0, rng=rng)
    v = float(first.mean @ theta)
    levels = direct_levels(0.95, s.first_state_alpha)
    assert np.all(levels > 0.95) and levels[1] > levels[0]
    ends = np.array([[v - 0.05, v + 0.05], [v - 0.06, v + 0.06]])
    got = pick_policy_values(rel, s, level=0.95, theta=theta, first=first, functional_ends=ends,
                             supported=None, unsupported_bound=None)
    b = got["behaviour_value"]
    assert got["policy_value"].estimand == ESTIMANDS["direct"]
    assert got["policy_value"].lower < v - 0.05 and got["policy_value"].upper > v + 0.05
    assert got["policy_contrast"].estimand == ESTIMANDS["direct_contrast"]
    assert got["policy_contrast"].value == pytest.approx(v - b.value)
    # the joint contrast is wider than the difference of the released rows' ends
    assert got["policy_contrast"].lower < got["policy_value"].lower - b.upper
    assert b == dataclasses.replace(rel.intervals_with(0.95, s)["behaviour_value"],
                                    estimand=ESTIMANDS["behaviour"])
    fallback = pick_policy_values(rel, s, level=0.95, theta=theta, first=first,
                                  functional_ends=np.array([[-np.inf, np.inf]] * 2),
                                  supported=None, unsupported_bound=None)
    is_iv = rel.intervals_with(1.0 - 0.2 * 0.05, s)["policy_value"]
    assert fallback["policy_value"].estimand == ESTIMANDS["identified_set"]
    assert (fallback["policy_value"].lower, fallback["policy_value"].upper) == (is_iv.lower,
                                                                                is_iv.upper)


def test_a_v_row_names_the_fixed_point_its_feature_map_gives():
    # tabular: the fixed point is the value itself (a state-action route too, by its value map);
    # any other map: the features' fixed point, without the map's approximation error
    from gpope.core.policy_value_direct import value_estimand
    from gpope.core.state_action import state_action_spec

    def spec(feature_map):
        return EvaluationSpec.from_mapping({
            "name": "t", "gamma": 0.9, "length_scale": 5, "feature_map": feature_map,
            "target_policy": {"kind": "uniform", "n_actions": 2},
            "reference_states": {"a": [0.0, 0.0] if feature_map["kind"] == "fourier" else [0]}})

    tabular = spec({"kind": "tabular", "n_states": 3})
    fourier = spec({"kind": "fourier", "order": 1, "low": [0.0, 0.0], "high": [1.0, 1.0]})
    for s in (tabular, state_action_spec(tabular)):
        assert value_estimand(s.feature_map).startswith("tabular fixed point: the target's value")
    got = value_estimand(fourier.feature_map)
    assert got.startswith("LSTD fixed point of the spec's features")
    assert "does not cover the feature map's approximation error" in got


def test_the_joint_contrast_signs_a_better_target_and_never_calls_a_worse_one_better():
    """The ward's shape at m = 20,000 and the noise of epsilon 1: returns in [-1, 1] against a
    public return range of 15.7, a one-hot first-state law with two terminal features nobody
    starts in (unsupported, charged at the value bound 20), and an estimator whose error on the
    first states' mean is Gaussian with standard error 0.015 (a normal functional interval).
    Oracle: the closed-form contrast p . v - E[g]. A target 0.17 better is signed (lower end > 0)
    in >= 80% of releases (27 of 30; 22 with the functional interval entering whole), one 0.17
    worse never is, and every interval covers."""
    from scipy.stats import norm

    from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
    from gpope.core.policy_value_direct import ESTIMANDS, direct_levels, pick_policy_values
    from gpope.core.policy_value_release import PolicyValueSettings, release_policy_value

    m, s = 20_000, PolicyValueSettings()
    bounds = PolicyValueBounds(gamma=0.95, horizon=30, weight_clip=3.0, reward_bounds=(-1.0, 1.0))
    p = np.array([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    supported = p > 0
    g_law = (np.array([-0.7, 0.1, 0.9]), np.array([0.3, 0.3, 0.4]))  # E[g] = 0.18
    se = 0.015
    for shift in (0.17, -0.17):
        v = np.array([-0.5, 0.1, 0.6, 1.2, 0.0, 0.0])
        v[supported] += 0.18 + shift - float(p @ v)
        truth = float(p @ v) - 0.18
        signed = covered = 0
        for r in range(30):
            rng = np.random.default_rng([r, int(shift > 0)])
            g = rng.choice(g_law[0], m, p=g_law[1])
            terms = PolicyValueTerms(g=g, a=g, n=np.full(m, bounds.discount_mass))
            rel = release_policy_value(terms, bounds, sigma=8.0, settings=s, rng=rng)
            first = release_first_state(np.eye(6)[rng.choice(6, m, p=p)], norm_bound=1.0,
                                        sigma=12.5, rng=rng, one_hot=True)
            theta = v + rng.normal(0.0, se) * supported  # mu^ . theta^ off by ~N(0, se^2)
            mv = float(first.mean @ theta)
            half = norm.ppf(0.5 + direct_levels(0.95, s.first_state_alpha) / 2.0) * se
            got = pick_policy_values(rel, s, level=0.95, theta=theta, first=first,
                                     functional_ends=np.stack([mv - half, mv + half], axis=1),
                                     supported=supported, unsupported_bound=20.0,
                                     functional_se=np.array([se, se]))
            c = got["policy_contrast"]
            assert c.estimand == ESTIMANDS["direct_contrast"]
            covered += c.lower <= truth <= c.upper
            signed += c.lower > 0.0
            assert shift > 0 or c.lower <= 0.0  # a worse target is never called better
        assert covered == 30
        assert signed >= (24 if shift > 0 else 0)

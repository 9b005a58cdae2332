"""Policy value terms and release: closed forms, dp-accounting, an exact tabular MDP."""

from __future__ import annotations

import dataclasses
import math
import re

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.envs import chain
from gpope.core.mechanisms.quantile import LogGrid
from gpope.core.policy_value import (
    PolicyValueBounds,
    PolicyValueTerms,
    doubly_robust_terms,
    per_decision_weights,
    policy_value_terms,
)
from gpope.core.policy_value_clamp import choose_clip
from gpope.core.policy_value_release import (
    QUANTITIES,
    PolicyValueSettings,
    exact_intervals,
    policy_value_event,
    policy_value_sigma,
    public_ranges,
    release_policy_value,
)
from gpope.core.trajectories.transitions import Transitions
from gpope.errors import ConfigError


def _transitions(lengths, rewards, probs, terminal_last=True):
    m = len(lengths)
    idx = np.repeat(np.arange(m), lengths)
    t = np.concatenate([np.arange(n) for n in lengths])
    last = np.cumsum(lengths) - 1
    term = np.zeros(len(idx), dtype=bool)
    if terminal_last:
        term[last] = True
    z = np.zeros((len(idx), 1))
    return Transitions(traj_index=idx, t=t, state=z, action=np.zeros(len(idx), dtype=np.int64),
                       reward=np.asarray(rewards, dtype=np.float64), next_state=z, terminal=term,
                       truncated=~term & np.isin(np.arange(len(idx)), last),
                       behavior_prob=np.asarray(probs, dtype=np.float64), n_trajectories=m)


def test_terms_by_hand():
    # two patients: ratios (2, 3) and (0.5,); gamma 0.5, horizon 3, C = 4
    tr = _transitions([2, 1], [1.0, 2.0, 4.0], [0.5, 0.5, 1.0])
    b = PolicyValueBounds(gamma=0.5, horizon=3, weight_clip=4.0, reward_bounds=(-10.0, 10.0))
    ratios = np.array([2.0, 3.0, 0.5])
    np.testing.assert_allclose(per_decision_weights(tr, ratios, 4.0), [2.0, 4.0, 0.5])
    terms = policy_value_terms(tr, ratios, b)
    np.testing.assert_allclose(terms.g, [1.0 + 0.5 * 2.0, 4.0])
    np.testing.assert_allclose(terms.a, [2.0 + 0.5 * 4.0 * 2.0, 0.5 * 4.0])
    # n: the weights frozen after the record's end, up to t = H - 1 = 2
    np.testing.assert_allclose(terms.n, [2.0 + 0.5 * 4.0 + 0.25 * 4.0, 0.5 * (1 + 0.5 + 0.25)])
    assert b.discount_mass == pytest.approx(1.75)


def test_a_zero_ratio_stays_zero_and_rewards_are_clamped():
    tr = _transitions([3], [100.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    b = PolicyValueBounds(gamma=1.0, horizon=3, weight_clip=5.0, reward_bounds=(0.0, 2.0))
    terms = policy_value_terms(tr, np.array([1.0, 0.0, 3.0]), b)
    assert terms.g[0] == pytest.approx(4.0)   # 100 clamped to 2
    assert terms.a[0] == pytest.approx(2.0)   # rho = 1, 0, 0
    assert terms.n[0] == pytest.approx(1.0)


def test_decisions_beyond_the_horizon_are_not_counted():
    tr = _transitions([3], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0])
    b = PolicyValueBounds(gamma=0.5, horizon=2, weight_clip=1.0, reward_bounds=(0.0, 1.0))
    terms = policy_value_terms(tr, np.ones(3), b)
    assert terms.g[0] == pytest.approx(1.5) and terms.n[0] == pytest.approx(b.discount_mass)


def test_chain_returns_match_the_closed_form():
    cfg = chain.ChainConfig()
    rng = np.random.default_rng(5)
    tr = chain.generate(40_000, rng, cfg)
    b = PolicyValueBounds(gamma=cfg.gamma, horizon=cfg.max_steps, weight_clip=1.0,
                          reward_bounds=(0.0, 1.0), on_policy=True)
    terms = policy_value_terms(tr, np.ones(len(tr.t)), b)
    truth = float(np.mean(chain.exact_values(cfg)[:39]))
    se = terms.g.std() / math.sqrt(terms.m)
    assert abs(terms.g.mean() - truth) < 4 * se
    np.testing.assert_allclose(terms.a, terms.g)
    np.testing.assert_allclose(terms.n, b.discount_mass)


# --- a small tabular MDP with exact values ---------------------------------------------------

def _mdp(seed=3, n=4, k=2, stop=0.2, horizon=6):
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.ones(n), size=(n, k))
    R = rng.random((n, k))
    mu = rng.dirichlet(np.full(k, 3.0), size=n)
    pi = rng.dirichlet(np.full(k, 1.0), size=n)
    return P, R, mu, pi, stop, horizon


def _exact(P, R, policy, stop, horizon, gamma):
    n = R.shape[0]
    d, total = np.full(n, 1.0 / n), 0.0
    for t in range(horizon):
        total += gamma ** t * float(d @ (policy * R).sum(axis=1))
        d = (1 - stop) * np.einsum("s,sa,sat->t", d, policy, P)
    return total


def _simulate(P, R, mu, pi, stop, horizon, m, rng):
    n, k = R.shape
    rows = []
    for i in range(m):
        s = rng.integers(n)
        for t in range(horizon):
            a = rng.choice(k, p=mu[s])
            ns = rng.choice(n, p=P[s, a])
            end = rng.random() < stop
            rows.append((i, t, s, a, R[s, a], mu[s, a], end, ns))
            s = ns
            if end:
                break
    c = [np.array(col) for col in zip(*rows, strict=True)]
    tr = Transitions(traj_index=c[0], t=c[1], state=c[2][:, None].astype(float),
                     action=c[3], reward=c[4], next_state=c[7][:, None].astype(float),
                     terminal=c[6].astype(bool), truncated=~c[6].astype(bool) & (c[1] == horizon - 1),
                     behavior_prob=c[5], n_trajectories=m)
    return tr, pi[c[2], c[3]] / c[5]


def test_unclipped_importance_sampling_is_unbiased_and_the_set_holds_the_truth():
    P, R, mu, pi, stop, H = _mdp()
    gamma = 0.9
    truth = _exact(P, R, pi, stop, H, gamma)
    rng = np.random.default_rng(11)
    tr, ratios = _simulate(P, R, mu, pi, stop, H, 6000, rng)
    wmax = float(np.max(pi / mu)) ** H  # C above every product: nothing clipped
    terms = policy_value_terms(tr, ratios, PolicyValueBounds(gamma=gamma, horizon=H,
                                                             weight_clip=wmax, reward_bounds=(0, 1)))
    se = terms.a.std() / math.sqrt(terms.m)
    assert abs(terms.a.mean() - truth) < 4 * se
    # with a binding clip the identified set (non-private ends, large m) still holds the truth
    b = PolicyValueBounds(gamma=gamma, horizon=H, weight_clip=1.5, reward_bounds=(0.0, 1.0))
    iv = exact_intervals(policy_value_terms(tr, ratios, b), b, 0.95)["policy_value"]
    assert iv.lower <= truth <= iv.upper
    # informative: narrower than the trivial range [0, S] of a discounted sum of rewards in [0, 1]
    assert iv.lower <= iv.value <= iv.upper and iv.upper - iv.lower < 0.6 * b.discount_mass


def test_doubly_robust_on_policy_telescopes_to_the_return():
    tr = _transitions([3, 2], [1.0, 0.0, 2.0, 1.0, 1.0], [1.0] * 5, terminal_last=False)
    b = PolicyValueBounds(gamma=0.8, horizon=4, weight_clip=1.0, reward_bounds=(0.0, 2.0),
                          value_range=(0.0, 10.0))
    v = np.array([0.3, 1.1, 0.7, 0.2, 0.9])
    nv = np.array([1.1, 0.7, 5.0, 0.9, 5.0])  # V of the next row; the last is ignored (end)
    dr = doubly_robust_terms(tr, np.ones(5), b, v, nv)
    np.testing.assert_allclose(dr.v0 + dr.a, policy_value_terms(tr, np.ones(5), b).g)
    np.testing.assert_allclose(dr.v0, [0.3, 0.2])
    d_lo, d_hi = b.target_range
    assert d_lo == -10.0 and d_hi == 2.0 + 0.8 * 10.0
    # a record longer than the cap H = 2: the estimand (and the telescoping) stops at H
    b2 = PolicyValueBounds(gamma=0.8, horizon=2, weight_clip=1.0, reward_bounds=(0.0, 2.0),
                           value_range=(0.0, 10.0))
    dr2 = doubly_robust_terms(tr, np.ones(5), b2, v, nv)
    np.testing.assert_allclose(dr2.v0 + dr2.a, policy_value_terms(tr, np.ones(5), b2).g)


def test_doubly_robust_release_covers_with_the_true_value_function():
    # generated MDP, V = the target's exact value (the best control variate): the doubly robust
    # identified set holds J(target) and is wider than importance sampling's wherever weights
    # are clipped, by the TD error's range
    from gpope.core.envs.random_mdp import RandomMDPConfig, random_mdp

    mdp = random_mdp(RandomMDPConfig.drawn(0))
    c = mdp.config
    S = mdp.n_states
    p_pi = np.einsum("sa,sat->st", mdp.target, mdp.P[:, :, :S])
    v_pi = np.linalg.solve(np.eye(S) - c.gamma * p_pi, np.einsum("sa,sa->s", mdp.target,
                                                                     mdp.reward_mean))
    b_is = PolicyValueBounds(gamma=c.gamma, horizon=c.max_steps, weight_clip=c.ratio_bound,
                             reward_bounds=(0.0, mdp.r_max))
    b_dr = PolicyValueBounds(gamma=c.gamma, horizon=c.max_steps, weight_clip=c.ratio_bound,
                             reward_bounds=(0.0, mdp.r_max),
                             value_range=(0.0, b_is.discount_mass * mdp.r_max))
    tr = mdp.generate(3000, np.random.default_rng(4))
    s, a = tr.state[:, 0].astype(np.int64), tr.action
    ratios = mdp.target[s, a] / mdp.behaviour[s, a]
    v_ext = np.concatenate([v_pi, np.zeros(c.n_terminal)])  # terminal states pay nothing more
    dr = doubly_robust_terms(tr, ratios, b_dr, v_pi[s], v_ext[tr.next_state[:, 0].astype(int)])
    iv_dr = exact_intervals(dr, b_dr, 0.95)["policy_value"]
    iv_is = exact_intervals(policy_value_terms(tr, ratios, b_is), b_is, 0.95)["policy_value"]
    sig = policy_value_sigma(m=3000, epsilon=1.0, delta=1e-5, settings=PolicyValueSettings())
    priv = release_policy_value(dr, b_dr, sigma=sig, settings=PolicyValueSettings(),
                                rng=np.random.default_rng(5)).intervals(0.95)["policy_value"]
    assert iv_dr.upper - iv_dr.lower > iv_is.upper - iv_is.lower
    d, truth = mdp.start.copy(), 0.0  # the recorded-horizon estimand, by forward recursion
    for t in range(c.max_steps):
        truth += c.gamma ** t * float(d @ np.einsum("sa,sa->s", mdp.target, mdp.reward_mean))
        d = d @ p_pi
    assert iv_dr.lower <= truth <= iv_dr.upper and priv.lower <= truth <= priv.upper
    assert math.isfinite(priv.lower) and math.isfinite(priv.upper)


# --- the release -------------------------------------------------------------------------------

def test_sub_releases_compose_to_one_gaussian():
    s = PolicyValueSettings(clip_share=0.2, moments_share=0.3)
    a, b, c = s.sub_sigmas(2.0)
    assert 1 / a**2 + 1 / b**2 + 1 / c**2 == pytest.approx(1 / 4.0)


def _gaussian_delta(eps: float, mu: float) -> float:
    """Exact delta(eps) of the Gaussian mechanism with sensitivity / noise std = mu (Balle and
    Wang 2018, Thm. 8): an independent closed form."""
    from scipy.stats import norm

    return float(norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu))


@pytest.mark.parametrize("relation", ["add_or_remove_one", "replace_one"])
def test_sigma_meets_the_share_by_a_closed_form(relation):
    settings_ = PolicyValueSettings(share=0.25)
    sigma = policy_value_sigma(m=10_000, epsilon=2.0, delta=1e-5, settings=settings_,
                               relation=relation)
    # std / sensitivity: sigma under add/remove, sigma / 2 under replace-one (sensitivity doubles)
    factor = 2.0 if relation == "replace_one" else 1.0
    mu = factor / sigma
    assert _gaussian_delta(0.5, mu) <= 0.25e-5 * 1.001
    assert _gaussian_delta(0.45, mu) > 0.25e-5  # tight: not wastefully noisy
    assert policy_value_event(sigma, relation) == dp_accounting.GaussianDpEvent(sigma / factor)


def test_choose_clip_reads_the_top_nonempty_bin():
    grid = LogGrid(lo=1e-3, hi=100.0, bins_per_decade=1)
    values = np.array([0.5, 0.7, 2.0])
    counts = np.bincount(np.searchsorted(grid.edges(), values, side="right"),
                         minlength=grid.n_bins).astype(float)
    assert choose_clip(counts, grid, noise_std=0.1, z=2.0) == pytest.approx(10.0)
    assert choose_clip(counts, grid, noise_std=10.0, z=2.0, max_count=5.0) == pytest.approx(100.0)


def _chain_terms(m, rng):
    cfg = chain.ChainConfig()
    tr = chain.generate(m, rng, cfg)
    b = PolicyValueBounds(gamma=cfg.gamma, horizon=cfg.max_steps, weight_clip=1.0,
                          reward_bounds=(0.0, 1.0), on_policy=True)
    return policy_value_terms(tr, np.ones(len(tr.t)), b), b


def test_noise_has_the_public_scale():
    rng = np.random.default_rng(2)
    terms, b = _chain_terms(500, rng)
    clips = (1.5, 1.5, b.discount_mass, 0.0)
    sig = 3.0
    means = np.array([release_policy_value(terms, b, sigma=sig, settings=PolicyValueSettings(),
                                           rng=rng, clips=clips).means[0] for _ in range(2000)])
    rel = release_policy_value(terms, b, sigma=sig, settings=PolicyValueSettings(), rng=rng,
                               clips=clips)
    # sensitivity 1 (one component on-policy), half-range 0.75, means' share 0.6
    expected = 0.75 * sig / math.sqrt(0.6) / 500
    assert rel.noise_means[0] == pytest.approx(expected)
    assert means.std() == pytest.approx(expected, rel=0.06)


def test_weighted_second_moments_are_the_gaussian_mechanism_at_their_multiplier():
    """The (g, g) second moment weighted by W = behaviour_weight: no patient's weighted moment
    vector is longer than the stated L2 sensitivity sqrt(W^2 - 1 + k^2) (brute force over the
    cube's corners and random points; a corner attains it), and entry e's noise std is s_mom
    times it over w_e: the weighted vector plus N(0, (s_mom D)^2 I), GaussianDpEvent(s_mom) by
    dp-accounting's definition. On-policy (g alone) the entry keeps std s_mom."""
    from itertools import product

    from gpope.core.policy_value_release import add_sum_noise, moment_weights, sum_noise_stds
    from gpope.core.ssp import moment_vectors

    s = PolicyValueSettings()
    for active in (np.array([True, True, True]), np.array([False, True, True])):
        w, sens = moment_weights(active, s)
        k = int(active.sum())
        z = np.vstack([np.array(list(product([-1.0, 1.0], repeat=3))),
                       np.random.default_rng(0).uniform(-1.0, 1.0, (5000, 3))]) * active
        norms = np.linalg.norm(moment_vectors(z) * w, axis=1)
        assert norms.max() == pytest.approx(sens) and norms.max() <= sens * (1 + 1e-12)
        assert sens == pytest.approx(math.sqrt((s.behaviour_weight ** 2 if active[0] else 1) - 1
                                               + k * k))
        _, mom_std = sum_noise_stds(active, s, s_mean=1.0, s_mom=2.0)
        np.testing.assert_allclose(mom_std * w, np.where(w > 0, 2.0 * sens, 0.0))
        draws = add_sum_noise(np.zeros(3), np.zeros(6), np.zeros(3), mom_std, active,
                              rng=np.random.default_rng(1), size=4000)[1]
        np.testing.assert_allclose(draws.std(axis=0), mom_std, rtol=0.06)
    assert sum_noise_stds(np.array([True, False, False]), s, s_mean=1.0, s_mom=2.0)[1][0] == 2.0
    assert policy_value_event(2.0) == dp_accounting.GaussianDpEvent(2.0)


def test_secure_noise_has_the_public_scale_and_draws_nothing_from_rng():
    # --secure-noise: every noise term comes from the OS-CSPRNG discrete Gaussian (the seeded
    # generator is never touched), at the accounted scale raised only by the grid's rounding.
    rng = np.random.default_rng(2)
    terms, b = _chain_terms(500, rng)
    clips = (1.5, 1.5, b.discount_mass, 0.0)
    sig = 3.0
    state = rng.bit_generator.state
    rels = [release_policy_value(terms, b, sigma=sig, settings=PolicyValueSettings(), rng=rng,
                                 clips=clips, secure_noise=True) for _ in range(1000)]
    assert rng.bit_generator.state == state
    expected = 0.75 * sig / math.sqrt(0.6) / 500
    # the default grid (noise std * 2^-12) raises the std by 1 + (std / sensitivity) sqrt(k) 2^-12
    assert rels[0].noise_means[0] == pytest.approx(expected, rel=2e-3)
    assert rels[0].noise_means[0] >= expected
    means = np.array([r.means[0] for r in rels])
    assert means.std() == pytest.approx(expected, rel=0.07)
    # off-policy, with the private clips: three components, finite ordered intervals
    m = 400
    g = rng.uniform(0, 5, m)
    off = PolicyValueTerms(g=g, a=g * rng.uniform(0, 2, m), n=rng.uniform(0, 9, m))
    bo = PolicyValueBounds(gamma=0.9, horizon=40, weight_clip=2.0, reward_bounds=(0.0, 1.0))
    iv = release_policy_value(off, bo, sigma=2.0, settings=PolicyValueSettings(), rng=rng,
                              secure_noise=True).intervals(0.95)
    assert all(math.isfinite(x) and q.lower <= q.upper
               for q in iv.values() for x in (q.lower, q.upper))


def test_chain_coverage_and_finite_intervals_at_m_2000():
    rng = np.random.default_rng(8)
    truth = float(np.mean(chain.exact_values()[:39]))
    sig = policy_value_sigma(m=2000, epsilon=1.0, delta=1e-5, settings=PolicyValueSettings())
    hits = 0
    for _ in range(30):
        terms, b = _chain_terms(2000, rng)
        iv = release_policy_value(terms, b, sigma=sig, settings=PolicyValueSettings(),
                                  rng=rng).intervals(0.95)
        assert set(iv) == set(QUANTITIES)
        assert all(math.isfinite(x) for q in iv.values() for x in (q.lower, q.upper))
        hits += iv["policy_value"].lower <= truth <= iv["policy_value"].upper
        assert iv["policy_contrast"].value == 0.0
    assert hits >= 27


@settings(max_examples=30, deadline=None)
@given(m=st.integers(2, 40), seed=st.integers(0, 10_000), sigma=st.sampled_from([0.0, 0.5, 5.0]),
       on_policy=st.booleans())
def test_intervals_are_ordered_for_any_terms(m, seed, sigma, on_policy):
    rng = np.random.default_rng(seed)
    b = PolicyValueBounds(gamma=0.9, horizon=5, weight_clip=3.0, reward_bounds=(-1.0, 2.0),
                          on_policy=on_policy)
    s = b.discount_mass
    g = rng.uniform(-s, 2 * s, m)
    terms = PolicyValueTerms(g=g, a=g if on_policy else rng.uniform(-3 * s, 6 * s, m),
                             n=np.full(m, s) if on_policy else rng.uniform(0, 3 * s, m))
    rel = release_policy_value(terms, b, sigma=sigma, settings=PolicyValueSettings(), rng=rng)
    for method in ("bernstein", "normal"):
        for name, q in rel.intervals(0.9, method).items():
            assert q.lower <= q.upper
            assert q.lower <= q.lower_bound
            assert all(math.isfinite(x) for x in (q.value, q.lower, q.upper, q.lower_bound))
            # every released number lies in the quantity's public range
            lo, hi = public_ranges(b)[name]
            assert lo <= q.lower and q.upper <= hi and lo <= q.value <= hi, (name, q)


def test_public_ranges_follow_from_the_reward_bounds_gamma_and_horizon():
    # J of any policy: at least one decision and at most H, rewards in [lo, hi]
    s = (1 - 0.9 ** 5) / 0.1
    pos = PolicyValueBounds(gamma=0.9, horizon=5, weight_clip=3.0, reward_bounds=(0.5, 2.0))
    assert pos.return_range == pytest.approx((0.5, 2.0 * s))
    mixed = PolicyValueBounds(gamma=0.9, horizon=5, weight_clip=3.0, reward_bounds=(-1.0, 2.0))
    assert mixed.return_range == pytest.approx((-s, 2.0 * s))
    neg = PolicyValueBounds(gamma=0.0, horizon=5, weight_clip=3.0, reward_bounds=(-3.0, -1.0))
    assert neg.return_range == (-3.0, -1.0)
    ranges = public_ranges(mixed)
    assert ranges["policy_value"] == ranges["behaviour_value"] == mixed.return_range
    assert ranges["policy_contrast"] == pytest.approx((-3 * s, 3 * s))


def test_a_noisy_release_is_cut_at_the_public_range_and_still_covers():
    # 30 patients at a large noise: the raw ends leave [0, S]; the released ones stop at it, and
    # a truth the raw interval covered is covered still (post-processing of public bounds)
    rng = np.random.default_rng(4)
    b = PolicyValueBounds(gamma=0.9, horizon=10, weight_clip=2.0, reward_bounds=(0.0, 1.0))
    s = b.discount_mass
    g = rng.uniform(0, s, 30)
    terms = PolicyValueTerms(g=g, a=g * rng.uniform(0, 2, 30), n=rng.uniform(0, 2 * s, 30))
    iv = release_policy_value(terms, b, sigma=2.0, settings=PolicyValueSettings(),
                              rng=rng).intervals(0.95)
    assert iv["policy_value"].lower == 0.0 and iv["policy_value"].upper == pytest.approx(s)
    assert iv["policy_contrast"].lower >= -s and iv["policy_contrast"].upper <= s
    truth = float(np.mean(g))  # J(behaviour) here: inside [0, S]
    assert iv["behaviour_value"].lower <= truth <= iv["behaviour_value"].upper


def test_a_spec_may_not_name_a_reference_state_after_a_released_scalar():
    from gpope.core.spec import EvaluationSpec

    base = {"name": "x", "gamma": 0.9, "length_scale": 10,
            "feature_map": {"kind": "tabular", "n_states": 3},
            "target_policy": {"kind": "uniform", "n_actions": 1}}
    EvaluationSpec.from_mapping({**base, "reference_states": {"s0": [0]}})
    with pytest.raises(ConfigError, match="reserved"):
        EvaluationSpec.from_mapping({**base, "reference_states": {"policy_value": [0]}})


def test_observed_weight_is_the_released_weight_share_and_its_note():
    # J(target)'s observed weight is the release's mean weight mass over S (post-processing),
    # None on-policy; below one half the CLI and the demo say why the interval is wide
    from gpope.shell.evaluate.policy_value import observed_weight_note

    rng = np.random.default_rng(3)
    m = 500
    g = rng.uniform(0, 5, m)
    off = PolicyValueTerms(g=g, a=0.2 * g, n=rng.uniform(0, 2, m))
    bo = PolicyValueBounds(gamma=0.9, horizon=40, weight_clip=2.0, reward_bounds=(0.0, 1.0))
    rel = release_policy_value(off, bo, sigma=0.0, settings=PolicyValueSettings(), rng=rng)
    iv = rel.intervals(0.95)
    assert iv["policy_value"].observed_weight == pytest.approx(rel.means[2] / bo.discount_mass)
    assert iv["behaviour_value"].observed_weight is None
    assert "only 10%" in observed_weight_note(0.1) and observed_weight_note(0.7) is None
    terms, b = _chain_terms(50, rng)
    on = release_policy_value(terms, b, sigma=0.0, settings=PolicyValueSettings(), rng=rng)
    assert on.intervals(0.95)["policy_value"].observed_weight is None


# --- the settings come from the configuration (conf evaluation.policy_value) -----------------

def _conf(**evaluation):
    from gpope.config import GpopeConfig, from_mapping

    return from_mapping(GpopeConfig, {"evaluation": evaluation}).evaluation


def test_conf_block_reaches_the_release_through_the_resolver():
    from pathlib import Path

    from gpope.config import load_yaml
    from gpope.core.evaluation.settings import SettingsLayer, resolve_settings
    from gpope.core.spec import EvaluationSpec

    conf = _conf(policy_value_share=0.2,
                 policy_value={"method": "normal", "bins_per_decade": 8, "noise_share": 0.3})
    spec_file = Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml"
    spec = EvaluationSpec.from_mapping(load_yaml(spec_file))
    run, info = resolve_settings(conf, spec, SettingsLayer.of(epsilon=1.0, delta=1e-7), m=5000)
    given = run.policy_value_settings()
    assert given == PolicyValueSettings(share=0.2, method="normal", bins_per_decade=8,
                                        noise_share=0.3)
    assert info["source"]["policy_value"] == "conf"
    terms, b = _chain_terms(400, np.random.default_rng(6))

    def released(s):
        rel = release_policy_value(terms, b, sigma=2.0, settings=s, rng=np.random.default_rng(7))
        return rel, rel.intervals_with(0.95, s)["policy_value"]

    rel, iv = released(given)
    rel0, iv0 = released(_conf().policy_value_settings())  # the packaged conf: the defaults
    assert _conf().policy_value_settings() == PolicyValueSettings()
    assert iv0 == rel0.intervals(0.95)["policy_value"]  # what runs released before the block
    # bins_per_decade sets the clip grid: 8 x 6 decades + 1 edges the target's clips can take
    # under the conf's grid, 4 x 6 + 1 under the default's (the sampling bound's union)
    assert (rel.choices[1], rel0.choices[1]) == (8 * 6 + 1, 4 * 6 + 1)
    # method normal: the CLT interval sqrt(V / m + noise var) * z, narrower than Bernstein's
    assert iv.upper - iv.lower < rel.intervals(0.95)["policy_value"].upper - \
        rel.intervals(0.95)["policy_value"].lower
    assert iv == rel.intervals(0.95, "normal", noise_share=0.3)["policy_value"]


@pytest.mark.parametrize(("block", "key"), [
    ({"method": "clt"}, "config.evaluation.policy_value.method"),
    ({"bins_per_decade": 0}, "bins_per_decade"),
    ({"clip_share": 0.6, "moments_share": 0.5}, "clip_share + moments_share"),
    ({"share": 0.2}, "policy_value_share"),
    ({"spend": 0.2}, "'spend' in config.evaluation.policy_value"),
])
def test_conf_block_refuses_bad_values_naming_the_key(block, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        _conf(policy_value=block)


def test_audit_uses_the_conf_settings():
    from gpope.core.audit.policy_value import PolicyValueAuditConfig, run_policy_value_audit

    s = _conf(policy_value_share=0.2, policy_value={"bins_per_decade": 8}).policy_value_settings()
    res = run_policy_value_audit(PolicyValueAuditConfig(epsilon=4.0, runs=2000), 1, settings=s)
    assert res.epsilon_claimed == pytest.approx(0.2 * 4.0)
    assert res.config["policy_value"] == dataclasses.asdict(s)

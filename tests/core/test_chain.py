"""Chain: closed forms against linear solves and brute-force enumeration; generator statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.envs import chain
from gpope.core.envs.chain import ChainConfig
from gpope.errors import ConfigError


def expected_visits(cfg: ChainConfig) -> np.ndarray:
    """(n_states,) expected decision steps in each state per episode (cap included), from the
    exact Markov model."""
    P, _, mu = chain.exact_model(cfg)
    return chain._alive_distributions(P, mu, cfg.terminal_state, cfg.max_steps).sum(axis=0)


def truncation_probability(cfg: ChainConfig) -> float:
    """Probability that an episode is cut by ``max_steps``: fewer than k moves (k needed from the
    start) in max_steps Bernoulli(1 - p_stay) trials, averaged over the uniform start."""
    from scipy.stats import binom

    k = np.arange(1, cfg.n_states)
    return float(np.mean(binom.cdf(k - 1, cfg.max_steps, 1.0 - cfg.p_stay)))

configs = st.builds(
    ChainConfig,
    n_states=st.integers(2, 6),
    p_stay=st.floats(0.0, 0.9),
    gamma=st.floats(0.0, 1.0),
    max_steps=st.integers(1, 7),
)


def test_paper_value_at_the_last_state():
    v = chain.exact_values()
    assert v.shape == (40,)
    assert v[39] == 0.0
    assert v[38] == pytest.approx(0.5 / 0.505, rel=1e-15)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), p=st.floats(0.0, 0.95), gamma=st.floats(0.0, 1.0))
def test_closed_form_equals_linear_solve(n, p, gamma):
    cfg = ChainConfig(n_states=n, p_stay=p, gamma=gamma)
    P, r, mu = chain.exact_model(cfg)
    assert mu.sum() == pytest.approx(1.0) and mu[-1] == 0.0
    np.testing.assert_allclose(P[:-1].sum(axis=1), 1.0)
    solved = np.linalg.solve(np.eye(n) - gamma * P, r)
    np.testing.assert_allclose(chain.exact_values(cfg), solved, rtol=1e-10, atol=1e-13)


def _enumerate(cfg: ChainConfig, normalization: str, L: float | None):
    """Expected per-trajectory A, b, C and truncation probability by enumerating every path."""
    n, p, g, H = cfg.n_states, cfg.p_stay, cfg.gamma, cfg.max_steps
    eye = np.eye(n)
    A, b, C = np.zeros((n, n)), np.zeros(n), np.zeros((n, n))
    trunc = 0.0

    def walk(path: list[tuple[int, int]], s: int, prob: float) -> None:
        nonlocal A, b, C, trunc
        for s_next, q in ((s, p), (s + 1, 1.0 - p)):
            if q == 0.0:
                continue
            steps = [*path, (s, s_next)]
            done = s_next == n - 1
            if done or len(steps) == H:
                trunc += 0.0 if done else prob * q
                w = 1.0 / len(steps) if normalization == "trajectory_mean" else 1.0 / L
                for k, (a, c) in enumerate(steps):
                    terminal = c == n - 1
                    nphi = np.zeros(n) if terminal else eye[c]
                    A += prob * q * w * np.outer(eye[a], eye[a] - g * nphi)
                    b += prob * q * w * (1.0 if terminal else 0.0) * eye[a]
                    C += prob * q * w * np.outer(eye[a], eye[a])
                    assert k < H
            else:
                walk(steps, s_next, prob * q)

    for s0 in range(n - 1):
        walk([], s0, 1.0 / (n - 1))
    return A, b, C, trunc


@settings(max_examples=40, deadline=None)
@given(cfg=configs, normalization=st.sampled_from(["transition", "trajectory_mean"]))
def test_population_statistics_equal_brute_force_enumeration(cfg, normalization):
    L = 3.0 if normalization == "transition" else None
    A, b, C = chain.population_statistics(cfg, normalization, L)
    eA, eb, eC, trunc = _enumerate(cfg, normalization, L)
    np.testing.assert_allclose(A, eA, atol=1e-12)
    np.testing.assert_allclose(b, eb, atol=1e-12)
    np.testing.assert_allclose(C, eC, atol=1e-12)
    assert truncation_probability(cfg) == pytest.approx(trunc, abs=1e-12)


def test_transition_fixed_point_is_the_exact_value_function():
    cfg = ChainConfig()
    A, b, _ = chain.population_statistics(cfg, "transition", 1000.0, drop_terminal=True)
    assert A.shape == (39, 39)
    theta = np.linalg.solve(A, b)
    np.testing.assert_allclose(theta, chain.exact_values(cfg)[:39], rtol=0, atol=1e-12)
    # Full statistics: the absorbing coordinate is identically zero.
    A_full, b_full, C_full = chain.population_statistics(cfg, "transition", 1000.0)
    assert not A_full[39].any() and not A_full[:, 39].any() and b_full[39] == 0 and C_full[39, 39] == 0


def test_expected_visits_closed_form():
    # Uncapped: state s is visited by starts 0..s, each visit count Geometric with mean 1/(1-p).
    cfg = ChainConfig()
    s = np.arange(40)
    closed = np.where(s < 39, (s + 1) / 39 / (1 - cfg.p_stay), 0.0)
    np.testing.assert_allclose(expected_visits(cfg), closed, rtol=1e-12)
    _, _, C = chain.population_statistics(cfg, "transition", 7.0)
    np.testing.assert_allclose(np.diag(C), closed / 7.0, rtol=1e-12)


def test_generated_visit_counts_match_expected_visits():
    cfg = ChainConfig()
    m = 20_000
    tr = chain.generate(m, np.random.default_rng(11), cfg)
    visits = np.zeros((m, cfg.n_states))
    np.add.at(visits, (tr.traj_index, tr.state[:, 0].astype(int)), 1.0)
    mean, se = visits.mean(axis=0), visits.std(axis=0, ddof=1) / np.sqrt(m)
    expected = expected_visits(cfg)
    live = expected > 0
    z = np.abs(mean[live] - expected[live]) / se[live]
    assert z.max() < 5.0, z.max()
    assert visits[:, 39].sum() == 0


def test_generated_trajectory_mean_statistics_match_population():
    cfg = ChainConfig(n_states=10)
    m = 20_000
    tr = chain.generate(m, np.random.default_rng(12), cfg)
    w = 1.0 / tr.lengths[tr.traj_index]
    per_traj = np.zeros((m, cfg.n_states))
    np.add.at(per_traj, (tr.traj_index, tr.state[:, 0].astype(int)), w)  # diagonal of C_i
    _, _, C = chain.population_statistics(cfg, "trajectory_mean")
    se = per_traj.std(axis=0, ddof=1) / np.sqrt(m)
    live = np.diag(C) > 0
    z = np.abs(per_traj.mean(axis=0) - np.diag(C))[live] / se[live]
    assert z.max() < 5.0, z.max()


def test_generated_transitions_follow_the_dynamics():
    cfg = ChainConfig(n_states=12, p_stay=0.3)
    tr = chain.generate(500, np.random.default_rng(3), cfg)
    s, ns = tr.state[:, 0], tr.next_state[:, 0]
    assert tr.state.shape == (tr.n_transitions, 1) and tr.state.dtype == np.float64
    assert np.all((ns == s) | (ns == s + 1))
    assert np.all(s < 11)
    np.testing.assert_array_equal(tr.terminal, ns == 11)
    np.testing.assert_array_equal(tr.reward, tr.terminal.astype(float))
    assert np.all(tr.action == 0) and np.all(tr.behavior_prob == 1.0)
    # one terminal step per trajectory, at its end; t counts 0..tau-1
    last = tr.offsets[1:] - 1
    assert tr.terminal.sum() == 500 and np.all(tr.terminal[last])
    np.testing.assert_array_equal(tr.t, np.arange(tr.n_transitions) - tr.offsets[tr.traj_index])
    # states are continuous along each trajectory
    inner = np.setdiff1d(np.arange(tr.n_transitions), last)
    np.testing.assert_array_equal(s[inner + 1], ns[inner])
    assert not tr.truncated.any()


def test_truncation_at_the_cap():
    cfg = ChainConfig(n_states=8, p_stay=0.6, max_steps=6)
    m = 20_000
    tr = chain.generate(m, np.random.default_rng(4), cfg)
    assert tr.lengths.max() == 6
    last = tr.offsets[1:] - 1
    assert np.all(tr.truncated[last] | tr.terminal[last])
    assert not np.any(tr.truncated & tr.terminal)
    np.testing.assert_array_equal(tr.truncated, (tr.t == 5) & ~tr.terminal)
    rate = tr.truncated.sum() / m
    p = truncation_probability(cfg)
    assert abs(rate - p) < 5 * np.sqrt(p * (1 - p) / m)
    assert truncation_probability(ChainConfig()) < 1e-200


def test_generate_is_deterministic_for_a_seed():
    a = chain.generate(300, np.random.default_rng(7))
    b = chain.generate(300, np.random.default_rng(7))
    c = chain.generate(300, np.random.default_rng(8))
    for name in ("traj_index", "t", "state", "next_state", "terminal", "reward"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.n_transitions != c.n_transitions or not np.array_equal(a.state, c.state)


def test_feature_map_is_tabular_over_all_states():
    fmap = chain.feature_map()
    assert fmap.n_features == 40
    np.testing.assert_array_equal(fmap(np.array([[3.0], [39.0]])), np.eye(40)[[3, 39]])


def test_config_validation():
    with pytest.raises(ConfigError, match=r"'p_stay' parameter of ChainConfig must be < 1\.0"):
        ChainConfig(p_stay=1.0)
    with pytest.raises(ConfigError, match="'n_states' parameter of ChainConfig"):
        ChainConfig(n_states=1)
    with pytest.raises(ConfigError, match="'length_scale'"):
        chain.population_statistics(ChainConfig(), "transition")
    with pytest.raises(ConfigError, match="'normalization'"):
        chain.population_statistics(ChainConfig(), "per_step", 1.0)


def test_statistics_module_on_generated_data_converges_to_population():
    statistics = pytest.importorskip("gpope.core.statistics")
    cfg = ChainConfig(n_states=8)
    tr = chain.generate(40_000, np.random.default_rng(13), cfg)
    for normalization, L in (("transition", 50.0), ("trajectory_mean", None)):
        stats = statistics.statistics_from_transitions(
            tr, chain.feature_map(cfg), np.ones(tr.n_transitions), gamma=cfg.gamma,
            normalization=normalization, length_scale=L,
        )
        for emp, exact in zip(stats.population(), chain.population_statistics(cfg, normalization, L), strict=True):
            np.testing.assert_allclose(emp, exact, atol=0.01 * np.abs(exact).max())

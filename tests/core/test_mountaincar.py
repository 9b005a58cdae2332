"""Mountain car: bit-exact agreement with gymnasium, the stored artifact, generator, ground truth."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.mountain_car import MountainCarEnv

from gpope.core.envs import mountaincar as mc
from gpope.core.policies import ARTIFACTS_DIR, EpsilonGreedyPolicy, SoftmaxPolicy, UniformPolicy
from gpope.errors import DataError


@pytest.fixture(scope="module")
def greedy():
    return mc.learned_policy("greedy")


def test_step_matches_gymnasium_bit_for_bit():
    rng = np.random.default_rng(0)
    n = 4000
    states = np.column_stack([rng.uniform(-1.2, 0.6, n), rng.uniform(-0.07, 0.07, n)])
    states[:500, 0] = rng.uniform(-1.2, -1.13, 500)  # near the left wall
    states[:500, 1] = rng.uniform(-0.07, 0.0, 500)
    actions = rng.integers(0, 3, n)
    ours, rewards, terminated = mc.step(states, actions)
    env = MountainCarEnv()
    env.reset(seed=0)
    wall = goal = 0
    for i in range(n):
        env.state = states[i].copy()
        _, r, term, trunc, _ = env.step(int(actions[i]))
        ref = np.array(env.state, dtype=np.float64)
        np.testing.assert_array_equal(ours[i], ref)
        assert rewards[i] == r and terminated[i] == term and not trunc
        wall += ref[0] == -1.2 and ref[1] == 0.0
        goal += term
    assert wall > 50 and goal > 50  # both edge cases were exercised


def _replay_in_gymnasium(tr, ids):
    env = gym.make("MountainCar-v0")
    for i in ids:
        rows = np.arange(tr.offsets[i], tr.offsets[i + 1])
        env.reset(seed=int(i))
        env.unwrapped.state = tr.state[rows[0]].copy()
        for k, row in enumerate(rows):
            np.testing.assert_array_equal(np.array(env.unwrapped.state, dtype=np.float64), tr.state[row])
            _, r, term, trunc, _ = env.step(int(tr.action[row]))
            np.testing.assert_array_equal(np.array(env.unwrapped.state, dtype=np.float64), tr.next_state[row])
            assert r == tr.reward[row]
            assert term == tr.terminal[row]
            assert (trunc and not term) == tr.truncated[row]
            if k == len(rows) - 1:
                assert term or trunc  # gymnasium ends the episode exactly where we do
    env.close()


def test_generated_episodes_replay_exactly_in_gymnasium(greedy):
    random_tr = mc.generate(12, np.random.default_rng(1), UniformPolicy(3))
    assert random_tr.truncated.sum() >= 1 and np.all(random_tr.lengths <= 200)
    _replay_in_gymnasium(random_tr, range(12))
    greedy_tr = mc.generate(12, np.random.default_rng(2), greedy)
    assert greedy_tr.terminal.sum() >= 10
    _replay_in_gymnasium(greedy_tr, range(12))


def test_generated_transitions_structure():
    policy = mc.learned_policy("epsilon_greedy", epsilon=0.3)
    tr = mc.generate(200, np.random.default_rng(3), policy, max_steps=150)
    assert tr.state.shape == (tr.n_transitions, 2)
    np.testing.assert_array_equal(tr.t, np.arange(tr.n_transitions) - tr.offsets[tr.traj_index])
    last = tr.offsets[1:] - 1
    np.testing.assert_array_equal(np.sort(np.flatnonzero(tr.terminal | tr.truncated)), last)
    np.testing.assert_array_equal(tr.truncated, (tr.t == 149) & ~tr.terminal)
    inner = np.setdiff1d(np.arange(tr.n_transitions), last)
    np.testing.assert_array_equal(tr.state[inner + 1], tr.next_state[inner])
    np.testing.assert_array_equal(tr.state[tr.offsets[:-1], 1], 0.0)
    assert np.all((tr.state[tr.offsets[:-1], 0] >= -0.6) & (tr.state[tr.offsets[:-1], 0] <= -0.4))
    np.testing.assert_allclose(tr.behavior_prob, policy.probabilities(tr.state)[np.arange(tr.n_transitions), tr.action])


def test_generate_is_deterministic_for_a_seed(greedy):
    policy = SoftmaxPolicy(greedy.q, 1.0)
    a = mc.generate(50, np.random.default_rng(9), policy)
    b = mc.generate(50, np.random.default_rng(9), policy)
    for name in ("traj_index", "t", "state", "action", "next_state", "terminal", "truncated", "behavior_prob"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    c = mc.generate(50, np.random.default_rng(10), policy)
    assert not np.array_equal(a.state[:50], c.state[:50])


def test_artifact_provenance_and_features():
    art = json.loads((ARTIFACTS_DIR / "mountaincar_q_v1.json").read_text())
    for key in ("policy", "feature_map", "training", "seed", "command", "greedy_evaluation"):
        assert key in art
    assert np.array(art["policy"]["q"]["weights"]).shape == (3, 36)
    assert art["feature_map"] == mc.feature_map().to_dict()
    assert art["feature_map"]["order"] == 5 and mc.feature_map().n_features == 36
    assert art["greedy_evaluation"]["success_rate"] >= 0.9


def test_artifact_greedy_policy_reaches_the_goal_in_gymnasium(greedy):
    env = gym.make("MountainCar-v0")
    successes = 0
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        terminated = truncated = False
        while not (terminated or truncated):
            action = int(np.argmax(greedy.probabilities(np.asarray(obs, dtype=np.float64)[None])[0]))
            obs, _, terminated, truncated, _ = env.step(action)
        successes += terminated
    env.close()
    assert successes >= 18


def test_monte_carlo_values_of_a_deterministic_policy_equal_one_gymnasium_rollout(greedy):
    states = mc.REFERENCE_STATES[:3]
    values, se = mc.monte_carlo_values(greedy, states, np.random.default_rng(0), n_rollouts=3, gamma=1.0)
    disc, _ = mc.monte_carlo_values(greedy, states, np.random.default_rng(0), n_rollouts=2, gamma=0.99)
    env = MountainCarEnv()
    env.reset(seed=0)
    for k, s in enumerate(states):
        env.state = s.copy()
        steps, term = 0, False
        while not term:
            _, _, term, _, _ = env.step(int(np.argmax(greedy.probabilities(np.array([env.state], dtype=float))[0])))
            steps += 1
        assert values[k] == -steps and se[k] == 0.0
        assert disc[k] == pytest.approx(-(1 - 0.99**steps) / (1 - 0.99), rel=1e-12)


def test_on_policy_value_in_the_start_region(greedy):
    values, se = mc.monte_carlo_values(greedy, mc.REFERENCE_STATES[:3], np.random.default_rng(1), 4, 1.0)
    assert np.all((values > -200) & (values < 0))
    eps = mc.learned_policy("epsilon_greedy", epsilon=0.1)
    values, se = mc.monte_carlo_values(eps, mc.REFERENCE_STATES[:3], np.random.default_rng(1), 50, 1.0)
    assert np.all((values > -200) & (values < 0)) and np.all(se > 0)


def test_monte_carlo_discounted_uniform_values_and_horizon():
    # Uniform random: rarely reaches the goal from the valley, so V(s) is close to -1/(1-gamma).
    values, _ = mc.monte_carlo_values(
        UniformPolicy(3), mc.REFERENCE_STATES[:1], np.random.default_rng(2), 20, 0.9, tolerance=1e-6
    )
    assert values[0] == pytest.approx(-10.0, abs=1e-5)
    with pytest.raises(DataError, match="did not reach the goal"):
        mc.monte_carlo_values(UniformPolicy(3), mc.REFERENCE_STATES[:1], np.random.default_rng(2), 2, 1.0, max_horizon=10)


def test_large_sample_statistics_identities(greedy):
    behavior = EpsilonGreedyPolicy(greedy.q, 0.2)
    target = UniformPolicy(3)
    rng = np.random.default_rng(4)
    A, b, C = mc.large_sample_statistics(
        behavior, target, rng, gamma=0.99, normalization="trajectory_mean", n_trajectories=100, chunk=64
    )
    assert A.shape == (36, 36) and b.shape == (36,) and C.shape == (36, 36)
    assert C[0, 0] == pytest.approx(1.0, rel=1e-12)  # constant feature, mean over each trajectory
    np.testing.assert_allclose(C, C.T)
    assert np.linalg.eigvalsh(C).min() > -1e-12
    # Same stream, brute-force per-trajectory means computed from the generated batches.
    rng = np.random.default_rng(4)
    fmap = mc.feature_map()
    sums = np.zeros(36)
    for size in (64, 36):
        tr = mc.generate(size, rng, behavior)
        rho = (1 / 3) / tr.behavior_prob
        for i in range(size):
            rows = slice(tr.offsets[i], tr.offsets[i + 1])
            sums += (rho[rows, None] * tr.reward[rows, None] * fmap(tr.state[rows])).mean(axis=0)
    np.testing.assert_allclose(b, sums / 100, rtol=1e-10, atol=1e-12)


def test_large_sample_statistics_agree_with_the_statistics_module(greedy):
    statistics = pytest.importorskip("gpope.core.statistics")
    from gpope.core.policies import importance_ratios

    behavior = EpsilonGreedyPolicy(greedy.q, 0.2)
    target = UniformPolicy(3)
    for normalization, L in (("transition", 200.0), ("trajectory_mean", None)):
        A, b, C = mc.large_sample_statistics(
            behavior, target, np.random.default_rng(6), gamma=0.95,
            normalization=normalization, length_scale=L, n_trajectories=60,
        )
        tr = mc.generate(60, np.random.default_rng(6), behavior)
        stats = statistics.statistics_from_transitions(
            tr, mc.feature_map(), importance_ratios(target, tr), gamma=0.95,
            normalization=normalization, length_scale=L,
        )
        for ours, theirs in zip((A, b, C), stats.population(), strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)


def test_trainer_is_reproducible_and_writes_a_loadable_artifact(tmp_path):
    from gpope.core.envs import train_mountaincar
    from gpope.core.policies import policy_from_dict

    a = train_mountaincar.train(seed=3, episodes=2, max_episode_steps=300)
    b = train_mountaincar.train(seed=3, episodes=2, max_episode_steps=300)
    assert a.weights.shape == (3, 36) and np.any(a.weights != 0)
    np.testing.assert_array_equal(a.weights, b.weights)
    out = tmp_path / "mountaincar_q_test.json"
    assert train_mountaincar.main(["--out", str(out), "--episodes", "2", "--eval-episodes", "5"]) == 0
    art = json.loads(out.read_text())
    policy = policy_from_dict(art["policy"])
    assert policy.q.weights.shape == (3, 36)
    assert art["seed"] == 0 and "--episodes 2" in art["command"]
    assert 0.0 <= art["greedy_evaluation"]["success_rate"] <= 1.0

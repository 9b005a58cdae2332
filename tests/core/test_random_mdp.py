"""Generated random MDPs and the domain registry: exact values against independent oracles."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.envs.random_mdp import RandomMDPConfig, random_mdp
from gpope.core.envs.registry import check_domain_name, domain_names, get_domain, random_mdp_of
from gpope.core.features import feature_map_from_dict
from gpope.core.policies import importance_ratios
from gpope.errors import ConfigError


def _monte_carlo_value(mdp, state: int, n: int, rng: np.random.Generator) -> float:
    """On-policy rollouts of pi from ``state`` (no importance weights): an independent oracle."""
    S = mdp.n_states
    g = mdp.config.gamma
    s = np.full(n, state)
    total, disc, alive = np.zeros(n), np.ones(n), np.ones(n, bool)
    cum_pi, cum_P = np.cumsum(mdp.target, axis=1), np.cumsum(mdp.P, axis=2)
    for _ in range(400):
        a = (cum_pi[s] < rng.random(n)[:, None]).sum(axis=1).clip(max=mdp.target.shape[1] - 1)
        total += alive * disc * mdp.reward_mean[s, a]
        nxt = (cum_P[s, a] < rng.random(n)[:, None]).sum(axis=1).clip(max=mdp.P.shape[2] - 1)
        alive &= nxt < S
        disc *= g
        s = np.where(nxt < S, nxt, 0)
    return float(total.mean())


def test_values_match_on_policy_monte_carlo():
    mdp = random_mdp(RandomMDPConfig(seed=5, n_states=6, n_actions=3, gamma=0.9))
    rng = np.random.default_rng(0)
    v = mdp.values()
    for s in (0, 3):
        assert _monte_carlo_value(mdp, s, 40_000, rng) == pytest.approx(v[s], abs=0.01)
    assert v.max() == pytest.approx(1.0) and v.min() >= 0.0


@pytest.mark.parametrize("features", ["tabular", "linear"])
def test_lstd_on_generated_data_recovers_exact_values(features):
    c = RandomMDPConfig.drawn(11, features=features)
    mdp = random_mdp(c)
    tr = mdp.generate(20_000, np.random.default_rng(1))
    assert tr.terminal.any() and tr.n_trajectories == 20_000
    rho = importance_ratios(mdp.target_policy(), tr)
    assert rho.max() <= c.ratio_bound + 1e-9 and mdp.max_ratio() > 1.0  # off-policy, bounded
    fm = feature_map_from_dict(mdp.feature_map())
    phi, nphi = fm(tr.state), np.where(tr.terminal[:, None], 0.0, fm(tr.next_state))
    A = (phi * rho[:, None]).T @ (phi - c.gamma * nphi)
    b = phi.T @ (rho * tr.reward)
    theta = np.linalg.lstsq(A, b, rcond=None)[0]
    for name, x in mdp.reference_states().items():
        est = float((fm(np.array([x])) @ theta)[0])
        assert est == pytest.approx(mdp.reference_values()[name], abs=0.05)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), features=st.sampled_from(["tabular", "linear"]))
def test_instances_are_valid_and_deterministic(seed, features):
    c = RandomMDPConfig.drawn(seed, features=features)
    a, b = random_mdp(c), random_mdp(RandomMDPConfig.drawn(seed, features=features))
    np.testing.assert_array_equal(a.P, b.P)
    np.testing.assert_allclose(a.P.sum(axis=2), 1.0)
    np.testing.assert_allclose(a.target.sum(axis=1), 1.0)
    assert a.behaviour.min() >= c.min_behaviour / c.n_actions - 1e-12
    assert a.max_ratio() <= c.ratio_bound + 1e-9
    v = a.values()
    assert v.max() == pytest.approx(1.0) and v.min() >= -1e-12


def test_generation_is_deterministic_per_seed():
    mdp = random_mdp_of("random_mdp/3")
    x = mdp.generate(50, np.random.default_rng(7))
    y = mdp.generate(50, np.random.default_rng(7))
    np.testing.assert_array_equal(x.reward, y.reward)
    np.testing.assert_array_equal(x.state, y.state)


def test_registry_names_and_errors():
    assert set(domain_names()) >= {"chain", "mountaincar", "hiv", "random_mdp/<seed>"}
    assert get_domain("chain").max_steps == 1000
    entry = get_domain("random_mdp_linear/2")
    assert entry.event_spec.terminal_variable == "episode_end"
    assert entry.max_steps == random_mdp_of("random_mdp_linear/2").config.max_steps
    for bad in ("atari", "random_mdp/x", "random_mdp", None):
        with pytest.raises(ConfigError, match="random_mdp/<seed>"):
            check_domain_name(bad)

"""Baselines against independent oracles (BASELINES.md sections 1.12, 2 and 3).

Oracles: certainty-equivalence models built by counting, Monte Carlo regressions, literal
line-by-line transcriptions of the published recursions, brute-force neighbour search.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.baselines import (
    dp_lsl,
    dp_lsw,
    first_visit_statistics,
    lstd,
    lstd_from_transitions,
    wis_lstd,
    wis_lstd_from_transitions,
)
from gpope.core.baselines.smooth import (
    lsl_estimate,
    lsl_regularization,
    lsl_smooth_sensitivity,
    lsw_estimate,
    lsw_smooth_sensitivity,
    nrs_constants,
)
from gpope.core.trajectories.transitions import Transitions
from gpope.errors import ConfigError, DataError

# ----------------------------------------------------------------------------- data helpers


def _episodes(rng, n_states, n_episodes, p_end=0.25, max_len=12, n_actions=2):
    """Random tabular episodes: lists of (state, action, reward, next_state, terminal) rows."""
    P = rng.dirichlet(np.ones(n_states), size=(n_states, n_actions))
    R = rng.normal(size=(n_states, n_actions))
    rows = []
    for i in range(n_episodes):
        s = int(rng.integers(n_states))
        for t in range(max_len):
            a = int(rng.integers(n_actions))
            s2 = int(rng.choice(n_states, p=P[s, a]))
            term = bool(rng.random() < p_end)
            rows.append((i, t, s, a, R[s, a] + 0.1 * rng.normal(), s2, term))
            if term:
                break
            s = s2
    arr = np.array(rows, dtype=float)
    traj = arr[:, 0].astype(np.int64)
    return (
        traj,
        arr[:, 1].astype(np.int64),
        arr[:, 2].astype(np.int64),
        arr[:, 3].astype(np.int64),
        arr[:, 4],
        arr[:, 5].astype(np.int64),
        arr[:, 6].astype(bool),
    )


def _onehot(states, n):
    return np.eye(n)[states]


def _returns(reward, traj, gamma):
    """Discounted return G_t of every row, by a plain backward loop."""
    G = np.zeros(len(reward))
    for t in range(len(reward) - 1, -1, -1):
        same = t + 1 < len(reward) and traj[t + 1] == traj[t]
        G[t] = reward[t] + (gamma * G[t + 1] if same else 0.0)
    return G


def _boyan_lstd_lambda(phi, nphi, R, rho, traj, gamma, lam):
    """Literal off-policy LSTD(lambda) accumulation, one transition at a time."""
    n = phi.shape[1]
    A, b, z, prev = np.zeros((n, n)), np.zeros(n), np.zeros(n), None
    for t in range(len(R)):
        if traj[t] != prev:
            z, prev = np.zeros(n), traj[t]
        z = rho[t] * (gamma * lam * z + phi[t])
        A += np.outer(z, phi[t] - gamma * nphi[t])
        b += z * R[t]
    return A, b


def _wis_literal(phi, nphi, R, rho, traj, gamma, lam, a0, term):
    """Literal transcription of the WIS-LSTD(lambda) recursion of BASELINES.md section 3."""
    n = phi.shape[1]
    A, b, prev = a0 * np.eye(n), np.zeros(n), None
    for t in range(len(R)):
        if traj[t] != prev:
            z, u, V, prev = np.zeros(n), np.zeros(n), np.zeros((n, n)), traj[t]
        gp = 0.0 if term[t] else gamma
        f, fn = phi[t], (np.zeros(n) if term[t] else nphi[t])
        z = rho[t] * (gamma * lam * z + f)
        b = b + R[t] * z + (rho[t] - 1) * u
        A = A + np.outer(z, f - gp * fn) + (rho[t] - 1) * V
        u = gp * lam * (rho[t] * u + R[t] * z)
        V = gp * lam * (rho[t] * V + np.outer(z, f - fn))
    return A, b


# ----------------------------------------------------------------------------- LSTD (section 2)


def test_tabular_lstd0_is_certainty_equivalence():
    rng = np.random.default_rng(0)
    N, gamma = 6, 0.9
    _, _, s, _, R, s2, term = _episodes(rng, N, 300)
    assert np.all(np.bincount(s, minlength=N) > 0)
    # Empirical model by counting: r_hat(s), P_hat(s, s') (terminal mass dropped).
    counts = np.bincount(s, minlength=N).astype(float)
    r_hat = np.bincount(s, weights=R, minlength=N) / counts
    P_hat = np.zeros((N, N))
    np.add.at(P_hat, (s[~term], s2[~term]), 1.0)
    P_hat /= counts[:, None]
    v_ce = np.linalg.solve(np.eye(N) - gamma * P_hat, r_hat)
    res = lstd(_onehot(s, N), _onehot(s2, N), R, gamma=gamma, terminal=term)
    np.testing.assert_allclose(res.theta, v_ce, rtol=1e-11, atol=1e-12)
    assert res.solver == "solve" and res.n_samples == len(R)


def test_lstd1_is_every_visit_mc_regression():
    rng = np.random.default_rng(1)
    gamma = 0.8
    traj, _, s, _, R, s2, term = _episodes(rng, 5, 200, max_len=50)
    # make every episode terminal so the telescoping argument applies
    last = np.r_[traj[1:] != traj[:-1], True]
    term = term | last
    F = rng.normal(size=(5, 3))
    phi, nphi = F[s], F[s2]
    G = _returns(R, traj, gamma)
    theta_mc = np.linalg.lstsq(phi, G, rcond=None)[0]
    res = lstd(phi, nphi, R, gamma=gamma, lam=1.0, traj_index=traj, terminal=term)
    np.testing.assert_allclose(res.theta, theta_mc, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.7, 1.0])
def test_lstd_lambda_matches_literal_accumulation(lam):
    rng = np.random.default_rng(2)
    T, n = 80, 4
    traj = np.sort(rng.integers(0, 9, T))
    phi, nphi = rng.normal(size=(T, n)), rng.normal(size=(T, n))
    R, rho = rng.normal(size=T), rng.uniform(0.0, 2.5, T)
    A, b = _boyan_lstd_lambda(phi, nphi, R, rho, traj, 0.95, lam)
    res = lstd(phi, nphi, R, rho, gamma=0.95, lam=lam, traj_index=traj, ridge=0.01)
    np.testing.assert_allclose(res.A, A / T + 0.01 * np.eye(n), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.b, b / T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.theta, np.linalg.solve(A / T + 0.01 * np.eye(n), b / T))


def test_terminal_versus_truncated_closed_form():
    # One state, reward 1 per step, episodes of length L. Truncated episodes keep phi' (the
    # estimate is the infinite-horizon 1/(1-gamma)); terminal ones zero it at the last step:
    # theta = L / ((L - 1)(1 - gamma) + 1).
    L, gamma, m = 5, 0.9, 3
    traj = np.repeat(np.arange(m), L)
    phi = np.ones((m * L, 1))
    R = np.ones(m * L)
    last = np.tile(np.arange(L) == L - 1, m)
    truncated = lstd(phi, phi, R, gamma=gamma)
    terminal = lstd(phi, phi, R, gamma=gamma, terminal=last)
    assert truncated.theta[0] == pytest.approx(1 / (1 - gamma))
    assert terminal.theta[0] == pytest.approx(L / ((L - 1) * (1 - gamma) + 1))
    # the Transitions wrapper: terminal rows zeroed, truncated rows keep next features
    tr = Transitions(
        traj_index=traj,
        t=np.tile(np.arange(L), m),
        state=np.zeros((m * L, 1)),
        action=np.zeros(m * L, np.int64),
        reward=R,
        next_state=np.zeros((m * L, 1)),
        terminal=last & (traj == 0),
        truncated=last & (traj != 0),
        behavior_prob=np.ones(m * L),
        n_trajectories=m,
    )
    mixed = lstd_from_transitions(tr, lambda x: np.ones((len(x), 1)), gamma=gamma)
    expected = m * L / ((m * L - 1) * (1 - gamma) + 1)  # only one terminal row
    assert mixed.theta[0] == pytest.approx(expected)


def test_lstd_singular_falls_back_to_lstsq():
    rng = np.random.default_rng(3)
    phi = np.c_[rng.normal(size=(20, 2)), np.zeros(20)]  # feature 2 never active
    res = lstd(phi, np.zeros_like(phi), rng.normal(size=20), gamma=0.5)
    assert res.solver == "lstsq"
    assert res.theta[2] == 0.0
    np.testing.assert_allclose(res.A[:2, :2] @ res.theta[:2], res.b[:2], atol=1e-12)


def test_lstd_input_errors():
    phi = np.ones((3, 2))
    with pytest.raises(ConfigError):
        lstd(phi, phi, np.ones(3), gamma=1.5)
    with pytest.raises(ConfigError):
        lstd(phi, phi, np.ones(3), gamma=0.9, lam=0.5)  # no traj_index
    with pytest.raises(DataError):
        lstd(phi, phi, np.array([1.0, np.nan, 0.0]), gamma=0.9)


# ----------------------------------------------------------------------------- WIS-LSTD (section 3)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    lam=st.sampled_from([0.0, 0.4, 1.0]),
    gamma=st.sampled_from([0.0, 0.7, 1.0]),
)
def test_wis_lstd_equals_literal_recursion(seed, lam, gamma):
    rng = np.random.default_rng(seed)
    T, n = int(rng.integers(1, 40)), 3
    traj = np.sort(rng.integers(0, 6, T))
    phi, nphi = rng.normal(size=(T, n)), rng.normal(size=(T, n))
    R, rho = rng.normal(size=T), rng.uniform(0.0, 3.0, T)
    last = np.r_[traj[1:] != traj[:-1], True]
    term = last & (rng.random(T) < 0.5)
    A, b = _wis_literal(phi, nphi, R, rho, traj, gamma, lam, 1e-3, term)
    res = wis_lstd(phi, nphi, R, rho, traj, gamma=gamma, lam=lam, a0=1e-3, terminal=term)
    scale = 1.0 + np.abs(A).max()
    np.testing.assert_allclose(res.A, A, atol=1e-11 * scale)
    np.testing.assert_allclose(res.b, b, atol=1e-11 * (1.0 + np.abs(b).max()))


def test_wis_lstd_lambda0_is_off_policy_lstd0():
    rng = np.random.default_rng(4)
    traj, _, s, a, R, s2, term = _episodes(rng, 5, 100)
    F = rng.normal(size=(5, 3))
    rho = np.where(a == 0, 1.6, 0.4)
    T = len(R)
    res = wis_lstd(F[s], F[s2], R, rho, traj, gamma=0.9, lam=0.0, a0=1e-2, terminal=term)
    ref = lstd(F[s], F[s2], R, rho, gamma=0.9, ridge=1e-2 / T, terminal=term)
    np.testing.assert_allclose(res.theta, ref.theta, rtol=1e-10)
    np.testing.assert_allclose(res.A / T, ref.A, atol=1e-13)


@pytest.mark.parametrize("lam", [0.3, 0.7, 1.0])
def test_wis_lstd_on_policy_is_lstd_lambda(lam):
    rng = np.random.default_rng(5)
    traj, _, s, _, R, s2, term = _episodes(rng, 5, 100)
    F = rng.normal(size=(5, 3))
    phi, nphi = F[s], np.where(term[:, None], 0.0, F[s2])
    A, b = _boyan_lstd_lambda(phi, nphi, R, np.ones(len(R)), traj, 0.9, lam)
    res = wis_lstd(phi, nphi, R, None, traj, gamma=0.9, lam=lam, a0=0.0)
    np.testing.assert_allclose(res.theta, np.linalg.solve(A, b), rtol=1e-9)
    ref = lstd(phi, nphi, R, gamma=0.9, lam=lam, traj_index=traj)
    np.testing.assert_allclose(res.theta, ref.theta, rtol=1e-9)


def test_tabular_wis_lstd_gamma_lambda_one_is_every_visit_wis_mc():
    rng = np.random.default_rng(6)
    N = 4
    traj, _, s, a, R, s2, term = _episodes(rng, N, 150, p_end=0.3, max_len=100)
    last = np.r_[traj[1:] != traj[:-1], True]
    term = term | last  # episodic
    rho = np.where(a == 0, 1.5, 0.5)
    G = _returns(R, traj, 1.0)
    # weight of visit k: product of ratios from k to the episode end
    W = np.zeros(len(R))
    for t in range(len(R) - 1, -1, -1):
        same = t + 1 < len(R) and traj[t + 1] == traj[t]
        W[t] = rho[t] * (W[t + 1] if same else 1.0)
    expected = np.bincount(s, weights=W * G, minlength=N) / np.bincount(s, weights=W, minlength=N)
    res = wis_lstd(
        _onehot(s, N), _onehot(s2, N), R, rho, traj, gamma=1.0, lam=1.0, a0=0.0, terminal=term
    )
    np.testing.assert_allclose(res.theta, expected, rtol=1e-9)


def test_wis_lstd_lambda_one_is_discount_aware_wis_regression():
    # BASELINES.md 3, test 4: sample k with horizon h < H has weight (1-gamma) gamma^(h-1)
    # prod_{j<h} rho_{k+j} and target sum_{j<h} R_{k+j}; horizon H (to the end) gamma^(H-1).
    rng = np.random.default_rng(7)
    gamma = 0.8
    traj, _, s, a, R, s2, term = _episodes(rng, 4, 60, p_end=0.3, max_len=30)
    last = np.r_[traj[1:] != traj[:-1], True]
    term = term | last
    F = rng.normal(size=(4, 3))
    rho = np.where(a == 0, 1.3, 0.7)
    M, v = np.zeros((3, 3)), np.zeros(3)
    for k in range(len(R)):
        end = k
        while not term[end]:
            end += 1
        H = end - k + 1
        for h in range(1, H + 1):
            p_h = (1 - gamma) * gamma ** (h - 1) if h < H else gamma ** (H - 1)
            w = p_h * np.prod(rho[k : k + h])
            M += w * np.outer(F[s[k]], F[s[k]])
            v += w * R[k : k + h].sum() * F[s[k]]
    res = wis_lstd(F[s], F[s2], R, rho, traj, gamma=gamma, lam=1.0, a0=0.0, terminal=term)
    np.testing.assert_allclose(res.theta, np.linalg.solve(M, v), rtol=1e-8)


def test_wis_lstd_transitions_wrapper_at_scale():
    rng = np.random.default_rng(8)
    m, L, n = 500, 200, 36  # 1e5 transitions, 36 features
    T = m * L
    traj = np.repeat(np.arange(m), L)
    state = rng.random((T, 1))
    tr = Transitions(
        traj_index=traj,
        t=np.tile(np.arange(L), m),
        state=state,
        action=np.zeros(T, np.int64),
        reward=-np.ones(T),
        next_state=np.roll(state, -1, axis=0),
        terminal=np.zeros(T, bool),
        truncated=np.tile(np.arange(L) == L - 1, m),
        behavior_prob=np.full(T, 0.5),
        n_trajectories=m,
    )
    freqs = np.arange(n)

    def fourier(x):
        return np.cos(np.pi * x[:, :1] * freqs)

    rho = rng.uniform(0.5, 1.5, T)
    res = wis_lstd_from_transitions(tr, fourier, rho, gamma=0.99, lam=0.5)
    assert res.theta.shape == (n,) and np.all(np.isfinite(res.theta))
    ref = wis_lstd(
        fourier(state), fourier(tr.next_state), tr.reward, rho, traj, gamma=0.99, lam=0.5
    )
    np.testing.assert_array_equal(res.A, ref.A)


# ----------------------------------------------------------------------------- first visit (1.2)


def test_first_visit_hand_example():
    # BASELINES 1.12.1: states [0,1,0,2], rewards [1,0,2,3], gamma 0.5.
    counts, fbar = first_visit_statistics(
        [0, 1, 0, 2], [1.0, 0.0, 2.0, 3.0], np.zeros(4, np.int64), n_states=4, gamma=0.5
    )
    np.testing.assert_array_equal(counts, [1, 1, 1, 0])
    np.testing.assert_allclose(fbar, [1.875, 1.75, 3.0, 0.0])
    # a second trajectory visiting state 0 at its start: mean over trajectories
    counts, fbar = first_visit_statistics(
        [0, 1, 0, 2, 0], [1.0, 0.0, 2.0, 3.0, 4.0], [0, 0, 0, 0, 1], n_states=4, gamma=0.5
    )
    np.testing.assert_array_equal(counts, [2, 1, 1, 0])
    assert fbar[0] == pytest.approx((1.875 + 4.0) / 2)
    _, clipped = first_visit_statistics(
        [0, 1, 0, 2], [1, 0, 2, 3], [0, 0, 0, 0], n_states=3, gamma=0.5, clip=2.0
    )
    np.testing.assert_allclose(clipped, [1.875, 1.75, 2.0])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_first_visit_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    N, gamma = 4, 0.7
    traj = np.sort(rng.integers(0, 5, int(rng.integers(1, 30))))
    states = rng.integers(0, N, len(traj))
    rewards = rng.random(len(traj))
    sums, counts = np.zeros(N), np.zeros(N, np.int64)
    for i in np.unique(traj):
        ss, rr = states[traj == i], rewards[traj == i]
        for st_ in np.unique(ss):
            t0 = int(np.flatnonzero(ss == st_)[0])
            sums[st_] += sum(gamma**j * r for j, r in enumerate(rr[t0:]))
            counts[st_] += 1
    got_counts, got_fbar = first_visit_statistics(states, rewards, traj, n_states=N, gamma=gamma)
    np.testing.assert_array_equal(got_counts, counts)
    np.testing.assert_allclose(got_fbar, np.divide(sums, np.maximum(counts, 1)), atol=1e-12)


@pytest.mark.parametrize(
    "states,n_states",
    [([0.0, 1.5], 3), ([0, 3], 3), ([0, -1], 3), ([0, 1], None), ([np.nan, 1.0], 3)],
)
def test_finite_state_sets_only(states, n_states):
    with pytest.raises(DataError, match="finite"):
        first_visit_statistics(states, [1.0, 1.0], [0, 0], n_states=n_states, gamma=0.9)
    with pytest.raises(DataError, match="finite"):
        dp_lsw(
            states,
            [1.0, 1.0],
            [0, 0],
            n_states=n_states,
            features=np.eye(3),
            weights=np.ones(3) / 3,
            gamma=0.9,
            f_max=10.0,
            epsilon=0.5,
            delta=0.1,
            rng=np.random.default_rng(0),
        )


# ----------------------------------------------------------------------------- DP-LSW / DP-LSL (1.3-1.7)


def test_nrs_constants_hand_values_and_ranges():
    a_inv, beta = nrs_constants(0.1, 0.1, 40)
    assert a_inv == pytest.approx(122.39, abs=5e-3)
    assert beta == pytest.approx(5.81e-4, abs=5e-7)
    for eps, dlt in [(1.5, 0.1), (0.0, 0.1), (0.5, 0.0), (0.5, 1.0)]:
        with pytest.raises(ConfigError):
            nrs_constants(eps, dlt, 3)


def test_tabular_estimates_closed_forms():
    rng = np.random.default_rng(9)
    N = 5
    counts = rng.integers(1, 20, N)
    fbar = rng.random(N) * 10
    rho = rng.dirichlet(np.ones(N))
    np.testing.assert_allclose(lsw_estimate(fbar, np.eye(N), rho), fbar, rtol=1e-12)
    lam = 3.0
    np.testing.assert_allclose(
        lsl_estimate(counts, fbar, np.eye(N), rho, lam),
        rho * counts * fbar / (rho * counts + lam / 2),
        rtol=1e-12,
    )
    # the schedule lambda = ||rho||_inf ||Phi||_F^2 + c m^p
    assert lsl_regularization(100, np.eye(N), rho, c=2.0, p=0.5) == pytest.approx(
        rho.max() * N + 2.0 * 10.0
    )


def _tiny_instance(rng, N=3, m=5):
    """m random trajectories over N states: list of (states, rewards)."""
    data = []
    for _ in range(m):
        L = int(rng.integers(1, 5))
        data.append((rng.integers(0, N, L), rng.random(L)))
    return data


def _flat(data):
    states = np.concatenate([d[0] for d in data])
    rewards = np.concatenate([d[1] for d in data])
    traj = np.concatenate([np.full(len(d[0]), i) for i, d in enumerate(data)])
    return states, rewards, traj


def _candidates(rng, N, f_max):
    pool = _tiny_instance(rng, N, 6)
    everything = np.arange(N)
    pool += [
        (everything, np.r_[np.zeros(N - 1), f_max]),  # visits all, max return at every state
        (everything, np.full(N, 10 * f_max)),  # clipped to f_max
        (everything, np.zeros(N)),  # visits all, return 0
        (np.array([0]), np.array([f_max])),  # single state
        (np.array([N - 1]), np.array([0.0])),
    ]
    return pool


@pytest.mark.parametrize("seed", range(4))
def test_smooth_bounds_dominate_brute_force_local_sensitivity(seed):
    rng = np.random.default_rng(seed)
    N, gamma, f_max, m = 3, 0.5, 2.0, 5
    phi = rng.normal(size=(N, 2))
    phi /= np.maximum(np.linalg.norm(phi, axis=1, keepdims=True), 1.0)  # rows of norm <= 1
    rho = rng.dirichlet(np.ones(N))
    beta = 0.05
    data = _tiny_instance(rng, N, m)
    pool = _candidates(rng, N, f_max)
    lam_authors = lsl_regularization(m, phi, rho, c=0.5, p=0.4)
    lam_derived = 0.7

    def stats(ds):
        return first_visit_statistics(*_flat(ds), n_states=N, gamma=gamma, clip=f_max)

    counts, fbar = stats(data)
    base = {
        "lsw": lsw_estimate(fbar, phi, rho),
        "lsl_a": lsl_estimate(counts, fbar, phi, rho, lam_authors),
        "lsl_d": lsl_estimate(counts, fbar, phi, rho, lam_derived),
    }
    worst = dict.fromkeys(base, 0.0)
    for i in range(m):
        for cand in pool:
            c2, f2 = stats([*data[:i], cand, *data[i + 1 :]])
            worst["lsw"] = max(
                worst["lsw"], np.linalg.norm(lsw_estimate(f2, phi, rho) - base["lsw"])
            )
            for key, lam in (("lsl_a", lam_authors), ("lsl_d", lam_derived)):
                diff = lsl_estimate(c2, f2, phi, rho, lam) - base[key]
                worst[key] = max(worst[key], np.linalg.norm(diff))
    assert worst["lsw"] > 0 and worst["lsl_a"] > 0
    s_w = lsw_smooth_sensitivity(counts, phi, rho, f_max=f_max, beta=beta)
    s_a = lsl_smooth_sensitivity(
        counts, phi, rho, n_trajectories=m, regularization=lam_authors, f_max=f_max, beta=beta
    )
    s_d = lsl_smooth_sensitivity(
        counts,
        phi,
        rho,
        n_trajectories=m,
        regularization=lam_derived,
        f_max=f_max,
        beta=beta,
        sensitivity="derived",
    )
    assert s_w >= worst["lsw"]
    assert s_a >= worst["lsl_a"]
    assert s_d >= worst["lsl_d"]


def _lsw_bound_oracle(counts, phi, rho, f_max, beta):
    """Second implementation: explicit loop over k, spectral norm from numpy's pinv."""
    pinv = np.linalg.norm(np.linalg.pinv(np.sqrt(rho)[:, None] * phi), 2)
    psi = max(
        math.exp(-k * beta) * sum(r / max(c - k, 1) ** 2 for r, c in zip(rho, counts, strict=True))
        for k in range(int(counts.max()) + 1)
    )
    return f_max * pinv * math.sqrt(psi)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), beta=st.sampled_from([1e-3, 0.05, 0.5]))
def test_smooth_bounds_are_beta_smooth_and_match_loop(seed, beta):
    rng = np.random.default_rng(seed)
    N, m = 4, 60
    phi = rng.normal(size=(N, 2))
    phi /= np.maximum(np.linalg.norm(phi, axis=1, keepdims=True), 1.0)
    rho = rng.dirichlet(np.ones(N))
    counts = rng.integers(0, m, N)
    # a replace-one neighbour moves each count by at most one
    other = np.clip(counts + rng.integers(-1, 2, N), 0, m)
    lam = lsl_regularization(m, phi, rho, c=1.0)
    bounds = []
    for cs in (counts, other):
        bounds.append(
            (
                lsw_smooth_sensitivity(cs, phi, rho, f_max=3.0, beta=beta),
                lsl_smooth_sensitivity(
                    cs, phi, rho, n_trajectories=m, regularization=lam, f_max=3.0, beta=beta
                ),
                lsl_smooth_sensitivity(
                    cs,
                    phi,
                    rho,
                    n_trajectories=m,
                    regularization=lam,
                    f_max=3.0,
                    beta=beta,
                    sensitivity="derived",
                ),
            )
        )
    for s_x, s_y in zip(*bounds, strict=True):
        assert s_x <= math.exp(beta) * s_y * (1 + 1e-12)
        assert s_y <= math.exp(beta) * s_x * (1 + 1e-12)
    assert bounds[0][0] == pytest.approx(_lsw_bound_oracle(counts, phi, rho, 3.0, beta), rel=1e-9)
    # derived LSL bound, second implementation
    k = np.arange(m + 1)
    mass = np.array([(rho * np.minimum(counts + kk, m)).sum() for kk in k])
    derived = np.max(np.exp(-beta * k) * (2 * 3.0 / lam) * (1 + np.sqrt(2 * mass / lam)))
    assert bounds[0][2] == pytest.approx(derived, rel=1e-12)


def _chain(rng, n_states, m, p=0.5, max_len=200):
    """Chain of BASELINES 1.10 / DOMAINS 1: start uniform on 0..N-2, reward 1 on entering N-1."""
    rows = []
    for i in range(m):
        s = int(rng.integers(n_states - 1))
        for _ in range(max_len):
            s2 = s + int(rng.random() >= p)
            rows.append((i, s, float(s2 == n_states - 1)))
            if s2 == n_states - 1:
                break
            s = s2
    arr = np.array(rows)
    return arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 0].astype(np.int64)


def test_noise_std_matches_sigma():
    rng = np.random.default_rng(10)
    N = 5
    states, rewards, traj = _chain(rng, N, 40)
    weights = np.r_[np.full(N - 1, 1 / (N - 1)), 0.0]
    common = dict(
        n_states=N,
        features=np.eye(N),
        weights=weights,
        gamma=0.9,
        f_max=10.0,
        epsilon=0.5,
        delta=0.1,
    )
    counts, fbar = first_visit_statistics(states, rewards, traj, n_states=N, gamma=0.9, clip=10.0)
    # DP-LSW over 10^4 draws within 2% (BASELINES 1.12.4); DP-LSL over 2500 draws within 4%.
    for fn, theta, n_draws, tol in (
        (dp_lsw, lsw_estimate(fbar, np.eye(N), weights), 10_000, 0.02),
        (
            dp_lsl,
            lsl_estimate(
                counts, fbar, np.eye(N), weights, lsl_regularization(40, np.eye(N), weights)
            ),
            2_500,
            0.04,
        ),
    ):
        draws, sigmas = [], set()
        for seed in range(n_draws):
            res = fn(states, rewards, traj, rng=np.random.default_rng(seed), **common)
            draws.append(res.theta - theta)
            sigmas.add(res.diagnostics["noise_std"])
        assert len(sigmas) == 1
        sigma = sigmas.pop()
        np.testing.assert_allclose(np.std(draws, axis=0), sigma, rtol=tol)
        np.testing.assert_allclose(np.mean(draws, axis=0), 0.0, atol=4 * sigma / np.sqrt(n_draws))


def test_release_record_and_privacy_fields():
    rng = np.random.default_rng(11)
    N = 6
    states, rewards, traj = _chain(rng, N, 30)
    weights = np.r_[np.full(N - 1, 1 / (N - 1)), 0.0]
    res = dp_lsl(
        states,
        rewards,
        traj,
        n_states=N,
        features=np.eye(N),
        weights=weights,
        gamma=0.9,
        f_max=10.0,
        epsilon=0.3,
        delta=0.05,
        rng=np.random.default_rng(1),
    )
    assert (res.epsilon, res.delta, res.mechanism) == (0.3, 0.05, "dp_lsl")
    assert res.diagnostics["private"] is True and res.diagnostics["noise_std"] > 0
    assert res.regularization == pytest.approx(lsl_regularization(30, np.eye(N), weights))
    with pytest.raises(TypeError):
        res.diagnostics["noise_std"] = 0.0  # read-only
    with pytest.raises(ConfigError):
        dp_lsw(
            states,
            rewards,
            traj,
            n_states=N,
            features=np.eye(N),
            weights=weights,
            gamma=0.9,
            f_max=10.0,
            epsilon=2.0,
            delta=0.05,
            rng=np.random.default_rng(1),
        )
    with pytest.raises(ConfigError):
        dp_lsl(
            states,
            rewards,
            traj,
            n_states=N,
            features=np.eye(N),
            weights=np.ones(N),
            gamma=0.9,
            f_max=10.0,
            epsilon=0.5,
            delta=0.05,
            rng=np.random.default_rng(1),
        )
    with pytest.raises(ConfigError):  # authors' bound needs lambda > ||rho||_inf ||Phi||_F^2
        dp_lsl(
            states,
            rewards,
            traj,
            n_states=N,
            features=np.eye(N),
            weights=weights,
            gamma=0.9,
            f_max=10.0,
            epsilon=0.5,
            delta=0.05,
            rng=np.random.default_rng(1),
            regularization=0.5,
        )


def test_sigma_monotone_in_epsilon_and_decreasing_in_m():
    rng = np.random.default_rng(12)
    N = 8
    weights = np.r_[np.full(N - 1, 1 / (N - 1)), 0.0]
    common = dict(n_states=N, features=np.eye(N), weights=weights, gamma=0.9, f_max=10.0, delta=0.1)
    states, rewards, traj = _chain(rng, N, 200)
    for fn in (dp_lsw, dp_lsl):
        sig = [
            fn(
                states, rewards, traj, epsilon=e, rng=np.random.default_rng(0), **common
            ).diagnostics["noise_std"]
            for e in (0.05, 0.1, 0.3, 0.6, 1.0)
        ]
        assert all(a >= b for a, b in itertools.pairwise(sig))
        assert sig[0] > sig[-1]
        mean_sigma = []
        for m in (50, 2000):
            vals = []
            for rep in range(3):
                s_, r_, t_ = _chain(np.random.default_rng(100 * m + rep), N, m)
                vals.append(
                    fn(s_, r_, t_, epsilon=1.0, rng=np.random.default_rng(0), **common).diagnostics[
                        "noise_std"
                    ]
                )
            mean_sigma.append(np.mean(vals))
        assert mean_sigma[1] < mean_sigma[0]


@pytest.mark.parametrize(("fn", "drop", "extra", "words"), [
    (dp_lsw, "rng", {}, "dp_lsw() is missing the required keyword(s) 'rng'"),
    (dp_lsl, "f_max", {}, "dp_lsl() is missing the required keyword(s) 'f_max'"),
    (dp_lsw, None, {"n_trajectories": 30}, "dp_lsw() got unknown keyword(s) 'n_trajectories'"),
    (dp_lsl, None, {"seed": 3}, "dp_lsl() got unknown keyword(s) 'seed'"),
])
def test_a_wrong_keyword_names_the_public_function_and_what_it_takes(fn, drop, extra, words):
    """A missing or unknown keyword is a TypeError in the caller's terms (the function they
    called and the keywords it takes), never one naming a private helper."""
    rng = np.random.default_rng(11)
    N = 6
    states, rewards, traj = _chain(rng, N, 30)
    kw = dict(n_states=N, features=np.eye(N), weights=np.full(N, 1 / N), gamma=0.9, f_max=10.0,
              epsilon=0.3, delta=0.05, rng=np.random.default_rng(1), **extra)
    kw.pop(drop, None)
    with pytest.raises(TypeError) as err:
        fn(states, rewards, traj, **kw)
    msg = str(err.value)
    assert words in msg and "_prepare" not in msg
    assert "n_states, features, weights, gamma, f_max, epsilon, delta, rng" in msg
    assert f"help(gpope.core.baselines.{fn.__name__})" in msg

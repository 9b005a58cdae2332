"""The GPOPE solver: convergence on the chain, clipping, noise scale, sampling, seeds, config."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.gpope import iterate as gpope_iterate
from gpope.core.gpope import sample_plan
from gpope.core.gpope.solver import GPOPEConfig, run_gpope, run_gpope_trials
from gpope.core.mechanisms.clipping import clip_rows
from gpope.core.statistics import TrajectoryStats, trajectory_statistics
from gpope.errors import ConfigError


# ---------------------------------------------------------------------- in-test chain
def sample_chain(m, rng, n_states=40, p=0.5):
    """Vectorised chain (see DOMAINS.md 1): (traj, state, next_state, reward, terminal)."""
    last = n_states - 1
    start = rng.integers(0, last, size=m)
    k = last - start
    traj = np.repeat(np.arange(m), k)
    pos = np.repeat(start - (np.cumsum(k) - k), k) + np.arange(k.sum())
    dwell = rng.geometric(1 - p, size=len(pos))
    state = np.repeat(pos, dwell)
    nxt = state.copy()
    nxt[np.cumsum(dwell) - 1] += 1
    reward = ((nxt == last) & (nxt != state)).astype(float)
    return np.repeat(traj, dwell), state, nxt, reward, nxt == last


def chain_values(n_states, p, gamma):
    k = n_states - 1 - np.arange(n_states - 1)
    return np.append(gamma ** (k - 1) * ((1 - p) / (1 - p * gamma)) ** k, 0.0)


N_STATES, GAMMA = 6, 0.9  # a short chain keeps GTD2's conditioning test-friendly


@pytest.fixture(scope="module")
def chain_stats():
    rng = np.random.default_rng(7)
    m = 2000
    traj, s, sn, r, term = sample_chain(m, rng, N_STATES)
    eye = np.eye(N_STATES)
    return trajectory_statistics(eye[s], eye[sn], r, np.ones(len(s)), traj, m, gamma=GAMMA,
                                 terminal=term, length_scale=10.0, representation="dense")


def random_dense(rng, m, n, scale=1.0):
    A = rng.normal(size=(m, n, n)) * scale
    F = rng.normal(size=(m, n, n)) * scale
    return TrajectoryStats.from_dense(A, rng.normal(size=(m, n)) * scale, F @ F.transpose(0, 2, 1))


def nonprivate(**kw):
    return GPOPEConfig(noise_multiplier=0.0, **kw)


# ---------------------------------------------------------------------- convergence
def test_expected_updates_converge_to_fixed_point(chain_stats):
    A, b, C = chain_stats.population()
    pop = TrajectoryStats.from_dense(A[None], b[None], C[None])  # m = 1: deterministic steps
    res = run_gpope(pop, nonprivate(iterations=20_000, step_size=1.0), 0)
    fixed = np.linalg.solve(A[:-1, :-1], b[:-1])  # absorbing state: zero row/column
    np.testing.assert_allclose(res.theta[:-1], fixed, atol=1e-10)
    assert res.theta[-1] == 0.0


@pytest.mark.parametrize("schedule,eta", [("constant", 0.3), ("inverse", 600.0)])
def test_sampled_gtd2_recovers_chain_values(chain_stats, schedule, eta):
    V = chain_values(N_STATES, 0.5, GAMMA)
    A, b, _ = chain_stats.population()
    fixed = np.linalg.solve(A[:-1, :-1], b[:-1])
    cfg = nonprivate(iterations=20_000, step_size=eta, step_schedule=schedule,
                     step_offset=1000.0, averaging="tail")
    res = run_gpope(chain_stats, cfg, 1)
    assert np.abs(res.theta_avg[:-1] - fixed).max() < 5e-3  # optimisation error
    assert np.abs(res.theta_avg - V).max() < 2e-2  # plus sampling error of m = 2000
    assert np.abs(V).max() > 0.5  # the zero start is far away
    assert res.epsilon == math.inf and res.accountant == "none" and not res.private


# ---------------------------------------------------------------------- clipping
@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), h=st.floats(1e-3, 1e3), scale=st.floats(1e-4, 1e4))
def test_clip_bounds_norm_and_keeps_direction(seed, h, scale):
    g = np.random.default_rng(seed).normal(size=(7, 6)) * scale
    c = clip_rows(g, h)
    nrm, cn = np.linalg.norm(g, axis=1), np.linalg.norm(c, axis=1)
    assert np.all(cn <= h * (1 + 1e-12))
    small = nrm <= h
    np.testing.assert_array_equal(c[small], g[small])
    np.testing.assert_allclose(cn[~small], h, rtol=1e-12)
    np.testing.assert_allclose(c * nrm[:, None], g * cn[:, None], rtol=1e-9, atol=1e-300)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31), h=st.floats(0.01, 10.0))
def test_each_step_moves_at_most_beta_h(seed, h):
    stats = random_dense(np.random.default_rng(seed), 5, 3, scale=10.0)
    cfg = GPOPEConfig(iterations=50, step_size=0.05, clip=h, noise_multiplier=0.0,
                      step_schedule="inverse", step_offset=2.0, trace_every=1)
    res = run_gpope(stats, cfg, seed)
    x = np.concatenate([res.trace_theta, res.trace_w], axis=1)
    moves = np.linalg.norm(np.diff(x, axis=0), axis=1)
    betas = 0.05 / (np.arange(1, 51) + 2.0)
    assert np.all(moves <= betas * h * (1 + 1e-9))
    assert np.any(moves >= 0.5 * betas * h)  # gradients are large: clipping is active


def test_override_hook_breaks_clipping_and_noise():
    stats = random_dense(np.random.default_rng(0), 5, 3, scale=10.0)
    cfg = GPOPEConfig(iterations=20, step_size=0.01, clip=0.1, noise_multiplier=0.0,
                      trace_every=1)
    res = run_gpope(stats, cfg, 0, _mechanism_override={"clip": False})
    x = np.concatenate([res.trace_theta, res.trace_w], axis=1)
    assert np.linalg.norm(np.diff(x, axis=0), axis=1).max() > 0.01 * 0.1 * 2
    assert not res.private and "override" in res.privacy_note


# ---------------------------------------------------------------------- noise
@pytest.mark.parametrize("scale", [1.0, 0.1])
def test_noise_std_of_one_step_is_h_sigma(scale):
    n, R, h, sigma = 3, 4000, 2.0, 1.5
    zero = TrajectoryStats.from_dense(np.zeros((4, n, n)), np.zeros((4, n)), np.zeros((4, n, n)))
    cfg = GPOPEConfig(iterations=1, step_size=1.0, clip=h, noise_multiplier=sigma)
    override = None if scale == 1.0 else {"noise_scale": scale}
    res = run_gpope_trials(zero, cfg, 3, R, _mechanism_override=override)
    x = np.concatenate([res.theta, res.w], axis=1).ravel()  # x = -beta * h * sigma * z
    # std of a sample of 24000 normals is within 2% of the truth with overwhelming probability
    assert np.std(x) == pytest.approx(h * sigma * scale, rel=0.02)
    assert abs(np.mean(x)) < 0.05 * h * sigma * scale


# ---------------------------------------------------------------------- seeds and trials
def test_seeds_reproduce_and_differ(chain_stats):
    cfg = nonprivate(iterations=500, step_size=0.3, clip=1.0)
    a = run_gpope(chain_stats, cfg, 5)
    b = run_gpope(chain_stats, cfg, np.random.default_rng(5))
    c = run_gpope(chain_stats, cfg, 5)
    d = run_gpope(chain_stats, cfg, 6)
    e = run_gpope(chain_stats, cfg, np.random.default_rng(5))
    np.testing.assert_array_equal(a.theta, c.theta)
    np.testing.assert_array_equal(b.theta, e.theta)
    assert not np.array_equal(a.theta, d.theta)
    assert not a.private and a.privacy_note


def _chain_stats(representation, m=300):
    rng = np.random.default_rng(2)
    traj, s, sn, r, term = sample_chain(m, rng, 10)
    eye = np.eye(10)
    rho = rng.uniform(0.5, 1.5, len(s))  # exercise the stored-rho branch too
    return trajectory_statistics(eye[s], eye[sn], r, rho, traj, m, gamma=0.95, terminal=term,
                                 length_scale=20.0, representation=representation)


@pytest.mark.parametrize("kind", ["dense", "tabular", "compact"])
def test_fast_paths_match_general_path_and_trials(kind):
    if kind == "dense":
        stats = random_dense(np.random.default_rng(1), 30, 4)
    else:  # the same chain data in the index layout and the generic row layout
        stats = _chain_stats(kind)
        assert stats.representation == kind
    n = stats.n
    cfg = GPOPEConfig(iterations=3000, step_size=0.01, clip=0.5, noise_multiplier=0.1,
                      averaging="uniform")
    fast = run_gpope(stats, cfg, 9)  # single uniform run: specialised chunk loop
    general = run_gpope(stats, GPOPEConfig(**{**cfg.__dict__, "trace_every": 1000}), 9)
    np.testing.assert_allclose(fast.theta, general.theta, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(fast.theta_avg, general.theta_avg, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(general.trace_theta[-1], general.theta, rtol=0, atol=0)
    if kind != "dense":
        np.testing.assert_allclose(run_gpope(_chain_stats("dense"), cfg, 9).theta, fast.theta,
                                   rtol=1e-9, atol=1e-12)
    many = run_gpope_trials(stats, cfg, 9, 3)
    assert many.theta.shape == (3, n) and many.theta_avg.shape == (3, n)
    assert not np.allclose(many.theta[0], many.theta[1])  # different plans per trial
    np.testing.assert_allclose(run_gpope_trials(stats, cfg, 9, 1).theta[0], fast.theta,
                               rtol=1e-10, atol=1e-13)


def test_trials_match_a_reference_loop():
    """Trials path against a direct transcription of Algorithm 1 fed the same plan and noise."""
    rng = np.random.default_rng(4)
    m, n, R, N = 6, 3, 4, 200
    A = rng.normal(size=(m, n, n))
    b = rng.normal(size=(m, n))
    C = np.einsum("kij,klj->kil", A, A)
    stats = TrajectoryStats.from_dense(A, b, C)
    h, sigma, eta = 0.7, 0.3, 0.02
    cfg = GPOPEConfig(iterations=N, step_size=eta, clip=h, noise_multiplier=sigma)
    res = run_gpope_trials(stats, cfg, 12, R)
    # the documented stream layout: an int seed spawns (sampling, noise) children
    gen_plan, gen_noise = [np.random.default_rng(s) for s in np.random.SeedSequence(12).spawn(2)]
    idx = gen_plan.integers(0, m, size=(N, R))
    z = gen_noise.standard_normal((N, R, 2 * n))
    for r in range(R):
        th, w = np.zeros(n), np.zeros(n)
        for i in range(N):
            j = idx[i, r]
            B = np.concatenate([-A[j].T @ w, A[j] @ th + C[j] @ w - b[j]])
            B = B / max(1.0, np.linalg.norm(B) / h) + h * sigma * z[i, r]
            th, w = th - eta * B[:n], w - eta * B[n:]
        np.testing.assert_allclose(res.theta[r], th, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(res.w[r], w, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------- poisson
@pytest.mark.parametrize("clip", [None, 0.8])
def test_poisson_q1_is_full_batch_gradient_descent(clip):
    rng = np.random.default_rng(8)
    m, n, N, eta = 5, 3, 60, 0.05
    stats = random_dense(rng, m, n)
    A, b, C = stats.dense()
    cfg = GPOPEConfig(iterations=N, step_size=eta, clip=clip, noise_multiplier=0.0,
                      sampling="poisson", batch_rate=1.0)
    res = run_gpope(stats, cfg, 0)
    th, w = np.zeros(n), np.zeros(n)
    for _ in range(N):  # sum of clipped gradients / (q m) = mean of clipped gradients
        G = np.stack([np.concatenate([-A[j].T @ w, A[j] @ th + C[j] @ w - b[j]])
                      for j in range(m)])
        if clip is not None:
            G = G / np.maximum(1.0, np.linalg.norm(G, axis=1) / clip)[:, None]
        step = G.mean(axis=0)
        th, w = th - eta * step[:n], w - eta * step[n:]
    np.testing.assert_allclose(res.theta, th, rtol=1e-10, atol=1e-13)


def test_poisson_plan_is_exact_bernoulli_membership():
    gen = np.random.default_rng(0)
    m, q, steps, R = 50, 0.02, 4000, 3
    members, owner, offs = sample_plan._poisson_plan(gen, m, q, steps, R)
    assert offs[-1] == len(members) == len(owner)
    counts = np.zeros((steps, R, m), dtype=int)
    for s in range(steps):
        np.add.at(counts[s], (owner[offs[s]:offs[s + 1]], members[offs[s]:offs[s + 1]]), 1)
    assert counts.max() == 1  # without replacement within a batch
    freq = counts.mean(axis=(0, 1))  # each trajectory's inclusion rate ~ q
    assert abs(freq.mean() - q) < 0.002
    assert np.all(np.abs(freq - q) < 6 * math.sqrt(q * (1 - q) / (steps * R)))
    sizes = counts.sum(axis=2).ravel()
    assert sizes.var() == pytest.approx(m * q * (1 - q), rel=0.1)  # Binomial variance


def test_poisson_small_rate_runs_and_scales_by_expected_batch(chain_stats):
    cfg = nonprivate(iterations=4000, step_size=0.3, sampling="poisson", batch_rate=0.002,
                     averaging="tail")
    res = run_gpope(chain_stats, cfg, 3)
    A, b, _ = chain_stats.population()
    fixed = np.linalg.solve(A[:-1, :-1], b[:-1])
    assert np.abs(res.theta_avg[:-1] - fixed).max() < 0.05
    assert res.sampling == "poisson"


# ---------------------------------------------------------------------- privacy wiring
def test_sigma_calibrated_and_epsilon_reported(chain_stats):
    acc = pytest.importorskip("gpope.core.accounting")
    cfg = GPOPEConfig(iterations=300, step_size=0.1, clip=1.0, epsilon=1.0, delta=1e-5)
    res = run_gpope(chain_stats, cfg, 0)
    expected = acc.calibrate_sigma(m=chain_stats.m, iterations=300, epsilon=1.0, delta=1e-5,
                                   accountant="auto", sampling="uniform", batch_rate=None)
    assert res.sigma == pytest.approx(expected, rel=1e-12)
    assert res.accountant == acc.resolve_accountant("auto", "uniform")
    assert (res.epsilon, res.delta) == (1.0, 1e-5)
    cfg2 = GPOPEConfig(iterations=300, step_size=0.1, clip=1.0, noise_multiplier=2.0,
                       delta=1e-5)
    res2 = run_gpope(chain_stats, cfg2, None)
    spent = acc.epsilon_spent(m=chain_stats.m, iterations=300, sigma=2.0, delta=1e-5,
                              accountant="auto", sampling="uniform", batch_rate=None)
    assert res2.epsilon == pytest.approx(spent, rel=1e-12)
    assert res2.private and not run_gpope(chain_stats, cfg2, 1).private


def test_unseeded_nonprivate_run_is_not_private(chain_stats):
    res = run_gpope(chain_stats, nonprivate(iterations=10, step_size=0.1), None)
    assert not res.private and res.epsilon == math.inf


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(clip=-1.0, noise_multiplier=0.0), r"The 'clip' parameter of GPOPEConfig must be > 0"
                                                r"\.0\. Got -1\.0 instead\."),
        (dict(clip=1.0), r"'epsilon', 'delta' and 'clip' must all be given"),
        (dict(epsilon=1.0, delta=1e-5), r"'epsilon', 'delta' and 'clip'"),
        (dict(noise_multiplier=1.0), r"noise without clipping gives no privacy"),
        (dict(noise_multiplier=1.0, clip=1.0, epsilon=1.0), r"give only one of them"),
        (dict(noise_multiplier=0.0, sampling="poisson"), r"'batch_rate'.*sampling='poisson'"),
        (dict(noise_multiplier=0.0, batch_rate=0.1), r"'batch_rate'.*must be None"),
        (dict(noise_multiplier=0.0, sampling="shuffle"), r"'sampling'.*'uniform', 'poisson'"),
        (dict(noise_multiplier=0.0, accountant="moments"), r"'accountant'"),
        (dict(noise_multiplier=0.0, averaging="last"), r"'averaging'"),
        (dict(noise_multiplier=0.0, tail_fraction=0.0), r"'tail_fraction'"),
        (dict(noise_multiplier=0.0, delta=1.0), r"'delta'"),
        (dict(noise_multiplier=-0.5, clip=1.0), r"'noise_multiplier'.*>= 0"),
    ],
)
def test_config_validation(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        GPOPEConfig(iterations=10, step_size=0.1, **kwargs)


def test_config_basic_errors():
    with pytest.raises(ConfigError, match="'iterations'"):
        GPOPEConfig(iterations=0, step_size=0.1, noise_multiplier=0.0)
    with pytest.raises(ConfigError, match="'step_size'"):
        GPOPEConfig(iterations=1, step_size=0.0, noise_multiplier=0.0)
    with pytest.raises(ConfigError, match="'rng'"):
        run_gpope(random_dense(np.random.default_rng(0), 2, 2),
                  nonprivate(iterations=1, step_size=0.1), "seed")


def test_compiled_loops_capture_no_closure_so_numbas_disk_cache_is_reused():
    # numba's on-disk cache key includes the pickled closure cells of a compiled function, and a
    # pickled dispatcher differs in every process: a loop that captured another compiled function
    # would be compiled again (seconds) in every process instead of loaded from the cache.
    from gpope.core.envs import hiv_integrator
    from gpope.core.gpope import kernels

    if not kernels.jit_available():
        pytest.skip("numba not available")
    loops = [*kernels._compiled(), hiv_integrator._compiled_integrator()]
    for fn in loops:
        assert fn.py_func.__closure__ is None, fn.py_func.__qualname__
    assert kernels._clip_special is not None and kernels._factor is not None


@pytest.mark.parametrize("n", [6, 70])
def test_compiled_dense_loop_equals_the_numpy_loop(n, monkeypatch):
    # The same run with the compiled single-trial loop and with the numpy loop (GPOPE_NO_JIT).
    from gpope.core.gpope import kernels
    stats = random_dense(np.random.default_rng(5), 40, n)
    cfg = GPOPEConfig(iterations=1500, step_size=0.05, clip=0.3, noise_multiplier=0.7,
                      averaging="tail")
    kernels._compiled.cache_clear()
    fast = run_gpope(stats, cfg, 11)
    monkeypatch.setenv("GPOPE_NO_JIT", "1")
    kernels._compiled.cache_clear()
    try:
        assert not kernels.jit_available()
        slow = run_gpope(stats, cfg, 11)
    finally:
        monkeypatch.delenv("GPOPE_NO_JIT")
        kernels._compiled.cache_clear()
    np.testing.assert_allclose(fast.theta, slow.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fast.theta_avg, slow.theta_avg, rtol=1e-9, atol=1e-12)
    assert not np.allclose(fast.theta, 0.0)


@pytest.mark.parametrize("representation", ["dense", "tabular", "sparse"])
def test_compiled_poisson_loop_equals_the_numpy_loop(representation, monkeypatch):
    # Poisson batches for several trials, with a trace: the compiled loop (kernels.poisson_steps)
    # and the numpy loop (forced by making poisson_steps decline) must give the same iterates.
    from gpope.core.gpope import kernels
    rng = np.random.default_rng(3)
    m = 300
    traj, s, sn, r, term = sample_chain(m, rng, N_STATES)
    eye = np.eye(N_STATES)
    rho = rng.uniform(0.5, 1.5, size=len(s))
    stats = trajectory_statistics(eye[s], eye[sn], r, rho, traj, m, gamma=GAMMA, terminal=term,
                                  length_scale=10.0,
                                  representation="tabular" if representation == "sparse"
                                  else representation)
    if representation == "sparse":
        stats = stats.to_sparse()
    assert stats.representation == representation
    cfg = GPOPEConfig(iterations=400, step_size=50.0, clip=0.05, noise_multiplier=0.8,
                      sampling="poisson", batch_rate=0.05, step_schedule="inverse",
                      step_offset=40.0, averaging="tail", trace_every=7)
    kernels._compiled.cache_clear()
    assert kernels._compiled() is not None
    fast = run_gpope_trials(stats, cfg, 21, 3)
    monkeypatch.setattr(gpope_iterate, "poisson_steps", lambda *a, **k: False)
    slow = run_gpope_trials(stats, cfg, 21, 3)
    for a, b in ((fast.theta, slow.theta), (fast.w, slow.w), (fast.theta_avg, slow.theta_avg),
                 (fast.trace_theta, slow.trace_theta)):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-13)
    assert not np.allclose(fast.theta, 0.0)
    np.testing.assert_array_equal(fast.trace_steps, slow.trace_steps)

"""Private tuning (`--tune private`): private quantile, noisy statistics, composed accounting,
selection. Oracles: numpy quantiles, dense statistics, gpope.core.metrics, dp-accounting composed
by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.accounting import RDP_ORDERS
from gpope.core.gpope.solver import GPOPEConfig
from gpope.core.mechanisms.quantile import (
    LogGrid,
    histogram_quantile,
    noisy_histogram,
    private_quantile,
)
from gpope.core.metrics import mspbe, relative_mspbe
from gpope.core.ssp import NoisyStatistics, statistics_vectors
from gpope.core.statistics import TrajectoryStats, trajectory_statistics
from gpope.core.tuning.private import (
    PrivateTuningSettings,
    gaussian_sigma,
    plan_private_tuning,
    tune_privately,
)
from gpope.core.tuning.scoring import (
    noisy_statistics,
    selection_mspbe,
    selection_relative_mspbe,
    statistics_blocks,
    statistics_norms,
)
from gpope.errors import ConfigError, DataError

GRID = LogGrid(lo=1e-4, hi=1e2, bins_per_decade=8)
STEP = 10 ** (1 / 8)


# ---------------------------------------------------------------------- private quantile
@given(q=st.sampled_from([0.1, 0.5, 0.9]), mu=st.floats(-6.0, 2.0), s=st.floats(0.2, 2.0))
@settings(max_examples=25, deadline=None)
def test_exact_histogram_quantile_brackets_the_true_quantile(q, mu, s):
    v = np.random.default_rng(0).lognormal(mu, s, size=5000)
    true = np.quantile(v, q, method="inverted_cdf")
    est = histogram_quantile(np.bincount(np.searchsorted(GRID.edges(), v, side="right"),
                                         minlength=GRID.n_bins), GRID, q, len(v))
    if GRID.lo <= true < GRID.hi / STEP:
        assert true <= est * (1 + 1e-12) and est <= true * STEP * (1 + 1e-9)


def test_private_quantile_is_within_one_bin_of_the_true_quantile():
    rng = np.random.default_rng(1)
    norms = rng.lognormal(np.log(3e-3), 0.8, size=100_000)  # e.g. per-trajectory gradient norms
    for q in (0.25, 0.5, 0.9):
        true = np.quantile(norms, q)
        ests = [private_quantile(norms, q, grid=GRID, noise_multiplier=50.0, rng=rng)
                for _ in range(20)]
        assert all(true / STEP <= e <= true * STEP**2 for e in ests), (q, true, ests)


def test_noisy_histogram_noise_has_the_calibrated_std():
    v = np.full(10, 0.5)
    draws = np.array([noisy_histogram(v, GRID, 3.0, np.random.default_rng(i)) for i in range(3000)])
    exact = np.bincount(np.searchsorted(GRID.edges(), v, side="right"), minlength=GRID.n_bins)
    assert np.allclose(draws.mean(axis=0), exact, atol=0.25)
    assert abs((draws - exact).std() - 3.0) < 0.05


def test_quantile_rejects_bad_values():
    with pytest.raises(DataError, match="finite"):
        private_quantile(np.array([1.0, np.nan]), 0.5, grid=GRID, noise_multiplier=1.0,
                         rng=np.random.default_rng(0))
    with pytest.raises(ConfigError):
        LogGrid(lo=1.0, hi=0.5)


# ---------------------------------------------------------------------- noisy statistics
def _tabular_stats(m=300, n_states=6, seed=3, representation="tabular"):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 6, size=m)
    traj = np.repeat(np.arange(m), lengths)
    s = rng.integers(0, n_states, size=len(traj))
    sn = rng.integers(0, n_states, size=len(traj))
    eye = np.eye(n_states)
    return trajectory_statistics(eye[s], eye[sn], rng.normal(size=len(traj)),
                                 rng.uniform(0.5, 1.5, size=len(traj)), traj, m, gamma=0.9,
                                 terminal=np.zeros(len(traj), bool), length_scale=5.0,
                                 representation=representation)


@pytest.mark.parametrize("rep", ["tabular", "compact", "dense"])
def test_statistics_blocks_equal_dense_statistics(rep):
    stats = _tabular_stats(representation=rep)
    A, b, C = stats.dense()
    got = list(statistics_blocks(stats, block=70))
    assert np.array_equal(np.concatenate([g[0] for g in got]), np.arange(stats.m))
    assert np.allclose(np.concatenate([g[1] for g in got]), A, atol=1e-12)
    assert np.allclose(np.concatenate([g[2] for g in got]), b, atol=1e-12)
    assert np.allclose(np.concatenate([g[3] for g in got]), C, atol=1e-12)


def test_noisy_statistics_clip_and_noise():
    stats = _tabular_stats()
    A, b, C = stats.dense()
    norms = np.sqrt((A**2).sum((1, 2)) + (b**2).sum(1) + (C**2).sum((1, 2)))
    assert np.allclose(statistics_norms(stats), norms)
    h = float(np.median(norms))
    f = np.minimum(1.0, h / norms)
    tiny = noisy_statistics(stats, clip=h, noise_multiplier=1e-12, rng=np.random.default_rng(0))
    pA, pb, _ = tiny.pooled()
    assert np.allclose(pA, np.einsum("k,kij->ij", f, A), atol=1e-9)
    assert np.allclose(pb, f @ b, atol=1e-9)
    # the noise of the sums has std sigma * h on every coordinate
    draws = np.array([noisy_statistics(stats, clip=h, noise_multiplier=2.0,
                                       rng=np.random.default_rng(i)).pooled()[1]
                      for i in range(400)])
    assert abs((draws - f @ b).std() / (2.0 * h) - 1) < 0.05


def _release(A, b, C, m, std, rng=None):
    """NoisyStatistics whose means are (A, b, C) plus noise of std ``std`` (clip = 1)."""
    n = len(b)
    sums = statistics_vectors(A[None], b[None], C[None]) * m
    if rng is not None:
        sums = sums + std * m * rng.standard_normal(sums.shape)
    return NoisyStatistics(sums=sums, n=n, m=m, sigma=std * m, clip=1.0)


def test_selection_mspbe_without_noise_equals_the_metric():
    rng = np.random.default_rng(4)
    n = 5
    A = rng.normal(size=(n, n))
    F = rng.normal(size=(n, n))
    C = F @ F.T + n * np.eye(n)
    b = rng.normal(size=n)
    ns = _release(A, b, C, 10**6, 1e-12)
    thetas = rng.normal(size=(7, n))
    assert np.allclose(selection_mspbe(thetas, ns, z=0.0), mspbe(thetas, A, b, C), rtol=1e-8)
    assert np.allclose(selection_relative_mspbe(thetas, ns, z=0.0),
                       relative_mspbe(thetas, A, b, C), rtol=1e-8)


def test_debiased_selection_mspbe_is_unbiased_over_the_noise():
    rng = np.random.default_rng(5)
    n, m = 4, 1000
    A = np.eye(n) + 0.1 * rng.normal(size=(n, n))
    C = 5.0 * np.eye(n)
    b = rng.normal(size=n)
    theta = np.linalg.solve(A, b) + 0.05 * rng.normal(size=n)  # near the fixed point: small r
    std = 0.02
    deb, pess = [], []
    for i in range(3000):
        ns = _release(A, b, C, m, std, np.random.default_rng(100 + i))
        deb.append(selection_mspbe(theta, ns, z=0.0)[0])
        pess.append(selection_mspbe(theta, ns, z=1.0)[0])
    truth = mspbe(theta, A, b, C)
    bias = std**2 * (theta @ theta + 1) * n / 5.0  # what the uncorrected score adds on average
    assert abs(np.mean(deb) - truth) < 0.15 * bias
    assert np.mean(pess) > truth + 0.5 * bias  # z = 1 adds about one noise std


# ---------------------------------------------------------------------- accounting
@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_plan_meets_epsilon_as_dp_accounting_composes_it(accountant):
    s = PrivateTuningSettings(step_multipliers=(1.0, 10.0))
    m, N, q, eps, delta = 5000, 100, 0.01, 1.0, 1e-6
    plan = plan_private_tuning(m=m, iterations=N, batch_rate=q, epsilon=eps, delta=delta,
                               settings=s, accountant=accountant)
    assert plan.candidates == 2 and plan.epsilon_spent <= eps

    def by_hand(sigma_g):  # the same releases, composed one by one
        if accountant == "rdp":
            acc = RdpAccountant(orders=RDP_ORDERS)
        else:
            acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_accounting.GaussianDpEvent(plan.quantile_sigma))
        acc.compose(dp_accounting.GaussianDpEvent(plan.statistics_sigma))
        acc.compose(dp_accounting.GaussianDpEvent(plan.quantile_sigma))
        step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma_g))
        for _ in range(2):
            acc.compose(step, count=N)
        return acc.get_epsilon(delta)

    assert by_hand(plan.gpope_sigma) == pytest.approx(plan.epsilon_spent, rel=1e-6)
    assert by_hand(plan.gpope_sigma * 0.99) > eps  # calibrated tightly
    whole = (RdpAccountant(orders=RDP_ORDERS) if accountant == "rdp"
             else dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4))
    assert whole.compose(plan.dp_event).get_epsilon(delta) == pytest.approx(
        plan.epsilon_spent, rel=1e-6)  # the plan's event is the releases composed above
    # zCDP shares: each auxiliary release has the noise of the whole budget divided by sqrt(share)
    total = gaussian_sigma(eps, delta)
    rdp = RdpAccountant(orders=RDP_ORDERS)
    rdp.compose(dp_accounting.GaussianDpEvent(total))
    assert rdp.get_epsilon(delta) == pytest.approx(eps, rel=1e-2)
    assert plan.quantile_sigma == pytest.approx(total / math.sqrt(s.quantile_share))
    assert plan.statistics_sigma == pytest.approx(total / math.sqrt(s.statistics_share))


def test_tuning_costs_noise_compared_with_one_untuned_run():
    from gpope.core.accounting import calibrate_sigma

    plan = plan_private_tuning(m=10_000, iterations=500, batch_rate=0.01, epsilon=1.0, delta=1e-6,
                               settings=PrivateTuningSettings(), accountant="rdp")
    single = calibrate_sigma(m=10_000, iterations=500, epsilon=1.0, delta=1e-6, accountant="rdp",
                             sampling="poisson", batch_rate=0.01)
    assert single < plan.gpope_sigma < single * 2.5  # 4 candidates + 3 releases


def test_settings_validation():
    with pytest.raises(ConfigError, match="at least 10%"):
        PrivateTuningSettings(quantile_share=0.3, statistics_share=0.4)
    with pytest.raises(ConfigError, match="step_multipliers"):
        PrivateTuningSettings(step_multipliers=())


# ---------------------------------------------------------------------- the tuning
def _chain(m, rng, n_states=8, p=0.5):
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
    eye = np.eye(n_states)
    return trajectory_statistics(eye[state], eye[nxt], reward, np.ones(len(state)),
                                 np.repeat(traj, dwell), m, gamma=0.9, terminal=nxt == last,
                                 length_scale=10.0, representation="tabular")


@pytest.fixture(scope="module")
def chain():
    stats = _chain(20_000, np.random.default_rng(11))
    return stats, stats.population()


def _base(N, q):
    return GPOPEConfig(iterations=N, step_size=1.0, clip=1.0, noise_multiplier=0.0,
                       sampling="poisson", batch_rate=q, step_schedule="inverse",
                       step_offset=0.1 * N, averaging="tail")


def test_tune_privately_picks_a_good_candidate(chain):
    stats, (A, b, C) = chain
    N, q = 400, 0.005
    s = PrivateTuningSettings(step_multipliers=(0.01, 1.0, 16.0, 1e4))
    plan = plan_private_tuning(m=stats.m, iterations=N, batch_rate=q, epsilon=2.0, delta=1e-6,
                               settings=s)
    res = tune_privately(stats, _base(N, q), plan, s, rng=3)
    true = np.array([relative_mspbe(c.theta, A, b, C) for c in res.candidates])
    scores = np.array([c.score for c in res.candidates])
    assert res.chosen == int(np.argmin(scores))
    assert true[res.chosen] <= 2 * true.min() and true[res.chosen] < np.median(true)
    assert res.config.clip == res.gradient_clip and res.config.noise_multiplier == plan.gpope_sigma
    assert res.config.step_size == pytest.approx(s.step_multipliers[res.chosen] * res.base_step)
    assert np.array_equal(res.theta, res.candidates[res.chosen].theta)
    assert not res.private  # seeded
    assert 0 <= res.private_relative_mspbe < 0.5


def test_tune_privately_rejects_a_mismatched_plan(chain):
    stats, _ = chain
    s = PrivateTuningSettings(step_multipliers=(1.0,))
    plan = plan_private_tuning(m=stats.m + 1, iterations=50, batch_rate=0.01, epsilon=1.0,
                               delta=1e-6, settings=s)
    with pytest.raises(ConfigError, match="plan was made"):
        tune_privately(stats, _base(50, 0.01), plan, s, rng=0)


def test_tune_privately_divides_by_the_released_count_not_the_rows(chain):
    """Under add/remove-one the exact m is private: the steps' scale and scores read m~."""
    stats, _ = chain
    m_tilde = stats.m + 37
    s = PrivateTuningSettings(step_multipliers=(1.0,))
    plan = plan_private_tuning(m=m_tilde, iterations=50, batch_rate=0.01, epsilon=1.0,
                               delta=1e-6, settings=s)
    base = replace(_base(50, 0.01), normalizing_size=m_tilde)
    res = tune_privately(stats, base, plan, s, rng=0)
    assert res.noisy.m == m_tilde


def test_tune_privately_with_os_entropy_is_private(chain):
    stats, _ = chain
    small = TrajectoryStats.from_dense(*(x[:500] for x in _dense_head(stats, 500)))
    s = PrivateTuningSettings(step_multipliers=(1.0,))
    plan = plan_private_tuning(m=500, iterations=20, batch_rate=0.1, epsilon=1.0, delta=1e-6,
                               settings=s)
    res = tune_privately(small, _base(20, 0.1), plan, s)
    assert res.private and res.result.private


def _dense_head(stats, k):
    for _, A, b, C in statistics_blocks(stats, block=k):
        return A, b, C
    raise AssertionError

"""Secure noise (issue 12, "Secure noise"): OS-CSPRNG discrete Gaussian on a public grid.

Moments and probabilities are compared with the discrete Gaussian's exact values (sums over the
integers), the solver's secure path with the continuous noise level it replaces, and a seed is
refused everywhere.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chisquare

from gpope.core.gpope.solver import GPOPEConfig, run_gpope, run_gpope_trials
from gpope.core.mechanisms.secure_noise import (
    DEFAULT_SCALE,
    _bernoulli_exp,
    _bernoulli_exp_exact,
    _random_below,
    check_no_seed,
    default_grid,
    discrete_gaussian,
    round_to_grid,
    rounding_inflation,
)
from gpope.core.statistics import TrajectoryStats
from gpope.errors import ConfigError


def _exact_pmf(scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of N_Z(0, scale^2) by direct summation (the oracle)."""
    k = np.arange(-int(40 * scale) - 20, int(40 * scale) + 21)
    w = np.exp(-(k.astype(float) ** 2) / (2 * scale * scale))
    return k, w / w.sum()


@pytest.mark.parametrize("scale", [0.4, 3.0, 50.0])
def test_discrete_gaussian_moments_match_the_exact_distribution(scale):
    k, p = _exact_pmf(scale)
    var = float(np.sum(p * k**2))
    m4 = float(np.sum(p * k.astype(float) ** 4))
    z = discrete_gaussian(200_000, scale).astype(float)
    se_mean = math.sqrt(var / len(z))
    assert abs(z.mean()) < 5 * se_mean
    assert z.var() == pytest.approx(var, rel=0.02)
    assert np.mean(z**4) == pytest.approx(m4, rel=0.05)
    if scale < 0.5:  # a small-scale discrete Gaussian has variance < scale^2: not a rounded normal
        assert var < 0.9 * scale**2


@pytest.mark.parametrize("scale", [1.5, 40.0])
def test_discrete_gaussian_pmf_passes_a_chi_square_test(scale):
    k, p = _exact_pmf(scale)
    z = discrete_gaussian(200_000, scale)
    keep = p * len(z) >= 5
    observed = np.array([np.sum(z == v) for v in k[keep]], dtype=float)
    expected = p[keep] * len(z)
    expected *= observed.sum() / expected.sum()
    assert chisquare(observed, expected).pvalue > 1e-5


def test_random_below_is_exactly_uniform():
    # bound 3 * 2^60 leaves a rejection band of 1/4 of the words: a modulo without rejection
    # would give the lowest third of the range probability 1/2 instead of 1/3
    bound = 3 * 2**60
    x = _random_below(np.full(60_000, bound, dtype=np.int64))
    assert x.min() >= 0 and x.max() < bound
    assert np.mean(x < 2**60) == pytest.approx(1 / 3, abs=0.01)
    small = _random_below(np.full(60_000, 7, dtype=np.int64))
    assert chisquare(np.bincount(small, minlength=7)).pvalue > 1e-6


@pytest.mark.parametrize(("num", "den"), [(0, 5), (3, 10), (1, 1), (27, 10), (61, 7)])
def test_bernoulli_exp_has_probability_exp_minus_gamma(num, den):
    n = 100_000
    p = math.exp(-num / den)
    hits = _bernoulli_exp(np.full(n, num, dtype=np.int64), np.full(n, den, dtype=np.int64))
    assert abs(hits.mean() - p) <= 6 * math.sqrt(p * (1 - p) / n) + 1e-12
    exact = np.mean([_bernoulli_exp_exact(num, den) for _ in range(4000)])
    assert abs(exact - p) <= 6 * math.sqrt(p * (1 - p) / 4000) + 1e-12


def test_large_scales_take_the_exact_python_path_with_the_right_spread():
    # scale 1e5: acceptance fractions exceed int64, every candidate uses Python integers
    z = discrete_gaussian(3000, 1e5).astype(float)
    assert z.std() == pytest.approx(1e5, rel=0.06) and abs(z.mean()) < 6 * 1e5 / math.sqrt(3000)


def test_default_grid_keeps_the_noise_near_4096_grid_units():
    std, clip = 0.8, 2.0
    grid = default_grid(std, clip)
    assert std / grid == DEFAULT_SCALE
    inflated = std * rounding_inflation(clip, grid, 100)
    assert inflated / std == pytest.approx(1 + (std / clip) * 10 * 2.0**-12)
    assert default_grid(0.0, clip) == clip * 2.0**-20


def _zero_stats(m=10, n=3):
    return TrajectoryStats.from_dense(np.zeros((m, n, n)), np.zeros((m, n)), np.zeros((m, n, n)))


def test_secure_solver_refuses_a_seed():
    stats = _zero_stats()
    cfg = GPOPEConfig(iterations=5, step_size=0.1, clip=1.0, noise_multiplier=1.0,
                      secure_noise=True)
    for seed in (3, np.random.default_rng(3)):
        with pytest.raises(ConfigError, match="refuses a user seed"):
            run_gpope(stats, cfg, seed)
    with pytest.raises(ConfigError, match="refuses a user seed"):
        check_no_seed(0, "x")


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_secure_solver_noise_level_and_grid(sampling):
    # Zero statistics: theta after one step is pure noise, -beta/d * gamma * N_Z(0, (s/gamma)^2)
    # with s = h sigma (h + gamma sqrt(2n)) / h; every released value lies on the grid.
    h, sigma, grid, n, m = 2.0, 0.8, 1e-3, 3, 10
    q = 0.5 if sampling == "poisson" else None
    cfg = GPOPEConfig(iterations=1, step_size=1.0, clip=h, noise_multiplier=sigma,
                      sampling=sampling, batch_rate=q, secure_noise=True, noise_grid=grid)
    res = run_gpope_trials(_zero_stats(m, n), cfg, None, 20_000)
    assert res.private and "secure noise" in res.privacy_note
    div = q * m if q else 1.0
    noise = np.concatenate([res.theta, res.w], axis=1) * div
    expected = h * sigma * rounding_inflation(h, grid, 2 * n)
    assert noise.std() == pytest.approx(expected, rel=0.02)
    np.testing.assert_allclose(res.theta, round_to_grid(res.theta, grid), rtol=0, atol=1e-12)


def test_secure_solver_converges_like_the_standard_one():
    rng = np.random.default_rng(0)
    m, n = 200, 3
    A = rng.normal(size=(m, n, n)) * 0.2 + np.eye(n)
    C = np.broadcast_to(np.eye(n), (m, n, n)).copy()
    b = rng.normal(size=(m, n)) * 0.1 + 1.0
    stats = TrajectoryStats.from_dense(A, b, C)
    Am, bm, _ = stats.population()
    cfg = GPOPEConfig(iterations=4000, step_size=0.05, clip=5.0, noise_multiplier=0.05,
                      averaging="tail", sampling="poisson", batch_rate=0.1, secure_noise=True)
    res = run_gpope(stats, cfg)
    np.testing.assert_allclose(res.theta_avg, np.linalg.solve(Am, bm), atol=0.05)


def test_evaluate_options_refuse_a_seed_with_secure_noise():
    from gpope.core.evaluation.settings import RunSettings, SettingsLayer, merged_view

    def settings(**kw):  # the caller's settings over the packaged defaults
        return merged_view(RunSettings(), SettingsLayer(kw))

    with pytest.raises(ConfigError, match="refuses a user seed"):
        settings(epsilon=1.0, delta=1e-6, secure_noise=True, seed=1)
    with pytest.raises(ConfigError, match="in-memory path only"):
        settings(epsilon=1.0, delta=1e-6, secure_noise=True, path="stream")
    assert settings(epsilon=1.0, delta=1e-6, secure_noise=True, sampling="uniform").secure_noise
    with pytest.raises(ConfigError, match="certified only by RDP"):  # default: Poisson + PLD
        settings(epsilon=1.0, delta=1e-6, secure_noise=True)


def test_secure_noise_is_refused_where_the_accountant_does_not_cover_it():
    """Only RDP covers the discrete Gaussian, and for GPOPE steps only uniform sampling."""
    from types import SimpleNamespace

    from gpope.core.evaluation.settings import check_combination

    base = dict(secure_noise=True, seed=None, tune="none", path="auto", estimator="gpope",
                allow_invalid_accounting=False)
    for sampling, accountant, estimator in (("poisson", "auto", "gpope"),
                                            ("poisson", "pld", "gpope"),
                                            ("poisson", "rdp", "gpope"),
                                            ("poisson", "pld", "ssp")):
        with pytest.raises(ConfigError, match="secure-noise draws discrete Gaussian"):
            check_combination(SimpleNamespace(**{**base, "sampling": sampling,
                                                 "accountant": accountant,
                                                 "estimator": estimator}))
    for sampling, accountant, estimator in (("uniform", "auto", "gpope"),
                                            ("uniform", "rdp", "gpope"),
                                            ("poisson", "rdp", "ssp")):
        check_combination(SimpleNamespace(**{**base, "sampling": sampling,
                                             "accountant": accountant, "estimator": estimator}))

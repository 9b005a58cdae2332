"""Empirical privacy audit: the real solver passes, deliberately broken solvers fail.

Settings (m = 1000, N = 1000, claimed epsilon 2, delta 1e-5, 1000 runs per world): the canary is
sampled in about 63% of the runs, so a mechanism whose noise is 10x too small, or that skips
clipping, yields a certified lower bound of about 4.5 > 2 (see gpope.core.audit), while the real
solver's bound stays near 0.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from gpope.core.audit import (
    AuditConfig,
    audit_datasets,
    clopper_pearson,
    epsilon_lower_bound,
    run_audit,
)

RUNS = 1000
BROKEN = {"noise/10": {"noise_scale": 0.1}, "no-clip": {"clip": False}}


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (1, 1000), (631, 1000), (0, 1)])
@pytest.mark.parametrize("alpha", [0.025, 0.05])
def test_clopper_pearson_matches_binomtest_exact_interval(k, n, alpha):
    ci = binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    assert clopper_pearson(k, n, alpha, "lower") == pytest.approx(ci.low, abs=1e-12)
    assert clopper_pearson(k, n, alpha, "upper") == pytest.approx(ci.high, abs=1e-12)


def test_clopper_pearson_vectorised_and_epsilon_formula():
    ks = np.array([0, 5, 10])
    lows = clopper_pearson(ks, 10, 0.05, "lower")
    assert lows.shape == (3,)
    assert lows[0] == 0.0
    assert clopper_pearson(5, 10, 0.05, "lower") == pytest.approx(lows[1])
    assert epsilon_lower_bound(0.5, 0.05, 0.0) == pytest.approx(np.log(10.0))
    assert epsilon_lower_bound(0.5 + 1e-5, 0.05, 1e-5) == pytest.approx(np.log(10.0))
    assert epsilon_lower_bound(1e-6, 0.05, 1e-5) == -np.inf


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_canary_coordinate_is_untouched_by_base_data(sampling):
    cfg = AuditConfig(sampling=sampling, m=50)
    d0, d1 = audit_datasets(cfg, np.random.default_rng(1))
    n = cfg.n_features
    rng = np.random.default_rng(2)
    theta, w = rng.normal(size=(50, n)), rng.normal(size=(50, n))
    g0 = d0.gradients(np.arange(50), theta, w)
    g1 = d1.gradients(np.arange(50), theta, w)
    k = n - 1
    assert np.all(g0[:, k] == 0) and np.all(g0[:, n + k] == 0)
    canary = 0 if sampling == "uniform" else 49
    others = np.arange(50) != canary
    assert np.all(g1[others][:, [k, n + k]] == 0)
    expected = np.zeros(2 * n)
    expected[n + k] = cfg.canary_scale * cfg.clip
    np.testing.assert_array_equal(g1[canary], expected)
    # Neighbours: exactly one record differs.
    assert np.sum(np.any(g0 != g1, axis=1)) == 1


@pytest.fixture(scope="module")
def audits():
    out = {}
    for sampling in ("uniform", "poisson"):
        cfg = AuditConfig(sampling=sampling, runs=RUNS)
        out[(sampling, "real")] = run_audit(cfg, 11)
        for name, override in BROKEN.items():
            out[(sampling, name)] = run_audit(cfg, 11, _mechanism_override=override)
    return out


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_real_solver_passes_the_audit(audits, sampling):
    res = audits[(sampling, "real")]
    assert res.passed
    assert res.epsilon_lower <= res.epsilon_claimed
    assert res.sigma > 0 and res.override is None
    assert res.accountant == ("rdp" if sampling == "uniform" else "pld")


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_broken_solver_fails_the_audit(audits, sampling, broken):
    res = audits[(sampling, broken)]
    assert not res.passed
    assert res.epsilon_lower > res.epsilon_claimed + 1.0  # detected with a wide margin
    assert res.tpr > 0.5 and res.fpr < 0.01

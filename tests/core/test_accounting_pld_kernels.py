"""The vectorised PLD kernels compute what dp-accounting computes (its own objects are the oracle).

Composition by FFT carries rounding of about N ulp in every probability, in dp-accounting as in
gpope; an epsilon read at delta amplifies it by ``1 / (mass above epsilon)``, so composed epsilons
agree to ~1e-8 relative, not to the last bit. Everything before the composition agrees exactly
or to ~1e-12 (the connect-the-dots differences divide by ``exp(interval) - 1``).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant, common, pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_mod
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.accounting import calibrate, pld_epsilon
from gpope.core.accounting.pld_kernels import (
    TAIL_MASS,
    epsilon_for_delta,
    self_compose,
    step_pmfs,
)
from gpope.core.accounting.pld_kernels import _convolve_bounds as convolve_bounds


def _reference(q: float, sigma: float, interval: float) -> tuple[pld_pmf.PLDPmf, ...]:
    pld = pld_mod.from_gaussian_mechanism(
        standard_deviation=sigma, value_discretization_interval=interval, sampling_prob=q,
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return (pld._pmf_remove,) if q == 1.0 else (pld._pmf_remove, pld._pmf_add)


@pytest.mark.parametrize(("q", "sigma", "interval"), [
    (1e-5, 0.65, 1e-4), (1e-3, 0.5, 1e-4), (0.3, 2.0, 1e-3), (1.0, 3.0, 1e-3), (0.05, 8.0, 1e-2),
])
def test_step_pmfs_are_dp_accountings(q, sigma, interval):
    ours, ref = step_pmfs(q, sigma, interval), _reference(q, sigma, interval)
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        assert type(a) is type(b)
        if isinstance(b, pld_pmf.SparsePLDPmf):
            a, b = a.to_dense_pmf(), b.to_dense_pmf()
        assert a._lower_loss == b._lower_loss and a._infinity_mass == b._infinity_mass
        np.testing.assert_allclose(a._probs, b._probs, rtol=0, atol=1e-11)


_PMF = st.lists(st.floats(0.0, 1.0), min_size=2, max_size=400).filter(lambda p: sum(p) > 0)


@settings(max_examples=40, deadline=None)
@given(probs=_PMF, count=st.sampled_from([2, 7, 300, 10**6]))
def test_convolve_bounds_are_dp_accountings(probs, count):
    p = np.asarray(probs) / sum(probs)
    assert convolve_bounds(p, count) == common.compute_self_convolve_bounds(p, count, TAIL_MASS)


@settings(max_examples=60, deadline=None)
@given(probs=_PMF, lower=st.integers(-300, 300), interval=st.sampled_from([1e-3, 0.05, 1.0]),
       infinity=st.sampled_from([0.0, 1e-9, 1e-3]), delta=st.sampled_from([1e-8, 1e-4, 0.2]))
def test_epsilon_for_delta_is_dp_accountings(probs, lower, interval, infinity, delta):
    p = np.asarray(probs) / sum(probs) * (1.0 - infinity)
    pmf = pld_pmf.DensePLDPmf(interval, lower, p, infinity, True)
    ours, ref = epsilon_for_delta(pmf, delta), pmf.get_epsilon_for_delta(delta)
    assert ours == pytest.approx(ref, rel=1e-9, abs=1e-12) or (math.isinf(ours) and math.isinf(ref))


def test_epsilon_scan_crosses_blocks():
    # a long PMF whose answer lies far below the first block of the top-down scan
    interval, n = 1e-4, 300_000
    p = np.exp(-0.5 * ((np.arange(n) - 100_000) / 20_000.0) ** 2)
    pmf = pld_pmf.DensePLDPmf(interval, -50_000, p / p.sum(), 0.0, True)
    for delta in (1e-6, 0.05, 0.3):
        assert epsilon_for_delta(pmf, delta) == pytest.approx(pmf.get_epsilon_for_delta(delta),
                                                              rel=1e-9)


@pytest.mark.parametrize(("q", "sigma", "count"), [(1e-3, 0.7, 2000), (1e-5, 0.8, 100_000)])
def test_self_compose_is_dp_accountings(q, sigma, count):
    for step in _reference(q, sigma, 1e-4):
        dense = step.to_dense_pmf()
        ours, ref = self_compose(dense, count), dense.self_compose(count, TAIL_MASS)
        assert ours._lower_loss == ref._lower_loss and len(ours._probs) == len(ref._probs)
        assert ours._infinity_mass == ref._infinity_mass
        np.testing.assert_allclose(ours._probs, ref._probs, rtol=0, atol=1e-13)  # FFT noise
        assert epsilon_for_delta(ours, 1e-5) == pytest.approx(ref.get_epsilon_for_delta(1e-5),
                                                              rel=1e-7)


@pytest.mark.parametrize(("q", "n", "sigma", "interval"), [
    (1e-2, 1000, 0.8, 1e-4), (1e-4, 10**6, 0.9, 1e-4), (0.3, 50, 2.0, 1e-3), (1.0, 10, 3.0, 1e-3),
])
def test_pld_epsilon_is_dp_accountings_pld_accountant(q, n, sigma, interval):
    acc = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                        value_discretization_interval=interval)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), n))
    ours = pld_epsilon(batch_rate=q, iterations=n, sigma=sigma, delta=1e-6, interval=interval)
    # the sparse two-stage path (second case) agrees to ~1e-6, the one-stage paths to ~1e-8
    assert ours == pytest.approx(acc.get_epsilon(1e-6), rel=1e-5)


def test_calibration_is_within_2_percent_of_the_grids_root(monkeypatch):
    """The calibrated sigma is certified by dp-accounting's PLD at the grid it reports, and
    2 % less noise is not: the small-q case of the fine-grid check (benchmarks/accounting_pld.py
    --fine-check runs q = 1e-5, N = 1e6 and times it)."""
    monkeypatch.setenv("GPOPE_CACHE_DIR", "off")
    m, n, q, eps, delta = 10_000, 10_000, 1e-4, 0.05, 1e-5
    cal = calibrate(m=m, iterations=n, epsilon=eps, delta=delta, accountant="pld",
                    sampling="poisson", batch_rate=q)
    assert cal.certified_by == "pld" and cal.epsilon <= eps

    def dp(sigma: float) -> float:
        acc = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                            value_discretization_interval=cal.interval)
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), n))
        return acc.get_epsilon(delta)

    assert dp(cal.sigma) <= eps * (1 + 1e-7) < dp(cal.sigma / 1.02)

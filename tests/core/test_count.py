"""The released number of patients m~ (gpope.core.mechanisms.count), against dp-accounting and
closed forms."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from gpope.core.accounting.rdp import RDP_ORDERS
from gpope.core.mechanisms.count import (
    count_event,
    count_margin,
    count_sigma,
    mean_margin,
    release_count,
)
from gpope.core.mechanisms.secure_noise import discrete_gaussian


@pytest.mark.parametrize(("epsilon", "delta"), [(0.1, 1e-7), (1.0, 1e-5)])
def test_the_counts_noise_is_what_dp_accountings_rdp_certifies_at_its_charge(epsilon, delta):
    sigma = count_sigma(epsilon, delta)
    # dp-accounting's RDP accountant at the ledger's orders (its default grid is coarser)
    acc = RdpAccountant(orders=list(RDP_ORDERS),
                        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(count_event(sigma))
    assert acc.get_epsilon(delta) <= epsilon * (1 + 1e-6)
    # and not needlessly large: 2% less noise would exceed the charge
    tighter = RdpAccountant(orders=list(RDP_ORDERS))
    tighter.compose(dp_accounting.GaussianDpEvent(0.98 * sigma))
    assert tighter.get_epsilon(delta) > epsilon


def test_the_margin_is_the_subgaussian_tail_and_holds_for_discrete_gaussian_draws():
    assert count_margin(43.0, 1e-3) == math.floor(43.0 * math.sqrt(2 * math.log(2e3)))
    sigma, failure = 5.0, 0.05
    t = count_margin(sigma, failure)
    z = np.abs(discrete_gaussian(4000, sigma))
    assert np.mean(z > t) <= failure  # about 0.6% in expectation (the bound is loose)
    assert mean_margin(2.0, margin=10, m_noisy=1000) == pytest.approx(0.02)


def test_a_count_is_clamped_at_one_and_a_seeded_count_is_marked_not_private():
    small = [release_count(0, epsilon=0.1, delta=1e-7).m_noisy for _ in range(20)]
    assert min(small) >= 1 and max(small) > 1
    a = release_count(2000, epsilon=0.1, delta=1e-7, rng=np.random.default_rng(3))
    b = release_count(2000, epsilon=0.1, delta=1e-7, rng=np.random.default_rng(3))
    assert a == b and not a.private
    assert release_count(2000, epsilon=0.1, delta=1e-7).private

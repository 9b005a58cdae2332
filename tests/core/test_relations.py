"""A run's epsilon restated under the other neighbouring relation, against dp-accounting."""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting.pld import pld_privacy_accountant

from gpope.core.accounting.relations import epsilon_under, gaussian_epsilon, gaussian_mu
from gpope.errors import AccountingError

AR = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE


def _pld(event, delta, relation=AR, grid=1e-4):
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=relation,
                                               value_discretization_interval=grid)
    acc.compose(event)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("sigma", [0.5, 3.73, 30.75])
def test_exact_gaussian_epsilon_matches_dp_accounting_pld(sigma):
    # oracle: dp-accounting's PLD of the same Gaussian mechanism (pessimistic: never below)
    got = gaussian_epsilon(1.0 / sigma, 1e-5)
    assert got <= _pld(dp_accounting.GaussianDpEvent(sigma), 1e-5) <= got * 1.01 + 1e-4


def test_a_one_shot_event_is_one_gaussian_and_doubles_its_mu_under_replace_one():
    # the default's shape: histograms and sums, each a Gaussian leaf of sensitivity 1
    parts = [dp_accounting.GaussianDpEvent(s) for s in (20.0, 5.0, 20.0, 9.0)]
    event = dp_accounting.ComposedDpEvent(parts)
    mu = math.sqrt(sum(1.0 / s ** 2 for s in (20.0, 5.0, 20.0, 9.0)))
    assert gaussian_mu(event) == pytest.approx(mu, rel=1e-12)
    own = epsilon_under(event, charged_relation="add_or_remove_one",
                        relation="add_or_remove_one", delta=1e-5)
    assert own == pytest.approx(_pld(event, 1e-5), rel=0.01)
    # replace-one: dp-accounting's PLD under REPLACE_ONE reads each Gaussian leaf as a query of
    # clip norm 1 whose replacement moves it by 2 (an independent route to the same number)
    other = epsilon_under(event, charged_relation="add_or_remove_one", relation="replace_one",
                          delta=1e-5)
    assert other == pytest.approx(_pld(event, 1e-5, dp_accounting.NeighboringRelation.REPLACE_ONE),
                                  rel=0.01)
    assert other > 2.0 * own  # at these epsilons more than twice the charge


@pytest.mark.parametrize(("epsilon", "replace_one"), [(0.1, 0.213), (1.0, 2.155), (10.0, 24.35)])
def test_the_charges_of_the_issue_restate_as_measured(epsilon, replace_one):
    # a one-shot Gaussian charged epsilon at delta 1e-5 under add/remove is about 2.1-2.4x that
    # under replace-one
    from gpope.core.ssp import ssp_sigma

    event = dp_accounting.GaussianDpEvent(ssp_sigma(m=10_000, epsilon=epsilon, delta=1e-5))
    got = epsilon_under(event, charged_relation="add_or_remove_one", relation="replace_one",
                        delta=1e-5)
    assert got == pytest.approx(replace_one, rel=2e-3)


def test_sampled_events_restate_by_group_privacy_and_uniform_runs_have_no_add_remove():
    step = dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0))
    event = dp_accounting.SelfComposedDpEvent(step, 200)
    own = epsilon_under(event, charged_relation="add_or_remove_one",
                        relation="add_or_remove_one", delta=1e-5)
    acc = dp_accounting.rdp.RdpAccountant(neighboring_relation=AR)
    acc.compose(event)
    assert own == pytest.approx(acc.get_epsilon(1e-5), rel=1e-9)
    other = epsilon_under(event, charged_relation="add_or_remove_one", relation="replace_one",
                          delta=1e-5)
    # (2 eps', (1 + e^eps') delta') with delta' < delta / 2: above twice the own epsilon
    assert other > 2.0 * own
    assert epsilon_under(event, charged_relation="replace_one", relation="add_or_remove_one",
                         delta=1e-5) is None
    with pytest.raises(AccountingError, match="relation"):
        epsilon_under(event, charged_relation="swap", relation="replace_one", delta=1e-5)

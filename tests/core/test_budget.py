"""The ledger's pure budget logic: commit order decides admission, clocks never do (no Spark,
no Delta)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.accounting.budget import Budget, LedgerRow, admits, fold

DEFAULT = Budget(3.0, 1e-5, "default")
T0 = datetime(2026, 1, 1)


def _reservation(run_id: str, eps: float, version: int, minutes: float) -> LedgerRow:
    return LedgerRow(dataset="d", run_id=run_id, mechanism="no stored event", epsilon=eps,
                     delta=1e-6, accountant="rdp", status="reserved",
                     created_at=T0 + timedelta(minutes=minutes), kind="reservation",
                     charged_epsilon=eps, charged_delta=1e-6, valid_bound=True, version=version)


def _budget(eps: float, version: int, minutes: float = 0.0) -> LedgerRow:
    return LedgerRow(dataset="d", run_id=f"b{version}", mechanism="budget", epsilon=eps,
                     delta=1e-5, accountant="-", status="budget",
                     created_at=T0 + timedelta(minutes=minutes), kind="budget", version=version)


def test_commit_order_decides_not_the_writers_clock():
    """B's clock is two hours behind, but A committed first: A is admitted, B is not."""
    rows = [_reservation("A", 2.5, 1, 0.0), _reservation("B", 2.5, 2, -120.0)]
    status = fold("d", rows, default=DEFAULT, composition="basic")
    assert [e.run_id for e in status.counted] == ["A"]
    assert not status.entry("B").admitted and status.spent_epsilon == pytest.approx(2.5)
    assert admits(rows[:1], rows[1], default=DEFAULT, composition="basic") is False
    assert admits([], rows[1], default=DEFAULT, composition="basic") is True


def test_budget_in_force_at_the_reservations_commit_applies():
    rows = [_budget(1.0, 0), _reservation("A", 2.0, 1, 5.0), _budget(5.0, 2, -60.0),
            _reservation("B", 2.0, 3, 1.0)]
    status = fold("d", rows, default=DEFAULT, composition="basic")
    assert {e.run_id: e.admitted for e in status.runs} == {"A": False, "B": True}
    assert status.budget_epsilon == 5.0  # the latest by commit, though its clock is earliest


@settings(max_examples=60, deadline=None)
@given(eps=st.lists(st.floats(0.1, 2.0), min_size=1, max_size=8),
       skew=st.lists(st.floats(-600.0, 600.0), min_size=8, max_size=8))
def test_decisions_are_prefix_stable_and_ignore_timestamps(eps, skew):
    """Any clocks give the same decisions; a later commit never changes an earlier one; the
    admitted spend never exceeds the budget."""
    rows = [_reservation(f"r{i}", e, i, skew[i]) for i, e in enumerate(eps)]
    plain = [LedgerRow(**{**r.__dict__, "created_at": T0}) for r in rows]
    full = fold("d", rows, default=DEFAULT, composition="basic")
    assert [e.admitted for e in full.runs] == [
        e.admitted for e in fold("d", plain, default=DEFAULT, composition="basic").runs]
    for k in range(1, len(rows)):
        prefix = fold("d", rows[:k], default=DEFAULT, composition="basic")
        assert [e.admitted for e in prefix.runs] == [e.admitted for e in full.runs[:k]]
    assert full.spent_epsilon <= DEFAULT.epsilon + 1e-9


# ---------------------------------------------------------------------- one definition of spent
def _run(run_id: str, version: int, event, charged: float, delta: float = 1e-6) -> LedgerRow:
    from gpope.core.accounting.composition import mechanism_to_json

    return LedgerRow(dataset="d", run_id=run_id, mechanism=mechanism_to_json(
        event, "add_or_remove_one"), epsilon=charged, delta=delta, accountant="pld",
        status="released", created_at=T0, kind="reservation", charged_epsilon=charged,
        charged_delta=delta, valid_bound=True, version=version)


def _oracle_tight(event, copies: int, delta: float) -> float:
    """dp-accounting composes ``copies`` runs itself; the filter's union over its orders."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from gpope.core.accounting.composition import FILTER_ORDERS

    acc = RdpAccountant(orders=list(FILTER_ORDERS))
    acc.compose(dp_accounting.SelfComposedDpEvent(event, copies))
    return float(compute_epsilon(list(FILTER_ORDERS), acc._rdp, delta / len(FILTER_ORDERS))[0])


def test_spent_remaining_and_runs_left_match_dp_accounting():
    """Tight: one run is its own certificate (tight <= basic); runs_left is the largest k that
    dp-accounting's composition of 1 + k runs keeps within the budget, as admission requires."""
    import dp_accounting

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.0)), 1000)
    budget = Budget(25.0, 1e-5, "test")
    own = 1.0  # the run's own (PLD) certificate, below what the RDP filter gives for it alone
    assert _oracle_tight(event, 1, budget.delta) > own
    status = fold("d", [_run("a", 1, event, own)], default=budget, composition="rdp")
    assert status.spent_epsilon_tight == pytest.approx(own) == status.spent_epsilon
    assert status.spent_epsilon_tight <= status.spent_epsilon_basic
    assert status.spent_delta == pytest.approx(1e-6)
    assert status.remaining_epsilon == pytest.approx(24.0)
    assert status.remaining_delta == budget.delta  # the filter's delta is fixed, not consumed
    k = status.runs_left
    assert _oracle_tight(event, 1 + k, budget.delta) <= budget.epsilon
    assert _oracle_tight(event, 2 + k, budget.delta) > budget.epsilon
    # exactly k more such reservations are admitted, by the ledger's own rule
    rows = [_run("a", 1, event, own)] + [_run(f"r{i}", 2 + i, event, own) for i in range(k + 1)]
    admitted = [e.admitted for e in fold("d", rows, default=budget, composition="rdp").runs]
    assert admitted == [True] * (k + 1) + [False]
    after = fold("d", rows[:-1], default=budget, composition="rdp")
    assert after.runs_left == 0 and after.no_further_run
    assert after.spent_epsilon == pytest.approx(_oracle_tight(event, k + 1, budget.delta))
    text = after.summary()
    assert "beyond the budget under basic composition; not the governing rule" in text


def test_basic_spent_and_remaining_delta_add_up():
    import dp_accounting

    event = dp_accounting.GaussianDpEvent(3.0)
    budget = Budget(3.0, 1e-5, "test")
    rows = [_run(f"r{i}", i, event, 0.5, delta=3e-6) for i in range(2)]
    status = fold("d", rows, default=budget, composition="basic")
    assert (status.spent_epsilon, status.spent_delta) == pytest.approx((1.0, 6e-6))
    assert (status.remaining_epsilon, status.remaining_delta) == pytest.approx((2.0, 4e-6))
    assert status.runs_left == 1  # delta: 4e-6 // 3e-6; epsilon would allow 4
    more = fold("d", [*rows, _run("x", 9, event, 0.5, delta=3e-6),
                      _run("y", 10, event, 0.5, delta=3e-6)], default=budget, composition="basic")
    assert [e.admitted for e in more.runs] == [True, True, True, False]


def _settled(run_id: str, status: str, minutes: float) -> LedgerRow:
    return LedgerRow(dataset="d", run_id=run_id, mechanism="no stored event", epsilon=0.0,
                     delta=0.0, accountant="rdp", status=status,
                     created_at=T0 + timedelta(minutes=minutes), kind="settlement")


def test_open_runs_are_decided_with_the_final_statuses_known():
    """Expired commits (version unknown) fall back to the clocks, which put A (2.5, later
    cancelled) before D (1.0, still open). A never drew noise; D may be running. D is decided
    against the runs that are charged (none), so it counts: spent 1.0, and a further 2.5 run is
    refused. Deciding D while A still looked admitted (2.5 + 1.0 > 3) would leave D uncounted
    and admit that run at spent 0."""
    rows = [_reservation("A", 2.5, -1, -120.0), _reservation("D", 1.0, -1, -60.0),
            _settled("A", "cancelled", -30.0)]
    status = fold("d", rows, default=DEFAULT, composition="basic")
    assert [e.run_id for e in status.counted] == ["D"]
    assert status.spent_epsilon == pytest.approx(1.0)
    assert not admits(rows, _reservation("E", 2.5, 9, 0.0), default=DEFAULT, composition="basic")


def test_a_refusal_names_the_budget_the_spend_and_the_command():
    """Default budget, no run yet: raising needs no --force; after a budget row it does."""
    from gpope.core.accounting.admission import refusal_message

    big = fold("d", [_reservation("big", 10.0, 1, 0.0)], default=DEFAULT,
               composition="basic").runs[0]
    status = fold("d", [], default=Budget(3.0, 1e-5, "privacy.default_* of the configuration"),
                  composition="basic")
    text = refusal_message(status, big)
    assert "over the budget epsilon 3, delta 1e-05 (privacy.default_* of the configuration; " \
           "spent epsilon 0, delta 0)" in text
    assert text.endswith("set the budget with `gpope budget set --dataset d --epsilon E --delta D`"
                         " if your policy allows.")
    status = fold("d", [_budget(2.0, 0)], default=DEFAULT, composition="basic")
    assert "budget epsilon 2, delta 1e-05 (set with `gpope budget set`" in refusal_message(
        status, big)
    assert "--delta D --force`" in refusal_message(status, big)


def test_one_decision_admits_refuses_and_reads_back_a_charge():
    """decide: before the append, a charge that fits is admitted and one past the budget
    refused (basic sum 2.5 + 1.0 > 3); after the append it reads the commit-order verdict."""
    from dataclasses import replace

    from gpope.core.accounting.admission import Charge, decide
    from gpope.errors import BudgetExceededError, ConfigError

    rule = dict(default=DEFAULT, composition="basic")
    first = Charge(dataset="d", run_id="A", epsilon=2.5, delta=1e-6, accountant="rdp",
                   mechanism="no stored event")
    a = LedgerRow.from_mapping(first.row(created_at=T0))
    assert a.charged_epsilon == 2.5 and a.charged_delta == 1e-6
    assert decide([], a, **rule).admitted
    committed = [replace(a, version=1)]
    assert decide(committed, a, appended=True, **rule).version == 1  # its commit's verdict
    with pytest.raises(ConfigError, match="already in the ledger"):
        decide(committed, a, **rule)  # a second run under the same id
    b = LedgerRow.from_mapping(Charge(dataset="d", run_id="B", epsilon=1.0, delta=1e-6,
                                      accountant="rdp", mechanism="m").row(created_at=T0))
    with pytest.raises(BudgetExceededError, match=r"would spend epsilon 3\.5"):
        decide(committed, b, **rule)
    late = [*committed, replace(b, version=2)]  # appended by a racing writer: cancelled
    with pytest.raises(BudgetExceededError, match="concurrent run committed its reservation"):
        decide(late, b, appended=True, **rule)
    with pytest.raises(ConfigError, match="epsilon"):
        Charge(dataset="d", run_id="C", epsilon=0.0, delta=1e-6, accountant="rdp",
               mechanism="m")

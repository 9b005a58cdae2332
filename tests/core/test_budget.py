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

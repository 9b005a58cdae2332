"""Two real processes race for a budget that fits one run: the ledger decides by commit order.

Each writer is a fresh interpreter reserving through the delta-rs ledger store (no Spark). The
interleaving is fixed with a ``GPOPE_FAULT`` wait point, and the paused writer's clock is two
hours behind (``clock=-7200``): ordering by the writers' timestamps would put it first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import dp_accounting
import pytest
from deltalake import DeltaTable
from dp_accounting.rdp import RdpAccountant

from gpope.config import load_config
from gpope.core.accounting.admission import Charge
from gpope.core.accounting.composition import (
    filter_epsilon,
    mechanism_from_json,
    mechanism_to_json,
    rdp_curve,
)
from gpope.shell.pipeline.ledger import PrivacyLedger

REPO = Path(__file__).resolve().parents[2]
SIGMA, DELTA = 2.0, 1e-6  # one Gaussian release: RDP epsilon about 2.8 at delta 1e-6

WRITER = f"""
import sys
import dp_accounting
from gpope.config import load_config
from gpope.errors import BudgetExceededError
from gpope.shell.pipeline.ledger import Charge, PrivacyLedger

lake, run_id, eps = sys.argv[1], sys.argv[2], float(sys.argv[3])
ledger = PrivacyLedger(None, load_config(None, lake={{"root": lake}}))
try:
    ledger.reserve(Charge.of_event(dp_accounting.GaussianDpEvent({SIGMA!r}), dataset="d",
                                   run_id=run_id, epsilon=eps, delta={DELTA!r}, accountant="rdp"))
except BudgetExceededError as exc:
    print(exc)
    sys.exit(3)
ledger.mark("d", run_id, "released")  # the run's release, after the ledger admitted it
print("released")
"""


def _claim() -> float:
    acc = RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(SIGMA))
    return float(acc.get_epsilon(DELTA))


def _writer(lake: Path, run_id: str, eps: float, fault: str | None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPOPE_FAULT", None)
    if fault:
        env["GPOPE_FAULT"] = fault
    return subprocess.Popen([sys.executable, "-c", WRITER, str(lake), run_id, str(eps)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"writer exited early: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("pause", ["ledger.before_append", "ledger.after_append"])
def test_exactly_one_of_two_racing_processes_releases(tmp_path, pause):
    """B (clock 2 h behind) stops at ``pause``; A runs to the end; then B goes on.

    before_append: A commits first, so B's later commit is not admitted (B cancels itself)
    although B's timestamp is two hours older. after_append: B commits first, A's check sees it
    and A is refused having written nothing.
    """
    lake = tmp_path / "lake"
    claim = _claim()
    budget = 1.2 * claim  # fits one run, not two
    curve = rdp_curve(mechanism_from_json(mechanism_to_json(
        dp_accounting.GaussianDpEvent(SIGMA), "add_or_remove_one")))
    assert filter_epsilon([("add_or_remove_one", curve)] * 2, DELTA) > budget
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(lake)}))
    ledger.set_budget("d", epsilon=budget, delta=DELTA)

    release = tmp_path / "go"
    b = _writer(lake, "B", claim, f"clock=-7200,{pause}:wait={release}")
    _wait_for(Path(f"{release}.reached"), b)
    a = _writer(lake, "A", claim, None)
    out_a = a.communicate(timeout=120)
    release.touch()
    out_b = b.communicate(timeout=120)

    codes = {"A": a.returncode, "B": b.returncode}
    winner = "A" if pause == "ledger.before_append" else "B"
    loser = "B" if winner == "A" else "A"
    assert codes == {winner: 0, loser: 3}, (out_a, out_b)
    refused = (out_b if loser == "B" else out_a)[0]
    assert "exceeded" in refused and "Nothing was released" in refused

    status = ledger.status("d")
    assert [r.run_id for r in status.counted] == [winner]
    assert status.spent_epsilon <= budget and status.spent_epsilon == pytest.approx(claim)
    runs = {r.run_id: r.status for r in status.runs}
    assert runs[winner] == "released"
    assert runs.get(loser) in (None, "cancelled")  # refused before its append, or cancelled
    assert all(r["version"] >= 0 for r in ledger._store.rows())  # every row's commit is known
    table = DeltaTable(ledger.location).to_pyarrow_table().to_pylist()
    assert sum(r["charged_epsilon"] or 0.0 for r in table) <= budget  # the basic sum too
    set_at = next(r["created_at"] for r in table if r["kind"] == "budget")
    b_rows = [r["created_at"] for r in table if r["run_id"] == "B"]
    assert b_rows and all(set_at - t > timedelta(hours=1.9) for t in b_rows)  # B's clock is behind


def _expire_log(location: str) -> None:
    """Real delta-rs log cleanup: a 1 s log retention, a checkpoint, and the expired commit
    files removed (what delta-rs' post-commit checkpoints and Databricks do after 30 days)."""
    table = DeltaTable(location)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 1 second"})
    time.sleep(1.5)
    table = DeltaTable(location)
    table.create_checkpoint()
    table.cleanup_metadata()


def test_a_settled_race_stays_charged_after_its_commits_leave_the_log(tmp_path):
    """A raced pair: B builds its reservation row, then pauses before its append; A reserves,
    commits first and is released; B commits later, is not admitted and cancels itself. Then
    the ledger's commit files expire and the rows fall back to the writers' clocks, which put
    B's reservation first: the released run must stay charged and the cancelled one not, and a
    further run that the true spend does not fit is refused (re-deciding admissions from the
    clocks read A as not admitted and B as cancelled: spent 0)."""
    from gpope.core.accounting.budget import UNKNOWN_VERSION
    from gpope.errors import BudgetExceededError

    lake = tmp_path / "lake"
    claim = _claim()
    budget = 1.2 * claim
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(lake)}))
    ledger.set_budget("d", epsilon=budget, delta=DELTA)
    release = tmp_path / "go"
    b = _writer(lake, "B", claim, f"ledger.before_append:wait={release}")
    _wait_for(Path(f"{release}.reached"), b)
    a = _writer(lake, "A", claim, None)
    assert a.communicate(timeout=120) and a.returncode == 0
    release.touch()
    b.communicate(timeout=120)
    assert b.returncode == 3
    before = ledger.status("d")
    assert [r.run_id for r in before.counted] == ["A"]

    _expire_log(ledger.location)
    rows = ledger._store.rows()
    assert {r["run_id"] for r in rows if r["version"] == UNKNOWN_VERSION} >= {"A", "B"}
    # expired commits fall back to the writers' clocks, which put B's reservation first
    b_first = min(r["created_at"] for r in rows if r["run_id"] == "B")
    assert b_first < min(r["created_at"] for r in rows if r["run_id"] == "A")
    after = ledger.status("d")
    assert [r.run_id for r in after.counted] == ["A"]
    assert after.spent_epsilon == pytest.approx(before.spent_epsilon)
    assert {r.run_id: r.status for r in after.runs} == {"A": "released", "B": "cancelled"}
    with pytest.raises(BudgetExceededError):
        ledger.reserve(Charge.of_event(dp_accounting.GaussianDpEvent(SIGMA), dataset="d",
                                       run_id="C", epsilon=claim, delta=DELTA, accountant="rdp"))
    assert [r.run_id for r in ledger.status("d").counted] == ["A"]

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
from gpope.shell.pipeline.ledger import PrivacyLedger

lake, run_id, eps = sys.argv[1], sys.argv[2], float(sys.argv[3])
ledger = PrivacyLedger(None, load_config(None, lake={{"root": lake}}))
try:
    ledger.reserve("d", run_id=run_id, epsilon=eps, delta={DELTA!r}, accountant="rdp",
                   event=dp_accounting.GaussianDpEvent({SIGMA!r}), relation="add_or_remove_one")
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

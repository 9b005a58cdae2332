"""The ledger's Spark store decides by commit order too.

``SparkLedgerStore`` reads and appends through the Spark table layer's store: native Delta where
the Delta classes load (Databricks), else delta-rs under Spark. This machine has no Delta JARs,
so the first test runs the Spark store's code end to end on the delta-rs table store under a
real SparkSession; the native store differs only in where a commit keeps the ledger's row
identities (inside ``userMetadata``, next to the table layer's commit token), which the second
test feeds, exactly as ``DESCRIBE HISTORY`` returns it, to the same commit-order decision.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import dp_accounting
import pytest
from dp_accounting.rdp import RdpAccountant

from gpope.config import load_config
from gpope.core.accounting.admission import Charge
from gpope.core.accounting.budget import Budget, LedgerRow, fold
from gpope.core.accounting.composition import mechanism_to_json
from gpope.errors import BudgetExceededError
from gpope.shell import faults
from gpope.shell.lake.native import with_commit_token
from gpope.shell.pipeline import ledger as ledger_mod
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.ledger_store import (
    ROWS_KEY,
    SparkLedgerStore,
    _commit_rows,
    _versions,
    _with_versions,
    rows_metadata,
)

SIGMA, DELTA = 2.0, 1e-6


def _claim() -> float:
    acc = RdpAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(SIGMA))
    return float(acc.get_epsilon(DELTA))


def test_spark_store_admits_the_first_commit_not_the_older_clock(spark, tmp_path, monkeypatch):
    """B (clock 2 h behind) is checked and built first, but A commits first: B is refused."""
    config = load_config(None, lake={"root": str(tmp_path / "lake")})
    ledger_a = PrivacyLedger(spark, config, store=SparkLedgerStore(spark, config))
    ledger_b = PrivacyLedger(spark, config, store=SparkLedgerStore(spark, config))
    claim = _claim()
    ledger_a.set_budget("d", epsilon=1.2 * claim, delta=DELTA)
    kw = dict(dataset="d", epsilon=claim, delta=DELTA, accountant="rdp")
    event = dp_accounting.GaussianDpEvent(SIGMA)

    point = faults.point

    def a_commits_while_b_waits(name: str) -> None:
        if name == "ledger.before_append" and not ran:
            ran.append(True)
            monkeypatch.delenv(faults.ENV)  # A's clock is right
            ledger_a.reserve(Charge.of_event(event, run_id="A", **kw))
        point(name)

    ran: list[bool] = []
    monkeypatch.setenv(faults.ENV, "clock=-7200")
    monkeypatch.setattr(ledger_mod.faults, "point", a_commits_while_b_waits)
    with pytest.raises(BudgetExceededError, match="exceeded"):
        ledger_b.reserve(Charge.of_event(event, run_id="B", **kw))

    status = ledger_a.status("d")
    assert [r.run_id for r in status.counted] == ["A"]
    assert status.spent_epsilon == pytest.approx(claim) and status.spent_epsilon <= 1.2 * claim
    assert {r.run_id: r.status for r in status.runs}["B"] == "cancelled"
    rows = SparkLedgerStore(spark, config).rows("d")
    assert all(r["version"] >= 0 for r in rows)  # every row's commit is known
    created = {(r["run_id"], r["kind"]): r["created_at"] for r in rows}
    assert created[("B", "reservation")] < created[("A", "reservation")] - timedelta(hours=1.9)
    versions = {(r["run_id"], r["kind"]): r["version"] for r in rows}
    assert versions[("A", "reservation")] < versions[("B", "reservation")]


def _reservation(run_id: str, created_at: datetime, eps: float) -> dict:
    return {"dataset": "d", "run_id": run_id, "kind": "reservation", "status": "reserved",
            "mechanism": mechanism_to_json(dp_accounting.GaussianDpEvent(SIGMA),
                                           "add_or_remove_one"),
            "epsilon": eps, "delta": DELTA, "accountant": "rdp", "created_at": created_at,
            "charged_epsilon": eps, "charged_delta": DELTA, "valid_bound": True}


def test_native_history_metadata_gives_the_same_commit_order_decision():
    """userMetadata as the native store writes it (the row identities under ROWS_KEY plus the
    commit token), in DESCRIBE HISTORY's order (newest first, with commits of other writers and
    maintenance that carry none): the commit order, not the clocks, decides."""
    claim = _claim()
    now = datetime(2030, 1, 1, 12, 0)
    late = _reservation("A", now, claim)  # A's clock is right, its commit is first
    early = _reservation("B", now - timedelta(hours=2), claim)  # B's clock is behind

    def native(rows: list[dict]) -> str:
        return with_commit_token(json.dumps({ROWS_KEY: _commit_rows(rows)}))[0]

    history = [  # (version, userMetadata), newest first
        (4, None),  # an OPTIMIZE
        (3, native([early])),
        (2, json.dumps({"gpope.mode": "append"})),  # some other writer's commit
        (1, native([late])),
        (0, None),  # CREATE TABLE
    ]
    assert json.loads(rows_metadata({"userMetadata": history[1][1]})) == [
        LedgerRow.from_mapping(early).key]
    assert rows_metadata({ROWS_KEY: "x"}) == "x"  # delta-rs keeps it at the top level
    assert rows_metadata({"userMetadata": "not json"}) is None
    versions = _versions((v, rows_metadata({"userMetadata": m})) for v, m in history)
    rows = _with_versions([early, late], versions)
    assert [r["version"] for r in rows] == [3, 1]

    status = fold("d", [LedgerRow.from_mapping(r) for r in rows],
                  default=Budget(epsilon=1.2 * claim, delta=DELTA, source="test"),
                  composition="rdp")
    assert [r.run_id for r in status.counted] == ["A"]
    assert not status.entry("B").admitted

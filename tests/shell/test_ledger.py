"""The privacy ledger: budgets, tight and basic composition, refusal that writes nothing, budget
authority, reconciliation of killed runs; on real Delta tables (delta-rs, no JVM) and the CLI."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import dp_accounting
import numpy as np
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

from gpope.cli import main
from gpope.config import load_config
from gpope.core.accounting import epsilon_spent, gpope_dp_event
from gpope.core.accounting.admission import Charge
from gpope.core.accounting.budget import LedgerRow, fold
from gpope.core.accounting.composition import (
    FILTER_ORDERS,
    filter_epsilon,
    mechanism_from_json,
    mechanism_to_json,
    rdp_curve,
)
from gpope.errors import BudgetExceededError, ConfigError
from gpope.shell.pipeline.ledger import PrivacyLedger, _default_budget, budget_status_table
from gpope.shell.pipeline.ledger_store import DeltaRsLedgerStore

REPO = Path(__file__).resolve().parents[2]
M, N, SIGMA = 1000, 2000, 1.7  # a Poisson GPOPE run at q = 1/m


def _event(sigma=SIGMA, iterations=N):
    return gpope_dp_event(m=M, iterations=iterations, sigma=sigma, sampling="poisson",
                          batch_rate=1.0 / M)


def _claim(sigma=SIGMA, delta=1e-6):
    return epsilon_spent(m=M, iterations=N, sigma=sigma, delta=delta, accountant="rdp",
                         sampling="poisson", batch_rate=1.0 / M)


def _row(run_id, status, eps, delta, minute, dataset="d", mechanism="m"):
    return {"dataset": dataset, "run_id": run_id, "mechanism": mechanism, "epsilon": eps,
            "delta": delta, "accountant": "pld", "status": status,
            "created_at": datetime(2024, 1, 1) + timedelta(minutes=minute)}


def _config(root, **privacy):
    return load_config(None, lake={"root": str(root)}, privacy=privacy or None)


# ---------------------------------------------------------------------- pure folding
def test_basic_composition_counts_reserved_released_failed_not_cancelled():
    """Rows without a stored event (written before events were stored) compose basically."""
    config = load_config(None)
    rows = [
        {**_row("o1", "origin", 0.0, 0.0, 0), "kind": "origin"},  # gpope simulate's record
        _row("b1", "budget", 5.0, 1e-4, 0),
        _row("b2", "budget", 4.0, 1e-4, 1),  # the latest budget applies
        _row("r1", "reserved", 1.0, 1e-5, 2), _row("r1", "released", 1.0, 1e-5, 3),
        _row("r2", "reserved", 0.5, 1e-6, 4), _row("r2", "failed", 0.5, 1e-6, 5),
        _row("r3", "reserved", 0.25, 1e-6, 6),  # still open: counted
        _row("r4", "reserved", 2.0, 1e-6, 7), _row("r4", "cancelled", 2.0, 1e-6, 8),
    ]
    rule = dict(default=_default_budget(config), composition=config.privacy.composition)
    status = fold("d", [LedgerRow.from_mapping(r) for r in rows], **rule)
    assert status.composition == "basic" and status.spent_epsilon_tight is None
    assert status.budget_epsilon == 4.0
    assert status.spent_epsilon == pytest.approx(1.75)
    assert status.spent_delta == pytest.approx(1.2e-5)
    assert status.remaining_epsilon == pytest.approx(2.25)
    assert {r.run_id: r.status for r in status.runs} == {
        "r1": "released", "r2": "failed", "r3": "reserved", "r4": "cancelled"}
    assert status.runs_left == 9  # like the latest counted run (0.25, 1e-6): 2.25 / 0.25
    default = fold("other", [], **rule)
    assert (default.budget_epsilon, default.budget_delta) == (3.0, 1e-5)


def test_mechanism_json_round_trip_and_legacy_repr():
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(3.0), _event(),
        dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
            100, 1, dp_accounting.GaussianDpEvent(2.0)), 5)])
    stored = mechanism_from_json(mechanism_to_json(event, "add_or_remove_one", "tuning+gpope"))
    assert stored.event == event and stored.relation == "add_or_remove_one"
    legacy = mechanism_from_json("gpope(clip=1): " + repr(_event()))  # rows of the old format
    assert legacy.event == _event() and legacy.relation == "add_or_remove_one"
    assert mechanism_from_json("x") is None


def test_filter_epsilon_matches_dp_accounting_composition():
    """Oracle: dp-accounting composes the k runs itself; the filter converts at delta / |L|."""
    k, delta = 7, 1e-5
    acc = RdpAccountant(orders=list(FILTER_ORDERS))
    acc.compose(dp_accounting.SelfComposedDpEvent(_event(), k))
    expected = compute_epsilon(list(FILTER_ORDERS), acc._rdp, delta / len(FILTER_ORDERS))[0]
    curve = rdp_curve(mechanism_from_json(mechanism_to_json(_event(), "add_or_remove_one")))
    assert filter_epsilon([("add_or_remove_one", curve)] * k, delta) == pytest.approx(expected)
    # the union over orders costs something, never less than plain RDP at delta
    assert expected >= compute_epsilon(list(FILTER_ORDERS), acc._rdp, delta)[0]


# ---------------------------------------------------------------------- on Delta, no JVM
def test_tight_composition_admits_more_runs_than_basic(tmp_path):
    """Same budget, same runs: the basic sum stops at 10 runs (delta), the RDP filter goes on."""
    eps = _claim()
    ledger = PrivacyLedger(None, _config(tmp_path / "lake"))
    basic = PrivacyLedger(None, _config(tmp_path / "lake2", composition="basic"))
    admitted = {"tight": 0, "basic": 0}
    for name, led in (("tight", ledger), ("basic", basic)):
        led.set_budget("d", epsilon=3.0, delta=1e-5)
        for i in range(25):
            try:
                led.reserve(Charge.of_event(_event(), relation="add_or_remove_one", dataset="d",
                                            run_id=f"r{i}", epsilon=eps, delta=1e-6,
                                            accountant="rdp"))
            except BudgetExceededError:
                break
            admitted[name] += 1
    assert admitted["basic"] == 10  # delta 1e-5 / 1e-6
    assert admitted["tight"] == 25
    status = ledger.status("d")
    acc = RdpAccountant(orders=list(FILTER_ORDERS))
    acc.compose(dp_accounting.SelfComposedDpEvent(_event(), 25))
    oracle = compute_epsilon(list(FILTER_ORDERS), acc._rdp, 1e-5 / len(FILTER_ORDERS))[0]
    assert status.spent_epsilon == pytest.approx(oracle) and status.composition == "rdp"
    assert status.spent_epsilon_basic == pytest.approx(25 * eps)
    assert status.runs_left > 25  # more runs like these still fit
    # the table is hard to misread: SUM(charged_epsilon) is the basic spend
    table = DeltaTable(ledger.location).to_pyarrow_table()
    assert sum(table.column("charged_epsilon").to_pylist()) == pytest.approx(25 * eps)
    schema = json.loads(DeltaTable(ledger.location).schema().to_json())
    comments = {f["name"]: f["metadata"].get("comment") for f in schema["fields"]}
    assert "Never sum" in comments["epsilon"] and comments["kind"]
    assert "Do NOT sum" in DeltaTable(ledger.location).metadata().description


def test_refusal_writes_nothing_and_race_recheck_cancels(tmp_path):
    config = _config(tmp_path / "lake", composition="basic")
    ledger = PrivacyLedger(None, config)
    ledger.set_budget("d", epsilon=2.0, delta=1e-5)
    ledger.reserve(Charge.of_event(_event(), dataset="d", run_id="a", epsilon=1.5, delta=5e-6,
                                   accountant="pld"))
    version = DeltaTable(ledger.location).version()
    with pytest.raises(BudgetExceededError, match=r"would spend epsilon 2\.5"):
        ledger.reserve(Charge.of_event(_event(), dataset="d", run_id="b", epsilon=1.0, delta=1e-6,
                                       accountant="pld"))
    assert DeltaTable(ledger.location).version() == version  # nothing written
    ledger.mark("d", "a", "failed")  # failed stays counted
    assert ledger.status("d").spent_epsilon == pytest.approx(1.5)
    with pytest.raises(ConfigError, match="no open reservation"):
        ledger.mark("d", "a", "released")
    with pytest.raises(ConfigError, match="at least"):
        ledger.set_budget("d", epsilon=1.0, delta=1e-5)

    class Racing(DeltaRsLedgerStore):
        """A real store where another process appends its reservation just before ours."""

        raced = False

        def append(self, rows):
            if not self.raced and rows[0]["kind"] == "reservation":
                self.raced = True
                other = {**rows[0], "run_id": "other", "created_at": rows[0]["created_at"]
                         - timedelta(milliseconds=1)}
                super().append([other])
            super().append(rows)

    racing = PrivacyLedger(None, config, store=Racing(ledger.location))
    with pytest.raises(BudgetExceededError, match="concurrent"):
        racing.reserve(Charge.of_event(_event(), dataset="d", run_id="c", epsilon=0.4, delta=1e-6,
                                       accountant="pld"))
    runs = {r.run_id: r.status for r in ledger.status("d").runs}
    assert runs["other"] == "reserved" and runs["c"] == "cancelled"
    assert ledger.status("d").spent_epsilon == pytest.approx(1.9)


def test_paper_run_is_recorded_as_not_a_valid_bound_and_charged_rigorously(tmp_path):
    ledger = PrivacyLedger(None, _config(tmp_path / "lake", composition="basic"))
    ledger.set_budget("d", epsilon=50.0, delta=1e-5)
    event = gpope_dp_event(m=1000, iterations=1000, sigma=3.0, sampling="uniform")
    rigorous = epsilon_spent(m=1000, iterations=1000, sigma=3.0, delta=1e-6, accountant="rdp")
    claimed = epsilon_spent(m=1000, iterations=1000, sigma=3.0, delta=1e-6, accountant="paper")
    assert rigorous > 2 * claimed
    ledger.reserve(Charge.of_event(event, relation="replace_one", dataset="d", run_id="p",
                                   epsilon=claimed, delta=1e-6, accountant="paper",
                                   charged_epsilon=rigorous, valid_bound=False))
    status = ledger.status("d")
    (run,) = status.runs
    assert not run.valid_bound and run.charged_epsilon == pytest.approx(rigorous)
    assert status.spent_epsilon == pytest.approx(rigorous)
    assert "NOT a valid bound" in status.summary()
    assert budget_status_table(ledger._config).to_pylist()[0]["invalid_runs"] == 1


def test_reconcile_settles_stale_reservations_from_the_evidence(tmp_path):
    config = _config(tmp_path / "lake")
    ledger = PrivacyLedger(None, config)
    ledger.set_budget("d", epsilon=3.0, delta=1e-5)
    ledger.reserve(Charge.of_event(_event(), dataset="d", run_id="alive", epsilon=0.1, delta=1e-7,
                                   accountant="pld"))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    template = next(r for r in ledger._store.rows("d") if r["kind"] == "reservation")
    for run_id in ("killed_before_release", "killed_after_release"):  # as a killed run left them
        ledger._store.append([{**template, "run_id": run_id, "created_at": datetime.utcnow(),
                               "process": f"{socket.gethostname()}:{dead.pid}"}])
    released = tmp_path / "lake" / "gold" / "released_estimates"
    write_deltalake(str(released), pa.table({"run_id": ["killed_after_release"]}))
    done = {s.run_id: s.status for s in ledger.reconcile("d")}
    assert done == {"killed_after_release": "released", "killed_before_release": "failed"}
    status = ledger.status("d")
    assert {r.run_id: r.status for r in status.runs} == {
        "alive": "reserved", "killed_before_release": "failed",
        "killed_after_release": "released"}
    assert status.spent_epsilon_basic == pytest.approx(0.3)  # failed stays counted
    assert ledger.reconcile("d") == []  # settled once
    assert ledger.mark("d", "killed_after_release", "released").status == "released"  # no-op


def test_budget_authority_and_unknown_datasets(tmp_path, capsys):
    lake = tmp_path / "ward 7é#x" / "lake"  # hostile path: space, non-ASCII, '#'
    (lake / "bronze" / "hiv_demo" / "observations").mkdir(parents=True)
    common = ["--lake", str(lake)]
    assert main(["budget", "show", "--dataset", "hiv_dem", *common]) == 2
    err = capsys.readouterr().err
    assert "Unknown dataset 'hiv_dem'" in err and "Did you mean 'hiv_demo'" in err
    assert str(lake) in err and len(err.strip().splitlines()) == 1
    assert main(["budget", "set", "--dataset", "hiv_demo", "--epsilon", "0", "--delta", "1e-5",
                 *common]) == 2
    assert "must be > 0" in capsys.readouterr().err
    assert main(["budget", "set", "--dataset", "hiv_demo", "--epsilon", "2", "--delta", "1e-5",
                 *common]) == 0
    capsys.readouterr()
    assert main(["budget", "set", "--dataset", "hiv_demo", "--epsilon", "4", "--delta", "1e-5",
                 *common]) == 2
    assert "needs --force" in capsys.readouterr().err
    assert main(["budget", "set", "--dataset", "hiv_demo", "--epsilon", "4", "--delta", "1e-5",
                 "--force", "--json", *common]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["budget"]["epsilon"] == 4.0 and shown["lake"] == str(lake)
    assert "by " in shown["budget"]["source"]
    table = DeltaTable(str(lake / "gold" / "privacy_ledger")).to_pyarrow_table().to_pylist()
    raised = [r for r in table if r["note"] and "--force" in r["note"]]
    assert len(raised) == 1 and raised[0]["actor"] and raised[0]["created_at"]
    assert not any("%" in p.name for p in lake.parent.parent.iterdir())  # no encoded sibling
    from gpope.shell.pipeline.ledger_store import DeltaRsLedgerStore as Store

    assert all(r["version"] >= 0 for r in Store(str(lake / "gold" / "privacy_ledger")).rows())


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter that imports this checkout's gpope."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=60)


def test_budget_show_starts_no_jvm(tmp_path):
    """`gpope budget show/set` never import pyspark (no JVM) on a local lake."""
    lake = tmp_path / "lake"
    (lake / "silver" / "d").mkdir(parents=True)
    code = (
        "import sys; from gpope.cli import main; "
        f"assert main(['budget', 'set', '--dataset', 'd', '--epsilon', '1', '--delta', '1e-6', '--lake', {str(lake)!r}]) == 0; "
        f"assert main(['budget', 'show', '--dataset', 'd', '--lake', {str(lake)!r}]) == 0; "
        "assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    out = _fresh_python(code)
    assert out.returncode == 0, out.stderr
    assert "remaining budget: epsilon 1" in out.stdout


def test_remaining_says_when_no_further_run_is_possible(tmp_path):
    ledger = PrivacyLedger(None, _config(tmp_path / "lake", composition="basic"))
    ledger.set_budget("d", epsilon=3.0, delta=1e-5)
    ledger.reserve(Charge.of_event(_event(), dataset="d", run_id="a", epsilon=1.0, delta=1e-5,
                                   accountant="pld"))
    status = ledger.status("d")
    assert status.runs_left == 0 and status.no_further_run
    assert "no further run is possible" in status.remaining_line()
    rows = budget_status_table(ledger._config).to_pylist()
    assert rows[0]["runs_left"] == 0 and rows[0]["remaining_epsilon"] == pytest.approx(2.0)
    assert np.isclose(rows[0]["spent_epsilon_basic"], 1.0)


def test_errors_do_not_quote_private_data_values():
    from gpope.core.features import TabularFeatures
    from gpope.errors import DataError

    with pytest.raises(DataError) as err:
        TabularFeatures(4).indices(np.array([[1.0], [7654.0]]))
    assert "7654" not in str(err.value)


def test_a_dataset_refuses_runs_under_a_second_neighbouring_relation(tmp_path):
    """Adding a Poisson (add/remove) epsilon to a uniform (replace-one) one is not a valid bound."""
    ledger = PrivacyLedger(None, _config(tmp_path / "lake"))
    ledger.set_budget("d", epsilon=10.0, delta=1e-5)
    uniform = gpope_dp_event(m=1000, iterations=1000, sigma=3.0, sampling="uniform")
    ledger.reserve(Charge.of_event(uniform, relation="replace_one", dataset="d", run_id="u",
                                   epsilon=1.0, delta=1e-6, accountant="rdp"))
    with pytest.raises(ConfigError, match="--sampling uniform"):
        ledger.reserve(Charge.of_event(_event(), dataset="d", run_id="p", epsilon=0.5, delta=1e-6,
                                       accountant="pld"))
    assert [r.run_id for r in ledger.status("d").runs] == ["u"]  # nothing written
    ledger.reserve(Charge.of_event(uniform, relation="replace_one", dataset="d", run_id="u2",
                                   epsilon=1.0, delta=1e-6, accountant="rdp"))
    ledger.set_budget("e", epsilon=10.0, delta=1e-5)  # another dataset may use Poisson
    ledger.reserve(Charge.of_event(_event(), dataset="e", run_id="p", epsilon=0.5, delta=1e-6,
                                   accountant="pld"))


def test_budget_show_exits_cleanly_every_time(tmp_path):
    """A threaded delta-rs scan aborted about half the processes at exit (code 134, after the
    output was printed); five runs in a row all exit 0 (on the old read: ~3% chance)."""
    lake = tmp_path / "lake"
    (lake / "silver" / "d").mkdir(parents=True)
    PrivacyLedger(None, _config(lake)).set_budget("d", epsilon=1.0, delta=1e-6)
    code = ("import sys; from gpope.cli import main; "
            f"sys.exit(main(['budget', 'show', '--dataset', 'd', '--lake', {str(lake)!r}]))")
    for _ in range(5):
        out = _fresh_python(code)
        assert out.returncode == 0, (out.returncode, out.stderr[-500:])


def test_a_failure_after_the_reservation_says_what_is_charged_and_how_to_settle_it():
    from gpope.errors import CommitError, DataError
    from gpope.shell.pipeline.after_release import failed_before_release

    cause = DataError("no statistics rows for the spec")
    told = failed_before_release(cause, "r1", dataset="ward", epsilon=1.0, delta=1e-6)
    assert type(told) is DataError and "no statistics rows" in str(told)
    assert "epsilon 1, delta 1e-06 stay charged" in str(told)
    assert "nothing was released" in str(told) and "recorded as failed" in str(told)
    # the ledger could not record the failure (a read-only lake): the settle command is named
    stuck = failed_before_release(cause, "r1", dataset="ward", epsilon=1.0, delta=1e-6,
                                  mark_error=CommitError("Could not append ... Nothing was "
                                                         "committed"))
    assert isinstance(stuck, CommitError)
    assert "gpope budget reconcile --dataset ward" in str(stuck) and "still open" in str(stuck)
    assert str(stuck).index("stay charged") < str(stuck).index("Nothing was committed")
    # the ledger's own error (which states the charge itself): its append cause, stated once
    ledger_error = CommitError("The ledger could not record run r1 ... stay charged ... run "
                               "`gpope budget reconcile --dataset ward` to settle it")
    ledger_error.append_error = OSError("Permission denied (os error 13)")
    once = str(failed_before_release(cause, "r1", dataset="ward", epsilon=1.0, delta=1e-6,
                                     mark_error=ledger_error))
    assert once.count("budget reconcile") == 1 and once.count("stay charged") == 1, once
    assert "OSError: Permission denied" in once
    other = KeyError("x")
    assert failed_before_release(other, "r1", dataset="ward", epsilon=1.0, delta=1e-6) is other

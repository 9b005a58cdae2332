"""The ledger cannot be lowered by editing or losing it: forged commits, missing data files and
removed or older ledgers are refused or re-charged, and a failure after a reservation says what
stands; on real Delta tables (delta-rs, no JVM), the CLI and a really read-only lake."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from gpope.cli import main
from gpope.config import load_config
from gpope.core.accounting.admission import Charge
from gpope.errors import BudgetExceededError, ConfigError, CorruptTableError
from gpope.shell.lake.maintain import maintain_lake
from gpope.shell.pipeline.ledger import PrivacyLedger

REPO = Path(__file__).resolve().parents[2]


def _ledger(lake: Path) -> PrivacyLedger:
    return PrivacyLedger(None, load_config(None, lake={"root": str(lake)}))


def _spent_ledger(lake: Path) -> PrivacyLedger:
    """Budget 1.0 on dataset d, one released run of 0.8 (basic composition: no stored event)."""
    (lake / "silver" / "d").mkdir(parents=True)
    ledger = _ledger(lake)
    ledger.set_budget("d", epsilon=1.0, delta=1e-5)
    ledger.reserve(Charge(dataset="d", run_id="r1", epsilon=0.8, delta=1e-6, accountant="rdp",
                          mechanism="m"))
    ledger.mark("d", "r1", "released")
    return ledger


def _forge(ledger: PrivacyLedger, actions: list[dict]) -> None:
    log = Path(ledger.location) / "_delta_log"
    version = DeltaTable(ledger.location).version() + 1
    (log / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))


def _show(lake: Path, capsys) -> tuple[int, str]:
    code = main(["budget", "show", "--dataset", "d", "--lake", str(lake)])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("forgery", ["no_commit_info", "delete", "dropping_compaction"])
def test_a_commit_gpope_does_not_write_is_refused_not_folded(tmp_path, forgery, capsys):
    """Removing the run's rows would show spent 0; each forged commit is refused in one line
    naming the table and the repair, by `budget show` and before a reservation."""
    lake = tmp_path / "lake"
    ledger = _spent_ledger(lake)
    files = DeltaTable(ledger.location).file_uris()
    reserved = next(f for f in files if any(r["status"] == "reserved" for r in
                                            pq.read_table(f).to_pylist()))
    removes = [{"remove": {"path": Path(f).name, "dataChange": forgery == "delete",
                           "deletionTimestamp": 1}} for f in files if f != reserved]
    removes.append({"remove": {"path": Path(reserved).name, "dataChange": forgery == "delete",
                               "deletionTimestamp": 1}})
    info = {"commitInfo": {"timestamp": 1, "operation": {"delete": "DELETE",
                                                         "dropping_compaction": "OPTIMIZE"}
                           .get(forgery, "WRITE")}}
    _forge(ledger, removes if forgery == "no_commit_info" else [info, *removes])
    code, err = _show(lake, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"The privacy ledger at {ledger.location}" in err and "from a backup" in err
    assert {"no_commit_info": "without commitInfo", "delete": "removes rows",
            "dropping_compaction": "no longer holds"}[forgery] in err, err
    with pytest.raises(CorruptTableError):
        ledger.reserve(Charge(dataset="d", run_id="r2", epsilon=0.8, delta=1e-6, accountant="rdp",
                              mechanism="m"))


def test_maintain_compaction_keeps_the_ledger_readable(tmp_path):
    """`gpope maintain` rewrites the ledger's files (OPTIMIZE, no data change): still read,
    same spend."""
    lake = tmp_path / "lake"
    ledger = _spent_ledger(lake)
    before = DeltaTable(ledger.location).version()
    maintain_lake(load_config(None, lake={"root": str(lake)}).lake, retention_hours=0)
    assert DeltaTable(ledger.location).version() > before  # a compaction commit
    assert ledger.status("d").spent_epsilon == pytest.approx(0.8)


def test_a_missing_ledger_data_file_is_one_line(tmp_path, capsys):
    lake = tmp_path / "lake"
    ledger = _spent_ledger(lake)
    Path(DeltaTable(ledger.location).file_uris()[0]).unlink()
    code, err = _show(lake, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"privacy ledger at {ledger.location} cannot be read" in err and "backup" in err
    code = main(["query", "SELECT * FROM budget_status", "--lake", str(lake)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot be read" in err, err


def _release(lake: Path, run_id: str, epsilon: float) -> None:
    """A row of ``released_estimates`` as a release leaves it (the columns the ledger reads)."""
    write_deltalake(str(lake / "gold" / "released_estimates"), pa.table({
        "run_id": [run_id], "dataset": ["d"], "epsilon": [epsilon], "delta": [1e-6],
        "accountant": ["rdp"], "private": [True]}), mode="append")


def test_a_removed_or_older_ledger_does_not_reset_the_budget(tmp_path, capsys):
    """One release of 0.8 in the lake; the ledger removed: `budget show` and `budget set` refuse
    naming the run and `gpope budget reconcile`; a reservation re-charges it first, so a run the
    true spend does not fit is refused. An older ledger copy is re-charged the same way."""
    lake = tmp_path / "lake"
    ledger = _spent_ledger(lake)
    older = tmp_path / "older_ledger"
    shutil.copytree(ledger.location, older)  # before the second release
    _release(lake, "r1", 0.8)
    ledger.set_budget("d", epsilon=2.0, delta=1e-5, force=True)
    ledger.reserve(Charge(dataset="d", run_id="r2", epsilon=0.5, delta=1e-6, accountant="rdp",
                          mechanism="m"))
    ledger.mark("d", "r2", "released")
    _release(lake, "r2", 0.5)

    shutil.rmtree(ledger.location)
    code, err = _show(lake, capsys)
    assert code == 2 and "does not know 2 run(s) released in the lake: r1 (d, epsilon 0.8" in err
    assert "`gpope budget reconcile --dataset d`" in err and len(err.strip().splitlines()) == 1
    assert main(["budget", "set", "--dataset", "d", "--epsilon", "1.5", "--delta", "1e-5",
                 "--lake", str(lake)]) == 2
    assert "does not know 2 run(s)" in capsys.readouterr().err
    with pytest.raises(BudgetExceededError, match=r"spent epsilon 1\.3,"):  # default budget 3
        ledger.reserve(Charge(dataset="d", run_id="r3", epsilon=1.8, delta=1e-6, accountant="rdp",
                              mechanism="m"))
    assert ledger.status("d").spent_epsilon == pytest.approx(1.3)
    assert main(["budget", "set", "--dataset", "d", "--epsilon", "1.5", "--delta", "1e-5",
                 "--lake", str(lake)]) == 0
    capsys.readouterr()
    with pytest.raises(BudgetExceededError, match="gpope budget set --dataset d --epsilon E "
                                                  "--delta D --force"):
        ledger.reserve(Charge(dataset="d", run_id="r4", epsilon=0.5, delta=1e-6, accountant="rdp",
                              mechanism="m"))

    shutil.rmtree(ledger.location)
    shutil.copytree(older, ledger.location)  # an older copy: knows r1, not r2
    code, err = _show(lake, capsys)
    assert code == 2 and "does not know 1 run(s) released in the lake: r2" in err
    assert main(["budget", "reconcile", "--dataset", "d", "--lake", str(lake)]) == 0
    assert "r2: released (released in released_estimates but unknown" in capsys.readouterr().out
    assert ledger.status("d").spent_epsilon == pytest.approx(1.3)
    assert _show(lake, capsys)[0] == 0


def test_a_release_manifest_whose_charge_is_lost_is_refused(tmp_path, capsys):
    """A release manifest (pipeline_runs, stage release) of a run that neither the ledger nor the
    release tables know cannot be re-charged (it records no epsilon): show and reserve refuse."""
    lake = tmp_path / "lake"
    ledger = _spent_ledger(lake)
    write_deltalake(str(lake / "gold" / "pipeline_runs"), pa.table({
        "run_id": ["r1"], "stage": ["release"], "dataset": ["d"]}))
    assert _show(lake, capsys)[0] == 0  # r1 is in the ledger
    shutil.rmtree(ledger.location)
    code, err = _show(lake, capsys)
    assert code == 2 and "pipeline_runs records 1 release(s)" in err and ": r1 (d)." in err
    with pytest.raises(ConfigError, match="restore the ledger"):
        ledger.reserve(Charge(dataset="d", run_id="r2", epsilon=0.1, delta=1e-6, accountant="rdp",
                              mechanism="m"))
    assert not Path(ledger.location).exists()  # nothing written


WRITER = """
import subprocess, sys
from gpope.config import load_config
from gpope.shell.pipeline.ledger import Charge, PrivacyLedger
lake = sys.argv[1]
ledger = PrivacyLedger(None, load_config(None, lake={"root": lake}))
ledger.set_budget("d", epsilon=2.0, delta=1e-5)
ledger.reserve(Charge(dataset="d", run_id="R", epsilon=1.0, delta=1e-6, accountant="rdp",
                      mechanism="m"))
subprocess.run(["chmod", "-R", "a-w", lake], check=True)  # the lake turns read-only
ledger.mark("d", "R", "failed")
"""


def _others_can_enter(path: Path) -> bool:
    """Every folder from / down to ``path`` lets other users through (o+x): the unprivileged
    writer must import gpope from this checkout (a clone under a 0700 mktemp folder does not)."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="runs the writer as an unprivileged user (needs root to switch)")
@pytest.mark.skipif(not _others_can_enter(REPO),
                    reason="the unprivileged writer cannot reach this checkout (a folder above it "
                    "is closed to other users)")
def test_a_read_only_lake_after_the_reservation_says_what_stands(tmp_path):
    """As an unprivileged user (root ignores file modes): the reservation commits, the lake turns
    read-only, the settlement fails. The error says the reservation is committed and charged and
    names `gpope budget reconcile`; no 'Nothing was committed', no Rust panic."""
    base = Path(tempfile.mkdtemp(prefix="gpope-ro-"))
    try:
        base.chmod(0o777)
        env = {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(base)}
        out = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c",
             WRITER, str(base / "lake")],
            capture_output=True, text=True, env=env, timeout=120, cwd=base)
        assert out.returncode == 1, out
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("gpope.errors.CommitError: The ledger could not record run R of "
                               "dataset 'd' as failed ("), last
        assert "is committed: epsilon 1, delta 1e-06 stay charged" in last
        assert "`gpope budget reconcile --dataset d`" in last
        assert "Nothing was committed" not in out.stderr and "panicked" not in out.stderr
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)

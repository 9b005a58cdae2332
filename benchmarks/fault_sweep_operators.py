"""Trials of the fault sweep that check what an operator is told (issue 40), beside nothing lost.

Each trial runs the real ``gpope`` command line on its own copy of the sweep's template lake
(:mod:`fault_sweep`) and checks the behaviour the product promises, then (where the lake is
meant to stay whole) the sweep's "nothing lost" check:

- **read-only lake after the reservation**: ``evaluate`` paused right after its ledger
  reservation while the lake is made immutable; it fails with one line saying what was committed
  and charged and naming ``gpope budget reconcile``, never "nothing was committed", and no Rust
  or Java trace;
- **dataset names differing only in case**: ``simulate``, ``load`` and ``ingest`` of ``Sweep``
  beside ``sweep`` are refused in one line quoting the existing name, and write nothing;
- **stale statistics**: a larger cohort simulated and ingested after ``stats``: ``evaluate``
  refuses in one line naming ``gpope stats`` and reserves nothing; with ``--allow-stale-stats``
  it releases from the older statistics and records it (``--json`` warning, MLflow tag); after
  ``stats`` the release counts the new cohort;
- **unreachable MLflow under a scheduler's timeout**: ``evaluate`` with a tracking URI nobody
  answers ends inside a 400 s scheduler timeout, exit 0, reporting the run released and
  untracked with its ``gpope track --run-id`` command; the seconds from the release's commit to
  the exit are recorded;
- **SIGTERM of each stage** (simulate, load, ingest, stats, evaluate): exit 143 and one line
  saying what was and was not committed, which must match the manifests; the stage's re-run
  succeeds and nothing is lost;
- **a missing Parquet file of the silver transitions**: ``stats`` fails in one line naming the
  table and its repair (``gpope ingest``), which then works, and nothing is lost;
- **a missing Parquet file of the ledger**: ``budget show`` and ``query`` fail in one line naming
  the ledger table, no traceback;
- **RFC 4180 doubled quotes in CSV ids**: ``load`` of CSV files whose ids hold commas and
  doubled quotes (``"a,""b"``) stores the ids unquoted (``a,"b``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

#: A scheduler's timeout around the evaluate whose MLflow is unreachable (the issue's 400 s).
SCHEDULER_TIMEOUT_S = 400.0
#: Words of a trace that must never reach the terminal on a handled error.
TRACES = ("Traceback (most recent call last)", "panicked at", "Exception in thread",
          "\tat org.apache", "py4j.protocol")
STAGES = ("simulate", "load", "ingest", "stats", "evaluate")


def _own_lines(out: subprocess.CompletedProcess | Any, command: str) -> list[str]:
    """The command's own stderr lines (``gpope <command>: ...``), without Spark's log lines."""
    return [line for line in (out.stderr or "").splitlines()
            if line.startswith(f"gpope {command}:")]


def _traces(text: str) -> list[str]:
    return [t for t in TRACES if t in (text or "")]


def _one_line(trial: Any, out: Any, command: str, *, code: int | set[int],
              words: tuple[str, ...] = (), never: tuple[str, ...] = ()) -> str | None:
    """Check the command's exit code, that it printed exactly one line of its own naming
    ``words`` (none of ``never``) and no trace; returns that line."""
    codes = {code} if isinstance(code, int) else code
    lines = _own_lines(out, command)
    if out.returncode not in codes:
        trial.problems.append(f"gpope {command} exited {out.returncode}, not {sorted(codes)}: "
                              f"{(out.stderr or '').strip()[-300:]}")
    if len(lines) != 1:
        trial.problems.append(f"gpope {command} printed {len(lines)} lines of its own, not one: "
                              f"{(out.stderr or '').strip()[-400:]}")
        return None
    line = lines[0]
    missing = [w for w in words if w not in line]
    if missing:
        trial.problems.append(f"gpope {command}'s line lacks {missing}: {line[:400]}")
    wrong = [w for w in never if w in line]
    if wrong:
        trial.problems.append(f"gpope {command}'s line says {wrong}: {line[:400]}")
    if traces := _traces(out.stderr):
        trial.problems.append(f"gpope {command} printed a trace ({traces})")
    return line


def _ledger(lake: Path) -> Any:
    from gpope.config import load_config
    from gpope.shell.pipeline.ledger import PrivacyLedger

    return PrivacyLedger(None, load_config(None, lake={"root": str(lake)}))  # JVM-free


def _ledger_runs(lake: Path, dataset: str) -> dict[str, str]:
    return {r.run_id: r.status for r in _ledger(lake).status(dataset).runs}


def _manifests(lake: Path, stage: str, dataset: str) -> list[str]:
    from gpope.config import LakeSettings
    from gpope.shell.lake.manifest import PipelineRuns

    return [m.run_id for m in PipelineRuns(LakeSettings(root=str(lake))).manifests(
        stage="release" if stage == "evaluate" else stage, dataset=dataset)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _spawn(sw: ModuleType, lake: Path, argv: list[str], **env: str) -> subprocess.Popen:
    cmd = [*sw.GPOPE, *argv, "--lake", str(lake), "--conf", str(sw._conf(lake))]
    return subprocess.Popen(cmd, env=sw._env(**env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=sw.REPO,
                            start_new_session=True)


def _finish(sw: ModuleType, proc: subprocess.Popen, argv: list[str]) -> Any:
    try:
        out, err = proc.communicate(timeout=sw.TIMEOUT["seconds"])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _immutable(path: Path, on: bool) -> None:
    """Make ``path`` (recursively) unwritable even for root (``chattr +i``), or writable again."""
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-R", "+i" if on else "-i", str(path)], check=True,
                       capture_output=True)
    else:
        subprocess.run(["chmod", "-R", "a-w" if on else "u+w", str(path)], check=True)


# ---------------------------------------------------------------------- trials
def readonly_after_reserve_trial(sw: ModuleType, template: Path, root: Path) -> Any:
    trial = sw.Trial("lake read-only right after the reservation")
    lake = sw.copy_lake(template, root, "readonly")
    gate = lake.parent / "gate"
    proc = _spawn(sw, lake, sw.evaluate_args(), GPOPE_FAULT=f"evaluate.after_reserve:wait={gate}")
    if not _wait_for(Path(f"{gate}.reached"), proc, sw.TIMEOUT["seconds"]):
        out = _finish(sw, proc, ["evaluate"])
        trial.problems.append(f"never reached the reservation: {out.stderr[-300:]}")
        return trial
    _immutable(lake, True)
    try:
        gate.touch()
        out = _finish(sw, proc, ["evaluate"])
    finally:
        _immutable(lake, False)
    trial.facts["exit"] = out.returncode
    line = _one_line(trial, out, "evaluate", code=2,
                     words=("charged", "gpope budget reconcile"),
                     never=("Nothing was committed", "nothing was committed"))
    trial.facts["line"] = line
    trial.problems += sw.check_lake(lake, trial.facts)
    return trial


def case_collision_trial(sw: ModuleType, template: Path, root: Path) -> Any:
    trial = sw.Trial("dataset names differing only in case (Sweep beside sweep)")
    lake = sw.copy_lake(template, root, "collide")
    files = _bronze_files(lake, sw.DATASET, lake.parent / "files")
    for argv in (["simulate", "--domain", "chain", "--patients", "20", "--steps", "5",
                  "--dataset", "Sweep", "--seed", "3", "--no-progress"],
                 ["load", "--dataset", "SWEEP", *files],
                 ["ingest", "--dataset", "Sweep", "--domain", "chain"]):
        out = sw.gpope(lake, *argv)
        _one_line(trial, out, argv[0], code=2, words=("'sweep'",))
    made = sorted(p.name for layer in ("bronze", "silver", "gold")
                  for p in (lake / layer).glob("*") if p.name.lower() == "sweep"
                  and p.name != "sweep")
    if made:
        trial.problems.append(f"tables written for {made}")
    trial.problems += sw.check_lake(lake, trial.facts)
    return trial


def stale_stats_trial(sw: ModuleType, template: Path, root: Path, patients: int) -> Any:
    trial = sw.Trial("stale statistics: a larger cohort ingested after stats")
    lake = sw.copy_lake(template, root, "stale")
    bigger = patients + 40
    for argv in (["simulate", "--domain", "chain", "--patients", str(bigger), "--steps", "20",
                  "--dataset", sw.DATASET, "--seed", "3", "--no-progress"],
                 ["ingest", "--dataset", sw.DATASET, "--domain", "chain"]):
        out = sw.gpope(lake, *argv)
        if out.returncode:
            trial.problems.append(f"{argv[0]} failed: {out.stderr[-300:]}")
            return trial
    before = _ledger_runs(lake, sw.DATASET)
    refused = sw.gpope(lake, *sw.evaluate_args())
    _one_line(trial, refused, "evaluate", code=2, words=("gpope stats",))
    if _ledger_runs(lake, sw.DATASET) != before:
        trial.problems.append("the refused evaluate reserved budget")
    allowed = sw.gpope(lake, *sw.evaluate_args(), "--allow-stale-stats")
    if allowed.returncode:
        trial.problems.append(f"--allow-stale-stats failed: {allowed.stderr[-300:]}")
    else:
        report = json.loads(allowed.stdout)
        trial.facts["m_with_stale_stats"] = report["m"]
        if report["m"] != patients or not any("STALE" in w for w in report["warnings"]):
            trial.problems.append(f"stale release not recorded: m {report['m']}, warnings "
                                  f"{report['warnings']}")
        if _tag(lake, report["mlflow_run_id"], "gpope.stale_stats") != "true":
            trial.problems.append("MLflow run lacks gpope.stale_stats=true")
    stats = sw.gpope(lake, "stats", "--dataset", sw.DATASET, "--spec", str(sw.SPEC))
    fresh = sw.gpope(lake, *sw.evaluate_args())
    if stats.returncode or fresh.returncode:
        trial.problems.append(f"stats/evaluate after the re-run failed: {stats.stderr[-200:]} "
                              f"{fresh.stderr[-200:]}")
    else:
        trial.facts["m_after_stats"] = json.loads(fresh.stdout)["m"]
        if trial.facts["m_after_stats"] != bigger:
            trial.problems.append(f"m {trial.facts['m_after_stats']} after stats, not {bigger}")
    trial.problems += sw.check_lake(lake, trial.facts)
    return trial


def _tag(lake: Path, mlflow_run_id: str | None, tag: str) -> str | None:
    import mlflow

    if not mlflow_run_id:
        return None
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{lake / 'mlflow.db'}")
    return client.get_run(mlflow_run_id).data.tags.get(tag)


def unreachable_mlflow_trial(sw: ModuleType, template: Path, root: Path) -> Any:
    trial = sw.Trial(f"unreachable MLflow under a {SCHEDULER_TIMEOUT_S:g} s scheduler timeout")
    lake = sw.copy_lake(template, root, "mlflow_down")
    uri = f"http://127.0.0.1:{_closed_port()}"
    cmd = [*sw.GPOPE, *sw.evaluate_args(), "--tracking-uri", uri, "--lake", str(lake),
           "--conf", str(sw._conf(lake))]
    try:
        out = subprocess.run(cmd, env=sw._env(), capture_output=True, text=True,
                             timeout=SCHEDULER_TIMEOUT_S, cwd=sw.REPO)
    except subprocess.TimeoutExpired:
        trial.problems.append(f"killed by the scheduler's {SCHEDULER_TIMEOUT_S:g} s timeout")
        trial.problems += sw.check_lake(lake, trial.facts)
        return trial
    ended = datetime.now(UTC).replace(tzinfo=None)
    trial.facts["exit"] = out.returncode
    if out.returncode != 0:
        trial.problems.append(f"exit {out.returncode} after a release: {out.stderr[-300:]}")
    else:
        report = json.loads(out.stdout)
        run_id = report["run_id"]
        said = " ".join(report["warnings"])
        if "WAS RELEASED" not in said or f"gpope track --run-id {run_id}" not in said:
            trial.problems.append(f"not reported released and untracked: {said[:300]}")
        from gpope.shell.query import query

        (row,) = query(f"SELECT created_at FROM released_estimates WHERE run_id = '{run_id}'",
                       lake=lake).to_pylist()
        created = row["created_at"]
        if created.tzinfo is not None:
            created = created.astimezone(UTC).replace(tzinfo=None)
        trial.facts["seconds_after_release"] = round((ended - created).total_seconds(), 1)
    trial.problems += sw.check_lake(lake, trial.facts)  # runs `gpope track --run-id`
    return trial


def _bronze_files(lake: Path, dataset: str, folder: Path) -> list[str]:
    """The dataset's bronze tables as Parquet files, as ``gpope load`` arguments."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    folder.mkdir(parents=True, exist_ok=True)
    args = []
    for table in ("observations", "treatments", "outcomes"):
        data = DeltaTable(str(lake / "bronze" / dataset / table)).to_pyarrow_table()
        pq.write_table(data, folder / f"{table}.parquet")
        args += [f"--{table}", str(folder / f"{table}.parquet")]
    return args


def _stop_args(sw: ModuleType, stage: str, lake: Path) -> tuple[list[str], str | None]:
    """The stage's command line and the fault point it pauses at before its commit (None: it
    is stopped at a random moment once its JVM runs)."""
    if stage == "simulate":
        return (["simulate", "--domain", "chain", "--patients", "60", "--steps", "20",
                 "--dataset", sw.DATASET, "--seed", "2", "--no-progress"], "simulate:treatments")
    if stage == "load":
        return ["load", "--dataset", sw.DATASET,
                *_bronze_files(lake, sw.DATASET, lake.parent / "files")], None
    if stage == "ingest":
        return ["ingest", "--dataset", sw.DATASET, "--domain", "chain"], "ingest:transitions"
    if stage == "stats":
        return ["stats", "--dataset", sw.DATASET, "--spec", str(sw.SPEC)], None
    return sw.evaluate_args(), "evaluate.after_reserve"


def _jvm_started(pid: int) -> bool:
    """A java process runs under ``pid`` (the stage's Spark is starting or running)."""
    try:
        out = subprocess.run(["pgrep", "-P", str(pid), "java"], capture_output=True, text=True)
    except OSError:
        return True
    return bool(out.stdout.strip())


def sigterm_trial(sw: ModuleType, template: Path, root: Path, stage: str, seed: int) -> Any:
    import random

    trial = sw.Trial(f"SIGTERM of {stage}")
    lake = sw.copy_lake(template, root, f"sigterm_{stage}")
    argv, point = _stop_args(sw, stage, lake)
    before = _manifests(lake, stage, sw.DATASET)
    gate = lake.parent / "gate"
    proc = _spawn(sw, lake, argv, **({"GPOPE_FAULT": f"{point}:wait={gate}"} if point else {}))
    if point is not None:
        reached = _wait_for(Path(f"{gate}.reached"), proc, sw.TIMEOUT["seconds"])
    else:  # a random moment of its Spark work
        deadline = time.monotonic() + sw.TIMEOUT["seconds"]
        while proc.poll() is None and not _jvm_started(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(random.Random(seed).uniform(2.0, 20.0))
        reached = proc.poll() is None
    trial.facts["stopped_at"] = point or "a random moment"
    if reached:
        proc.send_signal(signal.SIGTERM)
    out = _finish(sw, proc, argv)
    trial.facts["exit"] = out.returncode
    if not reached:
        trial.facts["finished_before_the_signal"] = True
        trial.problems += [] if out.returncode == 0 else [f"{stage} failed: {out.stderr[-300:]}"]
    else:
        line = _one_line(trial, out, stage, code=143, words=("stopped by SIGTERM",))
        trial.facts["line"] = line
        committed = _manifests(lake, stage, sw.DATASET) != before
        said = line is not None and ("after it committed" in line or "AFTER the release" in line)
        if line is not None and committed != said:
            trial.problems.append(f"the line says committed={said}, the manifests say "
                                  f"{committed}: {line[:300]}")
        if stage == "evaluate" and not committed:  # the ledger says why the run failed
            notes = [r.note for r in _ledger(lake).status(sw.DATASET).runs
                     if r.status == "failed"]
            trial.facts["ledger_notes"] = notes
            if not any("(SIGTERM)" in (n or "") for n in notes):
                trial.problems.append(f"no failed run noted as stopped by SIGTERM: {notes}")
    rerun = [argv] if stage != "simulate" else [
        argv, ["ingest", "--dataset", sw.DATASET, "--domain", "chain"],
        ["stats", "--dataset", sw.DATASET, "--spec", str(sw.SPEC)]]
    for step in rerun:
        again = sw.gpope(lake, *step)
        if again.returncode:
            trial.problems.append(f"re-run {step[0]} failed: {again.stderr.strip()[-300:]}")
    trial.problems += sw.check_lake(lake, trial.facts)
    return trial


def missing_ledger_file_trial(sw: ModuleType, template: Path, root: Path) -> Any:
    trial = sw.Trial("a Parquet file of the ledger missing")
    lake = sw.copy_lake(template, root, "ledger_file")
    files = sorted((lake / "gold" / "privacy_ledger").rglob("*.parquet"))
    if not files:
        trial.problems.append("the template ledger has no Parquet file")
        return trial
    files[0].unlink()
    trial.facts["removed"] = str(files[0].relative_to(lake))
    show = sw.gpope(lake, "budget", "show", "--dataset", sw.DATASET)
    _one_line(trial, show, "budget", code=2, words=("privacy_ledger",))
    query = subprocess.run([*sw.GPOPE, "query", "--lake", str(lake),
                            "SELECT * FROM budget_status"], env=sw._env(), capture_output=True,
                           text=True, timeout=sw.TIMEOUT["seconds"], cwd=sw.REPO)
    _one_line(trial, query, "query", code=2, words=("privacy_ledger",))
    return trial


def missing_silver_file_trial(sw: ModuleType, template: Path, root: Path) -> Any:
    trial = sw.Trial("a Parquet file of the silver transitions missing")
    lake = sw.copy_lake(template, root, "silver_file")
    files = sorted((lake / "silver" / sw.DATASET / "transitions").rglob("*.parquet"))
    files[0].unlink()
    trial.facts["removed"] = str(files[0].relative_to(lake))
    stats = ["stats", "--dataset", sw.DATASET, "--spec", str(sw.SPEC)]
    out = sw.gpope(lake, *stats)
    trial.facts["line"] = _one_line(trial, out, "stats", code=2, words=(
        "silver/sweep/transitions", "is damaged", f"gpope ingest --dataset {sw.DATASET}"))
    for step in (["ingest", "--dataset", sw.DATASET, "--domain", "chain"], stats):  # the repair
        again = sw.gpope(lake, *step)
        if again.returncode:
            trial.problems.append(f"the repair's {step[0]} failed: {again.stderr[-300:]}")
    trial.problems += sw.check_lake(lake, trial.facts)
    return trial


#: Patient ids that need RFC 4180 quoting: a comma, a doubled quote, both, and a plain one.
QUOTED_IDS = ('a,"b', 'say ""hi""', '"', "plain")


def _csv_field(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


def doubled_quote_csv_trial(sw: ModuleType, template: Path, root: Path) -> Any:
    trial = sw.Trial('CSV ids with RFC 4180 doubled quotes ("a,""b")')
    lake = sw.copy_lake(template, root, "csv_quotes")
    folder = lake.parent / "csv"
    folder.mkdir()
    rows = {"observations": ("patient_id,time,variable,value",
                             lambda p: f"{_csv_field(p)},2026-01-01T00:00:00,state,0"),
            "treatments": ("patient_id,time,action,propensity",
                           lambda p: f"{_csv_field(p)},2026-01-01T00:00:01,stay,1.0"),
            "outcomes": ("patient_id,time,reward",
                         lambda p: f"{_csv_field(p)},2026-01-01T00:00:02,0.0")}
    args = []
    for table, (header, line) in rows.items():
        (folder / f"{table}.csv").write_text("\n".join([header, *map(line, QUOTED_IDS)]) + "\n")
        args += [f"--{table}", str(folder / f"{table}.csv")]
    out = sw.gpope(lake, "load", "--dataset", "quotes", *args)
    if out.returncode:
        trial.problems.append(f"load failed: {out.stderr.strip()[-300:]}")
        return trial
    from gpope.shell.query import query

    for table in rows:
        got = sorted(r["patient_id"] for r in query(
            f"SELECT patient_id FROM quotes__{table}", lake=lake, operator=True).to_pylist())
        if got != sorted(QUOTED_IDS):
            trial.problems.append(f"{table} ids {got}, not {sorted(QUOTED_IDS)}")
    trial.problems += sw.check_lake(lake, trial.facts)
    return trial


def plan(sw: ModuleType, template: Path, root: Path, patients: int,
         only: set[str] | None) -> list[tuple[str, Callable[[], Any]]]:
    """The trials of this module whose groups ``only`` names ("operators": all; None: all)."""
    groups: list[tuple[str, Callable[[], Any]]] = [
        ("readonly", lambda: readonly_after_reserve_trial(sw, template, root)),
        ("collide", lambda: case_collision_trial(sw, template, root)),
        ("stale", lambda: stale_stats_trial(sw, template, root, patients)),
        ("mlflow", lambda: unreachable_mlflow_trial(sw, template, root)),
        *[("sigterm", lambda s=s, i=i: sigterm_trial(sw, template, root, s, i))
          for i, s in enumerate(STAGES)],
        ("damaged", lambda: missing_silver_file_trial(sw, template, root)),
        ("ledger", lambda: missing_ledger_file_trial(sw, template, root)),
        ("csv", lambda: doubled_quote_csv_trial(sw, template, root)),
    ]
    return [(g, make) for g, make in groups
            if only is None or "operators" in only or g in only]


GROUPS = ("readonly", "collide", "stale", "mlflow", "sigterm", "damaged", "ledger", "csv")

"""Fault and concurrency sweep of the pipeline: real processes, real kills, real parallel runs.

Repeats the sweep of issue 29 on a small chain cohort and prints ``survived with nothing lost:
N of N``. Every trial works on its own copy of one prepared lake (simulate -> ingest -> stats,
budget set), runs the real ``gpope`` command line in child processes, and then checks, as an
operator would after ``gpope budget reconcile``, that nothing was lost or double-counted:

- **kills** (``GPOPE_FAULT=<point>``: SIGKILL at each named point between commits, plus ``kill
  -9`` of ``gpope stats`` at a random moment): the killed command's re-run succeeds, every count
  balances, and no staging folder is left behind;
- **parallel first runs**: three ``gpope evaluate`` at once on a lake without ``mlflow.db``: all
  three exit 0, each is released, charged and tracked exactly once;
- **a budget that fits one**: three at once, exactly one release, two clear refusals;
- **clock skew**: a release from a process whose clock is 2 h behind is still the latest one;
- **query during release**: ``gpope query`` in a loop while a release commits: every answer is
  one consistent state (a visible release is always counted in ``budget_status``);
- **what operators are told** (:mod:`fault_sweep_operators`): a lake made read-only after the
  reservation, dataset names differing only in case, stale statistics, an unreachable MLflow
  under a scheduler's timeout, SIGTERM of each stage, a missing ledger Parquet file, CSV ids
  with RFC 4180 doubled quotes: the one line each prints, and nothing lost.

"Nothing lost" for a lake means (:func:`check_lake`): the ledger holds no open reservation; every
run the ledger marks released has exactly one visible row in ``released_estimates``, its rows in
``released_values`` and one FINISHED MLflow run; no visible release lacks its ledger mark; the
last ingest balances (rows in = used + rejected); no ``_gpope_staging`` folder remains.

Every command runs with a bounded time (``--timeout``; a command past it is killed and its trial
counts as lost), the trials run ``--jobs`` at a time on their own lakes, and the JVMs use the
suite's light settings (C1 compiler, serial GC, ``local[2]``): a sweep finishes on a loaded
machine, and the settings change no result.

Usage (about 15-40 minutes on 2 cores, most of it JVM starts)::

    nice -n 10 .venv/bin/python benchmarks/fault_sweep.py --out docs/results/fault_sweep.json
    .venv/bin/python benchmarks/fault_sweep.py --only kills --patients 200
    .venv/bin/python benchmarks/fault_sweep.py --only operators   # or stale,sigterm,...
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "conf" / "specs" / "chain.yaml"
DATASET = "sweep"
GPOPE = [sys.executable, "-c", "import sys; from gpope.cli import main; sys.exit(main())"]
#: A process whose clock runs 2 h behind for the rows it writes: the evaluate stage's release
#: timestamps here, the ledger's rows by ``GPOPE_FAULT=clock=-7200``. (Replacing
#: ``datetime.datetime`` for the whole process instead stalls pandas' compiled import.)
SKEWED = [sys.executable, "-c", (
    "import datetime as d, sys\n"
    "class Skewed(d.datetime):\n"
    "    @classmethod\n"
    "    def now(cls, tz=None):\n"
    "        return d.datetime.now(tz) - d.timedelta(hours=2)\n"
    "import gpope.shell.evaluate.run as evaluate\n"
    "evaluate.datetime = Skewed\n"
    "from gpope.cli import main\n"
    "sys.exit(main())\n")]
KILL_POINTS = (
    "simulate:treatments",
    "ledger.before_append",
    "ledger.after_append",
    "ingest:transitions",
    "ingest:rejected_events",
    "release:released_estimates",
    "release:released_values",
    "release:manifest",
    "evaluate.after_reserve",
    "evaluate.after_release",
)
#: The sweep's Spark settings (a small local session; every command gets them with --conf).
SWEEP_CONF = "spark:\n  master: local[2]\n  shuffle_partitions: 2\n  driver_memory: 1g\n"
#: JVM flags of the test suite (tests/conftest.py): C1 only and the serial GC, about half the
#: CPU of a short Spark job; results are unchanged.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Seconds one command may take before it is killed and its trial counts as lost (--timeout).
TIMEOUT = {"seconds": 1200.0}


@dataclass
class Trial:
    """One trial: what ran and whether the lake kept everything."""

    name: str
    survived: bool = False
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "OPENBLAS_NUM_THREADS": "1",
           "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {JVM_OPTS}".strip()}
    env.pop("GPOPE_FAULT", None)
    env.pop("GPOPE_FAULT_KILL", None)
    env.update(extra)
    return env


def _conf(lake: Path) -> Path:
    """The sweep's configuration file beside the trial's lake (written on first use)."""
    conf = lake.parent / "sweep.yaml"
    if not conf.exists():
        conf.write_text(SWEEP_CONF)
    return conf


def gpope(lake: Path, *argv: str, fault: str | None = None,
          skewed: bool = False) -> subprocess.CompletedProcess:
    """Run ``gpope ARGV --lake LAKE`` in a child process (optionally killed at ``fault``).

    Raises:
        subprocess.TimeoutExpired: the command ran past ``--timeout`` (it is killed).
    """
    extra = {"GPOPE_FAULT": fault} if fault else {}
    cmd = [*(SKEWED if skewed else GPOPE), *argv, "--lake", str(lake), "--conf", str(_conf(lake))]
    return subprocess.run(cmd, env=_env(**extra), capture_output=True, text=True,
                          timeout=TIMEOUT["seconds"], cwd=REPO)


def evaluate_args(epsilon: float = 1.0) -> list[str]:
    return ["evaluate", "--dataset", DATASET, "--spec", str(SPEC), "--epsilon", str(epsilon),
            "--delta", "1e-6", "--iterations", "300", "--public-trajectories", "0", "--json"]


def prepare(root: Path, patients: int) -> Path:
    """The template lake: a chain cohort through stats, budget epsilon 20 (one JVM)."""
    lake = root / "template" / "lake"
    code = (
        "import sys\n"
        "from gpope import api\n"
        "from gpope.config import load_config\n"
        "from gpope.shell.pipeline.simulate import SimulateOptions\n"
        "config = load_config(sys.argv[4], lake={'root': sys.argv[1]})\n"
        "spark = api.get_spark(config)\n"
        "api.simulate(spark, 'sweep', domain='chain', patients=int(sys.argv[2]), seed=1,\n"
        "             options=SimulateOptions(n_steps=20), config=config)\n"
        "api.ingest(spark, 'sweep', domain='chain', config=config)\n"
        "api.stats(spark, 'sweep', sys.argv[3], config=config)\n"
        "api.set_budget(spark, 'sweep', epsilon=20.0, delta=1e-4, config=config)\n"
    )
    lake.parent.mkdir(parents=True)
    out = subprocess.run([sys.executable, "-c", code, str(lake), str(patients), str(SPEC),
                          str(_conf(lake))],
                         env=_env(), capture_output=True, text=True, timeout=3600, cwd=REPO)
    if out.returncode != 0:
        raise SystemExit(f"preparing the template lake failed:\n{out.stderr[-3000:]}")
    return lake


def copy_lake(template: Path, root: Path, name: str) -> Path:
    lake = root / name / "lake"
    shutil.copytree(template, lake)
    return lake


# ---------------------------------------------------------------------- the "nothing lost" check
def _tracked(lake: Path) -> dict[str, int]:
    """gpope run id -> FINISHED MLflow evaluate runs holding it, in the lake's store."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{lake / 'mlflow.db'}")
    exp = client.get_experiment_by_name("gpope")
    tracked: dict[str, int] = {}
    if exp is not None:
        for run in client.search_runs([exp.experiment_id], max_results=1000):
            rid = run.data.tags.get("gpope.run_id")
            if run.info.status == "FINISHED" and run.data.tags.get("gpope.stage") == "evaluate":
                tracked[rid] = tracked.get(rid, 0) + 1
    return tracked


_CHECK = threading.Lock()


def check_lake(lake: Path, facts: dict[str, Any] | None = None) -> list[str]:
    """:func:`_check_lake`, one lake at a time (the in-process readers are not shared)."""
    with _CHECK:
        return _check_lake(lake, facts)


def _check_lake(lake: Path, facts: dict[str, Any] | None = None) -> list[str]:
    """What was lost or double-counted in ``lake`` (empty: nothing), after the operator's
    recovery: ``gpope budget reconcile``, then ``gpope track --run-id`` for a released run
    that has no MLflow run (a process killed after its release). ``facts`` records what the
    recovery did."""
    from gpope.shell.query import query

    facts = {} if facts is None else facts

    from gpope.config import load_config
    from gpope.shell.pipeline.ledger import PrivacyLedger

    problems = []
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(lake)}))  # JVM-free
    facts["reconciled"] = [s.to_dict() for s in ledger.reconcile()]  # `gpope budget reconcile`
    runs = {r.run_id: r.status for r in ledger.status(DATASET).runs}
    open_runs = sorted(r for r, s in runs.items() if s == "reserved")
    if open_runs:
        problems.append(f"open reservations after reconcile: {open_runs}")
    released = {r for r, s in runs.items() if s == "released"}

    def ids(sql: str) -> list[str]:
        try:
            return [r["run_id"] for r in query(sql, lake=lake).to_pylist()]
        except Exception as exc:  # no release table yet
            if "does not exist" in str(exc) or "Views of the lake" in str(exc):
                return []
            raise

    visible = ids("SELECT run_id FROM released_estimates")
    if len(visible) != len(set(visible)):
        problems.append(f"a run is released twice: {sorted(visible)}")
    if set(visible) != released:
        problems.append(f"visible releases {sorted(set(visible))} != ledger 'released' "
                        f"{sorted(released)}")
    per_run = {}
    for run_id in ids("SELECT run_id FROM released_values"):
        per_run[run_id] = per_run.get(run_id, 0) + 1
    if set(per_run) != set(visible) or len(set(per_run.values())) > 1:
        problems.append(f"released_values rows per run {per_run} do not match the releases")
    if released:
        missing = sorted(r for r in released if not _tracked(lake).get(r))
        for run_id in missing:  # killed after its release: the documented recovery
            relog = gpope(lake, "track", "--run-id", run_id)
            if relog.returncode != 0:
                problems.append(f"gpope track --run-id {run_id} failed: {relog.stderr[-300:]}")
        if missing:
            facts["relogged"] = missing
        still = sorted(r for r in released if not _tracked(lake).get(r))
        if still:
            problems.append(f"released runs without an MLflow run: {still}")
    from gpope.config import LakeSettings
    from gpope.shell.lake.manifest import PipelineRuns

    last_ingest = PipelineRuns(LakeSettings(root=str(lake))).latest(stage="ingest",
                                                                     dataset=DATASET)
    for details in [last_ingest.details] if last_ingest is not None else []:
        rejected = {r["table"]: r["n"] for r in query(
            f"SELECT \"table\", count(*) AS n FROM {DATASET}__rejected_events GROUP BY 1",
            lake=lake, operator=True).to_pylist()}
        transitions = query(f"SELECT count(*) AS n FROM {DATASET}__transitions",
                            lake=lake, operator=True).to_pylist()[0]["n"]
        if transitions != details["rows_used"]["treatments"]:
            problems.append(f"transitions {transitions} != treatments used "
                            f"{details['rows_used']['treatments']}")
        for table, version in details["inputs"].items():
            name = table.rsplit("/", 1)[-1]
            from deltalake import DeltaTable

            rows_in = DeltaTable(str(lake / table), version=version).to_pyarrow_dataset().count_rows()
            used = details["rows_used"][name]
            if rows_in != used + rejected.get(name, 0):
                problems.append(f"{name}: rows in {rows_in} != used {used} + rejected "
                                f"{rejected.get(name, 0)}")
    litter = sorted(str(p.relative_to(lake)) for p in lake.rglob("_gpope_staging"))
    if litter:
        problems.append(f"staging folders left: {litter}")
    return problems


# ---------------------------------------------------------------------- trials
def _rerun_for(point: str) -> list[str]:
    stage = point.split(":")[0].split(".")[0]
    if stage == "simulate":
        return ["simulate", "--domain", "chain", "--patients", "60", "--steps", "20",
                "--dataset", DATASET, "--seed", "2", "--no-progress"]
    if stage == "ingest":
        return ["ingest", "--dataset", DATASET, "--domain", "chain", "--json"]
    return evaluate_args()


def kill_trial(template: Path, root: Path, point: str) -> Trial:
    trial = Trial(f"kill at {point}")
    lake = copy_lake(template, root, f"kill_{point.replace(':', '_').replace('.', '_')}")
    argv = _rerun_for(point)
    killed = gpope(lake, *argv, fault=point)
    trial.facts["killed_exit"] = killed.returncode
    if killed.returncode != -signal.SIGKILL:
        trial.problems.append(f"not killed at {point} (exit {killed.returncode}): "
                              f"{killed.stderr.strip()[-300:]}")
    if argv[0] == "simulate":  # a new cohort: ingest and stats follow, as an operator would
        for step in (argv, ["ingest", "--dataset", DATASET, "--domain", "chain"],
                     ["stats", "--dataset", DATASET, "--spec", str(SPEC)]):
            out = gpope(lake, *step)
            if out.returncode != 0:
                trial.problems.append(f"re-run {step[0]} failed: {out.stderr.strip()[-300:]}")
    else:
        rerun = gpope(lake, *argv)
        if rerun.returncode != 0:
            trial.problems.append(f"re-run failed: {rerun.stderr.strip()[-300:]}")
    trial.problems += check_lake(lake, trial.facts)
    return trial


def stats_kill_trial(template: Path, root: Path, seed: int) -> Trial:
    """``kill -9`` of ``gpope stats`` at a random moment, then its re-run."""
    trial = Trial("kill -9 of stats at a random moment")
    lake = copy_lake(template, root, f"kill_stats_{seed}")
    delay = random.Random(seed).uniform(15.0, 60.0)
    argv = [*GPOPE, "stats", "--dataset", DATASET, "--spec", str(SPEC), "--lake", str(lake),
            "--conf", str(_conf(lake))]
    proc = subprocess.Popen(argv, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=REPO, start_new_session=True)
    try:
        proc.wait(timeout=delay)
        trial.facts["finished_before_kill"] = True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        trial.facts["killed_after_s"] = round(delay, 1)
    rerun = gpope(lake, "stats", "--dataset", DATASET, "--spec", str(SPEC))
    if rerun.returncode != 0:
        trial.problems.append(f"re-run failed: {rerun.stderr.strip()[-300:]}")
    trial.problems += check_lake(lake, trial.facts)
    return trial


def _parallel(lake: Path, count: int, epsilon: float) -> list[subprocess.CompletedProcess]:
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        results[i] = gpope(lake, *evaluate_args(epsilon))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def parallel_first_runs_trial(template: Path, root: Path) -> Trial:
    trial = Trial("3 parallel first evaluates on a lake without mlflow.db")
    lake = copy_lake(template, root, "parallel_first")
    (lake / "mlflow.db").unlink(missing_ok=True)
    results = _parallel(lake, 3, 1.0)
    trial.facts["exits"] = [r.returncode for r in results]
    for r in results:
        if r.returncode != 0:
            trial.problems.append(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        elif "WAS RELEASED" in r.stdout + r.stderr:
            trial.problems.append("tracking failed after a release (re-logged by gpope track)")
    trial.problems += check_lake(lake, trial.facts)
    return trial


def budget_fits_one_trial(template: Path, root: Path) -> Trial:
    trial = Trial("3 parallel evaluates, budget for one")
    lake = copy_lake(template, root, "fits_one")
    gpope(lake, "budget", "set", "--dataset", DATASET, "--epsilon", "1.05", "--delta", "1.5e-6",
          "--force")
    results = _parallel(lake, 3, 1.0)
    exits = sorted(r.returncode for r in results)
    trial.facts["exits"] = exits
    if exits != [0, 2, 2]:
        trial.problems.append(f"expected one release and two refusals, got exits {exits}: "
                              + " | ".join(r.stderr.strip()[-200:] for r in results))
    trial.problems += check_lake(lake, trial.facts)
    return trial


def clock_skew_trial(template: Path, root: Path) -> Trial:
    from gpope.shell.query import query

    trial = Trial("release from a host whose clock is 2 h behind")
    lake = copy_lake(template, root, "skew")
    first = gpope(lake, *evaluate_args())
    skewed = gpope(lake, *evaluate_args(), skewed=True, fault="clock=-7200")
    if first.returncode or skewed.returncode:
        trial.problems.append(f"evaluate failed: {first.stderr[-200:]} {skewed.stderr[-200:]}")
    else:
        latest = {r["run_id"] for r in query("SELECT run_id FROM latest_release",
                                             lake=lake).to_pylist()}
        want = json.loads(skewed.stdout)["run_id"]
        trial.facts["latest_is_the_skewed_release"] = latest == {want}
        if latest != {want}:
            trial.problems.append(f"latest_release shows {latest}, not the last commit {want}")
    trial.problems += check_lake(lake, trial.facts)
    return trial


def query_during_release_trial(template: Path, root: Path) -> Trial:
    from gpope.shell.query import query

    trial = Trial("gpope query in a loop during a release")
    lake = copy_lake(template, root, "query")
    sql = (f"SELECT (SELECT count(DISTINCT run_id) FROM released_values) AS visible, "
           f"(SELECT runs_counted FROM budget_status WHERE dataset = '{DATASET}') AS counted")
    first = gpope(lake, *evaluate_args())  # the views exist from here on
    if first.returncode:
        trial.problems.append(f"evaluate failed: {first.stderr[-300:]}")
        return trial
    proc = subprocess.Popen([*GPOPE, *evaluate_args(), "--lake", str(lake), "--conf",
                             str(_conf(lake))], env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=REPO, start_new_session=True)
    answers = []
    deadline = time.monotonic() + TIMEOUT["seconds"]
    while proc.poll() is None:
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            trial.problems.append(f"the evaluate ran past {TIMEOUT['seconds']:g} s (killed)")
            break
        row = query(sql, lake=lake).to_pylist()[0]
        answers.append(row)
        if row["counted"] is None or row["visible"] > row["counted"]:
            trial.problems.append(f"inconsistent answer: {row}")
        time.sleep(0.05)  # the reader leaves CPU to the writer on a loaded machine
    if proc.returncode not in (0, None) and not trial.problems:
        trial.problems.append(f"the evaluate during the queries exited {proc.returncode}")
    trial.facts["answers"] = len(answers)
    trial.facts["distinct_answers"] = sorted({(a["visible"], a["counted"]) for a in answers})
    trial.problems += check_lake(lake, trial.facts)
    return trial


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=100, help="chain cohort size")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fault_sweep_operators as operators

    groups = ("kills", "parallel", "skew", "query", "operators", *operators.GROUPS)

    def group_list(text: str) -> set[str]:
        chosen = {g.strip() for g in text.split(",")}
        if chosen - set(groups):
            raise argparse.ArgumentTypeError(f"unknown groups {sorted(chosen - set(groups))}; "
                                             f"choose from {', '.join(groups)}")
        return chosen

    parser.add_argument("--only", default=None, type=group_list, metavar="GROUP[,GROUP...]",
                        help=f"only these groups of trials ({', '.join(groups)}; operators: "
                        "every trial of fault_sweep_operators.py)")
    parser.add_argument("--stats-kills", type=int, default=1, help="random-moment stats kills")
    parser.add_argument("--out", type=Path, default=None, help="write the trials as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the trial lakes")
    parser.add_argument("--jobs", type=int, default=2, help="trials run at once (own lakes)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT["seconds"],
                        help="seconds one command may take before its trial counts as lost")
    args = parser.parse_args(argv)
    TIMEOUT["seconds"] = args.timeout
    root = Path(tempfile.mkdtemp(prefix="gpope_fault_sweep_"))
    start = time.perf_counter()
    print(f"preparing a {args.patients}-patient chain lake in {root} ...", flush=True)
    template = prepare(root, args.patients)
    plan: list[tuple[str, Callable[[], Trial]]] = []
    if args.only is None or "kills" in args.only:
        plan += [("kills", lambda p=p: kill_trial(template, root, p)) for p in KILL_POINTS]
        plan += [("kills", lambda s=s: stats_kill_trial(template, root, s))
                 for s in range(args.stats_kills)]
    if args.only is None or "parallel" in args.only:
        plan += [("parallel", lambda: parallel_first_runs_trial(template, root)),
                 ("parallel", lambda: budget_fits_one_trial(template, root))]
    if args.only is None or "skew" in args.only:
        plan.append(("skew", lambda: clock_skew_trial(template, root)))
    if args.only is None or "query" in args.only:
        plan.append(("query", lambda: query_during_release_trial(template, root)))
    # what operators are told
    plan += operators.plan(sys.modules[__name__], template, root, args.patients, args.only)
    trials = []

    def run(make: Callable[[], Trial], name: str) -> Trial:
        t0 = time.perf_counter()
        try:
            trial = make()
        except Exception as exc:  # a crash of the harness is a failed trial, not a lost sweep
            trial = Trial(name, problems=[f"{type(exc).__name__}: {exc}"])
        trial.seconds = round(time.perf_counter() - t0, 1)
        trial.survived = not trial.problems
        return trial

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run, make, f"{group} trial {i}")
                   for i, (group, make) in enumerate(plan)]
        for future in as_completed(futures):
            trial = future.result()
            trials.append(trial)
            mark = "ok  " if trial.survived else "LOST"
            print(f"{mark} {trial.name} ({trial.seconds:.0f} s){'' if trial.survived else ': '}"
                  + "; ".join(trial.problems), flush=True)
    survived = sum(t.survived for t in trials)
    print(f"survived with nothing lost: {survived} of {len(trials)} "
          f"({time.perf_counter() - start:.0f} s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"patients": args.patients, "survived": survived,
                                        "trials": [asdict(t) for t in trials]}, indent=2,
                                       default=str) + "\n")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if survived == len(trials) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The refund rule at every kill point of ``gpope evaluate`` (docs/ARCHITECTURE.md, privacy
rules): real ``gpope evaluate`` processes killed with SIGKILL at each ``GPOPE_FAULT`` point,
then ``gpope budget reconcile`` as an operator runs it. A run is refunded only where nothing
derived from its noise can have left the process (it was never admitted); every other killed run
stays charged, and the reconcile line says which and why. Nothing is half-reported: a killed
process prints nothing, and raw Delta readers see a run's rows exactly when it is released.

A failure after the release (an unexpected error in the report, the ledger mark or the printing)
reports the release, its values and run id, and how to log it to MLflow; it never exits with a
bare traceback that would invite a second spend.

The killed processes run concurrently on copies of one small lake (one module fixture), so the
file pays about one wall-clock JVM start for all of them. ``benchmarks/fault_sweep.py`` kills
at every named point, ingest and simulate included, on larger cohorts.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from conftest import EXACT_COUNT_EPSILON
from deltalake import DeltaTable

from gpope.cli import main
from gpope.config import load_config
from gpope.core.envs import chain
from gpope.shell import faults, lake
from gpope.shell.pipeline.jobargs import load_spec
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
SPEC_FILE = REPO / "conf" / "specs" / "chain.yaml"
EPSILON = 0.5
GPOPE = [sys.executable, "-c", "import sys; from gpope.cli import main; sys.exit(main())"]
#: Each kill point -> the ledger's verdict after `budget reconcile` (None: never reserved).
VERDICT = {
    "ledger.before_append": None,
    "ledger.after_append": "cancelled",  # the budget was lowered before its commit: not admitted
    "evaluate.after_reserve": "failed",
    "release:released_estimates": "failed",
    "release:released_values": "failed",
    # release:manifest is the last step of write_release, and evaluate.after_release follows it
    # with nothing written in between: one process covers the lake both leave behind
    "evaluate.after_release": "released",
}
#: What the reconcile line gives as the reason, per verdict.
WHY = {
    "failed": "still charged: the run may have drawn noise",
    "cancelled": "drew no noise (charge reversed)",
    "released": "release manifest committed",
}
#: An unexpected error in the report stage, after the release commit (not a kill).
AFTER_RELEASE = "evaluate.report:raise"


def _evaluate(root: Path) -> list[str]:
    return ["evaluate", "--dataset", "ch", "--spec", str(SPEC_FILE), "--epsilon", str(EPSILON),
            "--delta", "1e-5", "--iterations", "200", "--public-trajectories", "0",
            "--lake", str(root), "--tracking-uri", _tracking(root)]


def _tracking(root: Path) -> str:
    return f"sqlite:///{root.parent / 'mlflow.db'}"


@pytest.fixture(scope="module")
def template(spark, tmp_path_factory, exact_count) -> Path:
    """A 40-trajectory chain lake with its statistics, its released count m~ (charged
    EXACT_COUNT_EPSILON) and a budget of epsilon 10 beside it (copy it)."""
    template = tmp_path_factory.mktemp("kill_points") / "template" / "lake"
    config = load_config(None, lake={"root": str(template)})
    transitions = chain.generate(40, np.random.default_rng(0), chain.ChainConfig(max_steps=200))
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    lake.write_table(df, config.lake, "silver", "ch", "transitions", mode="overwrite")
    run_stats(spark, config, dataset="ch", spec=load_spec(SPEC_FILE))
    PrivacyLedger(None, config).set_budget("ch", epsilon=EXACT_COUNT_EPSILON + 10.0, delta=1e-3)
    exact_count(spark, config, "ch", load_spec(SPEC_FILE))
    return template


def _runs(ledger: PrivacyLedger) -> tuple:
    """The dataset's runs without its released count's reservation."""
    from gpope.core.accounting.composition import mechanism_from_json

    return tuple(r for r in ledger.status("ch").runs
                 if not mechanism_from_json(r.mechanism).every_relation)


@pytest.fixture(scope="module")
def killed(template):
    """{point: (lake root, exit code, stdout, stderr)}: one `gpope evaluate` process per kill
    point (and one with an error after its release), each on its own copy of the template
    chain lake, all running at once. At ``ledger.after_append`` the process first waits before
    its append while the budget is lowered below its spend, so its reservation is not admitted
    at its commit."""
    base = template.parent.parent
    conf = base / "small.yaml"
    conf.write_text("spark:\n  master: local[1]\n  shuffle_partitions: 1\n  driver_memory: 1g\n")
    go = base / "go"
    procs, roots = {}, {}
    for point in [*VERDICT, AFTER_RELEASE]:
        root = base / point.replace(":", "_").replace(".", "_") / "lake"
        shutil.copytree(template, root)
        fault = f"ledger.before_append:wait={go},{point}" if point == "ledger.after_append" else point
        env = {**os.environ, faults.ENV: fault, "SPARK_LOCAL_IP": "127.0.0.1",
               "OPENBLAS_NUM_THREADS": "1"}
        roots[point] = root
        procs[point] = subprocess.Popen([*GPOPE, *_evaluate(root), "--conf", str(conf)], env=env,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not go.exists():  # the waiting run: lower its lake's budget, then let it append
        assert procs["ledger.after_append"].poll() is None, procs["ledger.after_append"].communicate()
        assert time.monotonic() < deadline, "the run never reached ledger.before_append"
        if Path(f"{go}.reached").exists():
            ledger = PrivacyLedger(None, load_config(None, lake={"root": str(roots["ledger.after_append"])}))
            # just above what the count spent: the run's epsilon no longer fits
            spent = ledger.status("ch").spent_epsilon
            ledger.set_budget("ch", epsilon=spent + EPSILON / 1000, delta=1e-3)
            go.touch()
        time.sleep(0.05)
    out = {}
    for point, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
        out[point] = (roots[point], proc.returncode, stdout, stderr)
    return out


def _raw_run_ids(root: Path, table: str) -> set[str]:
    """run_ids at the latest version as a raw Delta reader sees them (no manifest, no pinning)."""
    path = str(root / "gold" / table)
    if not DeltaTable.is_deltatable(path):
        return set()
    return set(DeltaTable(path).to_pyarrow_table().column("run_id").to_pylist())


def _tracked(root: Path, run_id: str) -> list[str]:
    """Statuses of the MLflow runs that hold gpope run ``run_id``."""
    if not (root.parent / "mlflow.db").exists():
        return []
    client = mlflow.MlflowClient(tracking_uri=_tracking(root))
    exp = client.get_experiment_by_name("gpope")
    runs = [] if exp is None else client.search_runs([exp.experiment_id], max_results=100)
    return [r.info.status for r in runs if r.data.tags.get("gpope.run_id") == run_id]


@pytest.mark.parametrize("point", list(VERDICT))
def test_a_run_killed_at_each_point_is_charged_or_refunded_by_the_rule(killed, point, capsys):
    root, code, stdout, stderr = killed[point]
    assert code == -signal.SIGKILL, stderr[-3000:]
    assert stdout == ""  # nothing derived from the noise was printed
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(root)}))
    runs = _runs(ledger)
    assert main(["budget", "reconcile", "--dataset", "ch", "--lake", str(root)]) == 0
    report = capsys.readouterr().out
    verdict = VERDICT[point]
    if verdict is None:  # killed before its reservation was written: nothing to charge
        assert runs == () and "reconciled 0 stale reservation(s)" in report
        assert ledger.status("ch").spent_epsilon_basic == EXACT_COUNT_EPSILON
        assert not _raw_run_ids(root, "released_estimates")
        return
    (run,) = runs
    assert run.status == "reserved"  # the kill left its reservation open
    (line,) = [x for x in report.splitlines() if run.run_id in x]
    assert f"{run.run_id}: {verdict} (" in line and WHY[verdict] in line, line
    status = ledger.status("ch")
    assert status.entry(run.run_id).status == verdict
    # charged exactly per the rule: the run's claim, or nothing when it was never admitted
    charged = 0.0 if verdict == "cancelled" else EPSILON
    assert status.spent_epsilon_basic == pytest.approx(charged + EXACT_COUNT_EPSILON, abs=1e-12)
    # raw readers see the run's rows exactly when it is released; MLflow holds nothing yet
    for table in ("released_estimates", "released_values"):
        assert (run.run_id in _raw_run_ids(root, table)) == (verdict == "released"), table
    assert _tracked(root, run.run_id) == []
    if point == "evaluate.after_release":  # the documented recovery: log it from the lake
        assert main(["track", "--run-id", run.run_id, "--lake", str(root),
                     "--tracking-uri", _tracking(root)]) == 0
        assert _tracked(root, run.run_id) == ["FINISHED"]
        capsys.readouterr()


def test_an_error_after_the_release_reports_the_release_and_how_to_log_it(killed, capsys):
    """A real process whose report stage raises after the release commit: it exits 0 with the
    released values, the run id and the way to MLflow, no traceback; `gpope track` logs it."""
    root, code, stdout, stderr = killed[AFTER_RELEASE]
    assert code == 0, stderr[-3000:]
    assert "Traceback" not in stderr + stdout
    run_id = stdout.split("released run ")[1].split()[0]
    assert [x for x in stdout.splitlines() if x.strip().startswith("V(s0) = ")]
    (warning,) = [x for x in stdout.splitlines() if "WAS RELEASED" in x]
    assert run_id in warning and "InjectedFault" in warning and "Do not re-run" in warning
    assert f"gpope track --run-id {run_id}" in warning and "reconcile" not in warning
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(root)}))
    assert ledger.entry("ch", run_id).status == "released"
    assert run_id in _raw_run_ids(root, "released_values") and _tracked(root, run_id) == []
    assert main(["track", "--run-id", run_id, "--lake", str(root),
                 "--tracking-uri", _tracking(root)]) == 0
    assert _tracked(root, run_id) == ["FINISHED"]
    capsys.readouterr()


def test_a_failed_ledger_mark_and_a_failed_print_still_name_the_release(template, tmp_path,
                                                                       monkeypatch, capsys):
    """In-process: the ledger mark raises right after the release, then printing the report
    raises too. The command still exits 0, and stderr names the run, its values, that it must
    not be re-run, how to log it and how to record it in the ledger."""
    root = tmp_path / "lake"
    shutil.copytree(template, root)
    monkeypatch.setenv(faults.ENV, "evaluate.after_release:raise,evaluate.print:raise")
    assert main(_evaluate(root)) == 0
    out = capsys.readouterr()
    assert out.out == "" and "Traceback" not in out.err
    (line,) = [x for x in out.err.splitlines() if "WAS RELEASED" in x]
    run_id = line.split("run ")[1].split()[0]
    assert "V(s0) = " in line and "Do not re-run" in line and "printing its report failed" in line
    assert f"gpope track --run-id {run_id}" in line and "gpope budget reconcile" in line
    monkeypatch.delenv(faults.ENV)
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(root)}))
    assert ledger.entry("ch", run_id).status == "reserved"  # the mark never happened...
    assert main(["budget", "reconcile", "--dataset", "ch", "--lake", str(root)]) == 0
    assert f"{run_id}: released (" in capsys.readouterr().out  # ...reconcile records it
    assert ledger.status("ch").spent_epsilon_basic == pytest.approx(EPSILON + EXACT_COUNT_EPSILON)


@pytest.mark.parametrize("point", ["evaluate.after_reserve", "evaluate.report"])
def test_ctrl_c_says_whether_the_release_and_its_charge_stand_and_what_to_run(
        template, point, tmp_path, monkeypatch, capsys):
    """A real SIGINT (Ctrl-C) in-process at ``point``: exit 130 and one stderr line saying
    whether the run was released, that its charge stands, and the command to run next (after
    the release `gpope track`, which the tests above run on such a lake)."""
    root = tmp_path / "lake"
    shutil.copytree(template, root)
    monkeypatch.setenv(faults.ENV, f"{point}:int")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main(_evaluate(root)) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    monkeypatch.delenv(faults.ENV)
    out = capsys.readouterr()
    (line,) = out.err.splitlines()
    ledger = PrivacyLedger(None, load_config(None, lake={"root": str(root)}))
    (run,) = _runs(ledger)
    assert line.startswith("gpope evaluate: interrupted ") and run.run_id in line, line
    assert ledger.status("ch").spent_epsilon_basic == pytest.approx(EPSILON + EXACT_COUNT_EPSILON)
    if point == "evaluate.after_reserve":
        assert "released nothing" in line and "stays charged" in line, line
        assert "gpope budget show --dataset ch" in line and run.status == "failed"
        # the ledger says why it failed, and `gpope budget show` prints it beside the run
        assert run.note.startswith("interrupted (Ctrl-C) before the release"), run.note
        assert main(["budget", "show", "--dataset", "ch", "--lake", str(root)]) == 0
        shown = [s for s in capsys.readouterr().out.splitlines() if run.run_id in s]
        assert shown and "failed" in shown[0] and "[interrupted (Ctrl-C)" in shown[0], shown
        assert not _raw_run_ids(root, "released_values")
        return
    assert "WAS RELEASED" in line and "charge stands" in line and "Do not re-run" in line, line
    assert f"gpope track --run-id {run.run_id}" in line and run.status == "released"
    assert out.out.startswith("V(s0) = ")
    assert run.run_id in _raw_run_ids(root, "released_values")  # what `gpope track` logs

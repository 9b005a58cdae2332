"""Stops by a signal (:mod:`gpope.shell.interrupts`): real signals to this process, and a real
``gpope simulate`` stopped by SIGTERM between its table commits and its manifest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpope.shell import interrupts

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def sigterm():
    """SIGTERM raises Terminated here (as in the CLI); the previous handler afterwards."""
    previous = signal.getsignal(signal.SIGTERM)
    interrupts.reset()
    interrupts.install()
    yield
    signal.signal(signal.SIGTERM, previous)
    interrupts.reset()


def test_sigterm_inside_a_deferred_commit_acts_after_its_record(sigterm):
    with pytest.raises(interrupts.Terminated):
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler has run by now: it only noted the signal
            interrupts.record("ingest run r1 of dataset d (silver/d/transitions@v3)")
    assert interrupts.commits() == ("ingest run r1 of dataset d (silver/d/transitions@v3)",)
    with pytest.raises(interrupts.Terminated) as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert interrupts.exit_code(stop.value) == 143
    line = interrupts.stopped_line("ingest", "d", stop.value)
    assert line.startswith("stopped by SIGTERM after it committed ingest run r1"), line
    assert "nothing after that was committed" in line


def test_a_stop_before_any_commit_says_nothing_was_committed_and_what_to_run(sigterm):
    line = interrupts.stopped_line("stats", "ward", interrupts.Terminated("stopped by SIGTERM"))
    assert line == ("stopped by SIGTERM before its commit: nothing was committed, the gold "
                    "trajectory_stats of dataset ward are as they were (anything half-written "
                    "stays invisible to readers); run `gpope stats` again.")
    ctrl_c = KeyboardInterrupt("interrupted BEFORE the release: run r released nothing")
    assert interrupts.exit_code(ctrl_c) == 130
    assert interrupts.stopped_line("evaluate", "d", ctrl_c) == str(ctrl_c)  # the stage's words


@pytest.mark.spark
def test_sigterm_of_simulate_before_its_manifest_is_one_line_and_exit_143(tmp_path):
    lake = tmp_path / "lake"
    gate = tmp_path / "gate"
    env = {**os.environ, "GPOPE_FAULT": f"simulate:treatments:wait={gate}",
           "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from gpope.cli import main; sys.exit(main())",
         "simulate", "--domain", "chain", "--patients", "20", "--steps", "5", "--dataset", "d",
         "--seed", "1", "--no-progress", "--lake", str(lake)],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not Path(f"{gate}.reached").exists():  # two bronze tables written, tagged, invisible
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    (line,) = err.strip().splitlines()
    assert line.startswith("gpope simulate: stopped by SIGTERM before its commit: nothing was "
                           "committed, the bronze observations, treatments and outcomes of "
                           "dataset d are as they were"), line
    from gpope.config import LakeSettings
    from gpope.shell.lake import TableRef
    from gpope.shell.lake.manifest import PipelineRuns, read_pinned_arrow

    settings = LakeSettings(root=str(lake))
    assert PipelineRuns(settings).manifests() == []
    assert read_pinned_arrow(settings, TableRef("bronze", "observations", "d")) is None

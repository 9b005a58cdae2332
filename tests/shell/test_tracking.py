"""MLflow tracking helpers against a real SQLite store in a temp dir."""

from __future__ import annotations

import os

import mlflow

from gpope.shell.tracking import resolve_tracking_uri, start_run


def test_start_run_does_not_leak_its_tracking_uri(tmp_path):
    # mlflow.set_tracking_uri exports MLFLOW_TRACKING_URI; a later command in the same process
    # (or a test) must still resolve its own default, not inherit the previous run's store.
    assert "MLFLOW_TRACKING_URI" not in os.environ
    uri = f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"
    (tmp_path / "a").mkdir()
    with start_run(tracking_uri=uri, experiment="leak-check") as run:
        mlflow.log_metric("x", 1.0)
    assert "MLFLOW_TRACKING_URI" not in os.environ
    lake = tmp_path / "lake"
    assert resolve_tracking_uri(None, None, lake) == f"sqlite:///{lake.resolve() / 'mlflow.db'}"
    got = mlflow.MlflowClient(tracking_uri=uri).get_run(run.info.run_id)
    assert got.data.metrics["x"] == 1.0 and got.info.status == "FINISHED"


def test_start_run_marks_failed_runs_and_restores_an_existing_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = None
    try:
        with start_run(tracking_uri=uri, experiment="fail-check") as run:
            run_id = run.info.run_id
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:///elsewhere.db"
    assert mlflow.MlflowClient(tracking_uri=uri).get_run(run_id).info.status == "FAILED"
    mlflow.set_tracking_uri(None)


def test_experiments_are_classic_ml_and_private_diagnostics_go_to_a_separate_experiment(tmp_path):
    from gpope.shell.tracking import EXPERIMENT_KIND, code_version, log_private_diagnostics

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(tracking_uri=uri)
    old = client.create_experiment("made-before")  # an experiment without the kind tag
    with start_run(tracking_uri=uri, experiment="kind-check") as run:
        mlflow.log_metric("value.s", 1.0)
        child_id = log_private_diagnostics({"mspbe": 0.5}, note="noise-free",
                                           artifacts={"lstd.json": {"theta": [1.0]}})
    with start_run(tracking_uri=uri, experiment="made-before"):
        pass
    parent, child = client.get_run(run.info.run_id), client.get_run(child_id)
    # the diagnostics live in their own experiment, never beside the releases
    diagnostics = client.get_experiment_by_name("kind-check/private-diagnostics")
    assert child.info.experiment_id == diagnostics.experiment_id != run.info.experiment_id
    assert [r.info.run_id for r in client.search_runs([run.info.experiment_id])] == [
        run.info.run_id]
    for exp_id in (run.info.experiment_id, old, diagnostics.experiment_id):
        assert client.get_experiment(exp_id).tags[EXPERIMENT_KIND[0]] == EXPERIMENT_KIND[1]
    assert "diagnostic.private" not in parent.data.tags and "mspbe" not in parent.data.metrics
    assert child.data.tags["diagnostic.private"] == "true"
    assert child.data.tags["gpope.released_run_id"] == run.info.run_id
    assert child.info.status == "FINISHED"
    assert child.data.metrics == {"mspbe": 0.5}
    assert [a.path for a in client.list_artifacts(child_id)] == ["lstd.json"]
    assert code_version()["gpope.version"]


_CREATE_STORE = """
import pathlib, sys, time
from gpope.shell.tracking import ensure_store
gate = pathlib.Path(sys.argv[2])
(gate / sys.argv[3]).touch()
while len(list(gate.iterdir())) < int(sys.argv[4]):
    time.sleep(0.01)
print(ensure_store(sys.argv[1], "gpope"))
"""


def test_processes_creating_a_fresh_store_at_once_all_succeed(tmp_path):
    # Parallel first runs on a lake without mlflow.db: one process creates the store under the
    # lock, the others find it complete (without the lock alembic's migrations collide).
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'lake' / 'mlflow.db'}"
    gate = tmp_path / "gate"
    gate.mkdir()
    procs = [subprocess.Popen([sys.executable, "-c", _CREATE_STORE, uri, str(gate), str(i), "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-800:] for _, err in outs]
    ids = {out.strip().splitlines()[-1] for out, _ in outs}
    assert len(ids) == 1  # one experiment, created once


def test_unbounded_ends_become_tags_and_json_strings_never_nan_metrics():
    from gpope.shell.evaluate.record import json_end, unbounded_tags

    inf = float("inf")
    tags = unbounded_tags({"a": (-inf, 2.0, -inf), "b": (0.0, 1.0, 0.5), "c": (None, None, None),
                           "d": (1.0, inf, 1.0)})
    assert tags == {"gpope.unbounded.a": "value_lower,value_lower_bound",
                    "gpope.unbounded.d": "value_upper", "gpope.unbounded": "a,d"}
    assert unbounded_tags({"b": (0.0, 1.0, 0.5)}) == {}
    assert [json_end(v) for v in (-inf, inf, 1.5, None)] == ["-inf", "inf", 1.5, None]


def _closed_port() -> int:
    """A local TCP port nobody listens on (connections are refused)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_tracking_server_fails_in_seconds_under_the_http_limits(monkeypatch):
    # MLflow's defaults retry a refused connection 7 times with back-off 2 (about 4 minutes);
    # under tracking's http limits (2 retries, back-off 1: urllib3 waits 0 s, then 2 s) the
    # same call fails in a few seconds, and the variables it set are gone afterwards.
    import time

    import pytest

    from gpope.config import TrackingSettings
    from gpope.shell.tracking import bounded, http_limits

    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)
    client = mlflow.MlflowClient(tracking_uri=f"http://127.0.0.1:{_closed_port()}")
    start = time.monotonic()
    with http_limits(TrackingSettings()), pytest.raises(Exception, match=r"Max retries|refused"):
        bounded(lambda: client.get_experiment_by_name("gpope"), seconds=60, what="lookup")
    assert time.monotonic() - start < 10
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # the environment's value wins
    with http_limits(TrackingSettings()):
        assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
        assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "10"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"


def test_bounded_gives_up_at_its_time_limit_and_passes_results_and_errors_through():
    import threading
    import time

    import pytest

    from gpope.shell.tracking import TrackingTimeout, bounded

    release = threading.Event()
    start = time.monotonic()
    with pytest.raises(TrackingTimeout, match=r"within 0.3 s \(tracking.timeout_seconds\)"):
        bounded(lambda: release.wait(30), seconds=0.3, what="MLflow logging")
    assert time.monotonic() - start < 5
    release.set()
    assert bounded(lambda: 42, seconds=5, what="x") == 42
    with pytest.raises(ZeroDivisionError):
        bounded(lambda: 1 / 0, seconds=5, what="x")

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

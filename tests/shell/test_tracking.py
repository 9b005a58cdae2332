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


def test_experiments_are_classic_ml_and_private_diagnostics_go_to_a_tagged_child(tmp_path):
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
    for exp_id in (run.info.experiment_id, old):
        assert client.get_experiment(exp_id).tags[EXPERIMENT_KIND[0]] == EXPERIMENT_KIND[1]
    parent, child = client.get_run(run.info.run_id), client.get_run(child_id)
    assert "diagnostic.private" not in parent.data.tags and "mspbe" not in parent.data.metrics
    assert child.data.tags["diagnostic.private"] == "true"
    assert child.data.tags["mlflow.parentRunId"] == run.info.run_id
    assert child.data.metrics == {"mspbe": 0.5}
    assert [a.path for a in client.list_artifacts(child_id)] == ["lstd.json"]
    assert code_version()["gpope.version"]

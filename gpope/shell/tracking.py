"""MLflow tracking: where runs go and a small API to record them.

Tracking URI precedence: ``--tracking-uri`` > ``$MLFLOW_TRACKING_URI`` > ``tracking.uri`` in conf >
``sqlite:///<lake root>/mlflow.db``. With the local SQLite default, artifacts go to
``<lake root>/mlartifacts`` (not the current directory).

Values computed from private data without noise are logged only with the tag
``diagnostic.private=true`` (see :func:`log_private_diagnostics`); released values are logged as
ordinary params/metrics.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpope.jsonable import jsonable

__all__ = [
    "PRIVATE_DIAGNOSTIC_TAG",
    "log_json_artifact",
    "log_private_diagnostics",
    "resolve_tracking_uri",
    "start_run",
]

PRIVATE_DIAGNOSTIC_TAG = "diagnostic.private"


def resolve_tracking_uri(cli_uri: str | None, conf_uri: str | None, lake_root: str | Path) -> str:
    """The tracking URI to use, by the precedence in the module docstring."""
    if cli_uri:
        return cli_uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if conf_uri:
        return conf_uri
    root = Path(lake_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{root / 'mlflow.db'}"


def _experiment_id(name: str, tracking_uri: str) -> str:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    artifact_location = None
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///") :])
        artifact_location = (db.parent / "mlartifacts").resolve().as_uri()
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except Exception:  # created concurrently by another process
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


@contextmanager
def start_run(
    *,
    tracking_uri: str,
    experiment: str,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    nested: bool = False,
    parent_run_id: str | None = None,
) -> Iterator[Any]:
    """Start an MLflow run in ``experiment`` at ``tracking_uri``; yields the active run.

    The run ends FINISHED on success and FAILED if the body raises (the error propagates).
    MLflow's global tracking URI (and the ``MLFLOW_TRACKING_URI`` variable, which
    ``mlflow.set_tracking_uri`` sets) is restored afterwards, so a later command in the same
    process resolves its own URI instead of inheriting this run's.
    """
    import logging

    import mlflow

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri)
    try:
        exp_id = _experiment_id(experiment, tracking_uri)
        run_tags = dict(tags or {})
        if parent_run_id:
            run_tags["mlflow.parentRunId"] = parent_run_id
        with mlflow.start_run(
            experiment_id=exp_id, run_name=run_name, tags=run_tags, nested=nested
        ) as run:
            yield run
    finally:
        mlflow.set_tracking_uri(previous)  # None unsets the variable again


def log_json_artifact(obj: Any, name: str, artifact_path: str | None = None) -> None:
    """Log ``obj`` as a JSON file artifact named ``name`` in the active run."""
    import mlflow

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(json.dumps(obj, indent=2, sort_keys=True, default=jsonable))
        mlflow.log_artifact(str(path), artifact_path=artifact_path)


def log_private_diagnostics(metrics: Mapping[str, float], *, note: str) -> None:
    """Log values computed from private data WITHOUT noise, tagged as private diagnostics.

    They are prefixed ``private_diagnostic.`` and the run is tagged ``diagnostic.private=true``
    with ``note`` explaining what they are; they are never released.
    """
    import mlflow

    mlflow.set_tag(PRIVATE_DIAGNOSTIC_TAG, "true")
    mlflow.set_tag("diagnostic.private.note", note)
    mlflow.log_metrics({f"private_diagnostic.{k}": float(v) for k, v in metrics.items()})


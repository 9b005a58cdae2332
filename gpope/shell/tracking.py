"""MLflow tracking: where runs go and a small API to record them.

Tracking URI precedence: ``--tracking-uri`` > ``$MLFLOW_TRACKING_URI`` > ``tracking.uri`` in conf >
``sqlite:///<lake root>/mlflow.db`` (artifacts in ``<lake root>/mlartifacts``).

Values computed from private data without noise are logged only in a separate experiment,
``<experiment>/private-diagnostics``, tagged ``diagnostic.private=true``
(:func:`log_private_diagnostics`); released values are ordinary params/metrics. Logging after a
release is bounded in time (:func:`bounded`, :func:`http_limits`), so an unreachable server costs
seconds and a release is never reported as a failed job because tracking hung.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from gpope.errors import GpopeError
from gpope.jsonable import jsonable
from gpope.shell import mlflow_names

if TYPE_CHECKING:
    from gpope.config import TrackingSettings

__all__ = ["EXPERIMENT_KIND", "TrackingTimeout", "bounded", "code_version", "diagnostics_experiment",
           "ensure_store", "http_limits", "log_json_artifact", "log_private_diagnostics",
           "resolve_tracking_uri", "start_run", "store_lock"]

#: MLflow 3's experiment-kind tag value for classic (non-GenAI) experiments.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


T = TypeVar("T")


class TrackingTimeout(GpopeError):
    """MLflow logging did not finish within ``tracking.timeout_seconds`` (it was abandoned)."""


@contextmanager
def http_limits(settings: TrackingSettings) -> Iterator[None]:
    """MLflow's HTTP retry policy from ``settings`` while the body runs (retries, back-off,
    per-request timeout); a variable the environment already sets wins, and the variables set
    here are removed afterwards."""
    wanted = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": settings.http_retries,
              "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": settings.http_backoff_factor,
              "MLFLOW_HTTP_REQUEST_TIMEOUT": settings.http_timeout_seconds}
    here = {k: str(v) for k, v in wanted.items() if k not in os.environ}
    os.environ.update(here)
    try:
        yield
    finally:
        for key in here:
            os.environ.pop(key, None)


def bounded(body: Callable[[], T], *, seconds: float, what: str) -> T:
    """``body()``, waited for at most ``seconds`` (it runs on a daemon thread, so an abandoned
    call never holds the process open; MLflow keeps its active run per thread).

    Raises:
        TrackingTimeout: ``body`` was still running after ``seconds``.
        KeyboardInterrupt: the wait was interrupted (the body is abandoned).
        Exception: what ``body`` raised.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = body()
        except BaseException as exc:  # handed to the waiting thread
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"gpope {what}", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise TrackingTimeout(f"{what} did not finish within {seconds:g} s "
                              "(tracking.timeout_seconds)")
    if "error" in box:
        raise box["error"]
    return box["value"]


def code_version() -> dict[str, str]:
    """Tags naming the code: ``gpope.version`` and, from a git checkout, ``gpope.git_commit``."""
    import subprocess

    from gpope import __version__

    tags = {"gpope.version": __version__}
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return tags
    commit = out.stdout.strip()
    if out.returncode == 0 and len(commit) == 40:
        tags["gpope.git_commit"] = commit
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--", "."],
                               capture_output=True, text=True, timeout=5, check=False)
        if dirty.returncode == 0 and dirty.stdout.strip():
            tags["gpope.git_dirty"] = "true"
    return tags


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


@contextmanager
def store_lock(tracking_uri: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` (``<db>.lock``) on a local SQLite store while it may be
    created or migrated: MLflow's migrations fail when several processes run them at once. A
    no-op for other URIs."""
    if not tracking_uri.startswith("sqlite:///"):
        yield
        return
    import fcntl

    db = Path(tracking_uri[len("sqlite:///") :])
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{db}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_store(tracking_uri: str, experiment: str) -> str:
    """Create (once, under :func:`store_lock`) the tracking store and ``experiment``; its id.

    Safe to call from several processes at once; a store that exists is only read.
    """
    _require_sql_store(tracking_uri)
    with store_lock(tracking_uri):
        _create_sqlite_store(tracking_uri)
        return _experiment_id(experiment, tracking_uri)


def _create_sqlite_store(tracking_uri: str) -> None:
    """Create a new SQLite store with its artifact root beside it, as a percent-encoded
    ``file:`` URI (MLflow writes that path into raw SQL); an existing store is left untouched."""
    if not tracking_uri.startswith("sqlite:///"):
        return
    db = Path(tracking_uri[len("sqlite:///") :])
    if db.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    SqlAlchemyStore(tracking_uri, (db.parent / "mlartifacts").resolve().as_uri())


def _experiment_id(name: str, tracking_uri: str) -> str:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        if EXPERIMENT_KIND[0] not in exp.tags:  # created before gpope set the kind
            client.set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
        return exp.experiment_id
    artifact_location = None
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///") :])
        artifact_location = (db.parent / "mlartifacts").resolve().as_uri()
    try:
        return client.create_experiment(
            name, artifact_location=artifact_location, tags=dict([EXPERIMENT_KIND])
        )
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

    _require_sql_store(tracking_uri)
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(tracking_uri)
    try:
        exp_id = ensure_store(tracking_uri, experiment)
        run_tags = dict(tags or {})
        if parent_run_id:
            run_tags["mlflow.parentRunId"] = parent_run_id
        with mlflow.start_run(
            experiment_id=exp_id, run_name=run_name, tags=run_tags, nested=nested
        ) as run:
            yield run
    finally:
        mlflow.set_tracking_uri(previous)  # None unsets the variable again


def _require_sql_store(tracking_uri: str | None) -> None:
    """A database tracking URI needs MLflow's SQL store (full ``mlflow``, not ``mlflow-skinny``).

    Raises:
        EnvironmentSetupError: the URI is a database one and SQLAlchemy/alembic are missing.
    """
    from importlib.util import find_spec

    scheme = (tracking_uri or "").split(":", 1)[0].split("+", 1)[0]
    if scheme in ("sqlite", "postgresql", "mysql", "mssql") and (
        find_spec("sqlalchemy") is None or find_spec("alembic") is None
    ):
        from gpope.errors import EnvironmentSetupError

        raise EnvironmentSetupError(
            f"The MLflow tracking URI {tracking_uri!r} needs MLflow's database store, which "
            "mlflow-skinny (the library's base dependency) lacks: pip install 'gpope[local]' (or "
            "mlflow), or use a tracking server (--tracking-uri databricks / http://...)."
        )


def log_json_artifact(obj: Any, name: str) -> None:
    """Log ``obj`` as a JSON artifact named ``name`` in the active run (``mlflow.log_dict``)."""
    import mlflow

    mlflow.log_dict(json.loads(json.dumps(obj, sort_keys=True, default=jsonable)), name)


def diagnostics_experiment(experiment: str) -> str:
    """The experiment of ``experiment``'s private diagnostics (``<experiment>/private-diagnostics``):
    a separate experiment, so that whoever may read the releases' experiment does not read them."""
    return experiment + mlflow_names.DIAGNOSTICS_EXPERIMENT_SUFFIX


def log_private_diagnostics(
    metrics: Mapping[str, float],
    *,
    note: str,
    tags: Mapping[str, str] | None = None,
    artifacts: Mapping[str, Any] | None = None,
) -> str:
    """Log values computed from private data WITHOUT noise for the active (released) run, to a
    run of the separate :func:`diagnostics_experiment` (its permissions can be set apart) tagged
    ``diagnostic.private=true``, with ``note`` and the released run's id; nothing goes to the
    released run or its experiment. Returns the diagnostics run's id."""
    import mlflow

    run_name = "private diagnostics (NOT released)"
    parent = mlflow.active_run()
    if parent is None:
        raise RuntimeError("log_private_diagnostics needs an active (released) MLflow run")
    uri = mlflow.get_tracking_uri()
    client = mlflow.MlflowClient(tracking_uri=uri)
    released_experiment = client.get_experiment(parent.info.experiment_id).name
    exp_id = ensure_store(uri, diagnostics_experiment(released_experiment))
    run_tags = {**dict(tags or {}), mlflow_names.PRIVATE_DIAGNOSTIC: "true",
                "diagnostic.private.note": note,
                mlflow_names.RELEASED_RUN: parent.info.run_id, "mlflow.runName": run_name}
    run = client.create_run(exp_id, tags=run_tags, run_name=run_name)
    status = "FAILED"
    try:
        for key, value in metrics.items():
            client.log_metric(run.info.run_id, key, float(value))
        for name, obj in (artifacts or {}).items():
            client.log_dict(run.info.run_id, json.loads(json.dumps(obj, default=jsonable)), name)
        status = "FINISHED"
    finally:
        client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id

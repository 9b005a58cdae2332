"""Shared fixtures: one real local SparkSession for the whole test session, temp lakes."""

from __future__ import annotations

import os
import tempfile

import pytest

# Spark binds to loopback only; keep MLflow and Spark from touching the user's defaults.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.pop("MLFLOW_TRACKING_URI", None)
# Calibration cache (gpope.core.accounting.cache) in a fresh directory: tests never read or fill
# the user's cache.
os.environ["GPOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix="gpope-test-cache-")


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession (local[2], UI off, UTC), shared by all Spark tests."""
    from gpope.config import SparkSettings
    from gpope.shell.spark import get_spark

    session = get_spark(
        SparkSettings(master="local[2]", shuffle_partitions=2, driver_memory="2g"),
        app_name="gpope-tests",
        ui=False,
    )
    yield session
    session.stop()


@pytest.fixture
def lake_root(tmp_path):
    """An empty lake root directory for one test."""
    root = tmp_path / "lake"
    root.mkdir()
    return root


@pytest.fixture
def tracking_uri(tmp_path):
    """A fresh MLflow SQLite store in a temp dir."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"

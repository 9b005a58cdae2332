"""Shared fixtures: one real local SparkSession for the whole test session, temp lakes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Spark binds to loopback only; keep MLflow and Spark from touching the user's defaults.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.pop("MLFLOW_TRACKING_URI", None)
# Every Spark JVM of the suite (each worker's session, the CLI and script subprocesses, the Connect
# server: all start through spark-submit, which adds $SPARK_SUBMIT_OPTS) compiles with C1 only
# and uses the serial GC. The suite's Spark jobs are tiny and short-lived: C2 compilation and G1's
# threads are most of their CPU (the ingest CLI on 4 chain patients 95 -> 52
# CPU-seconds, tests/shell/test_ingest.py 189 -> 105), and the suite is CPU-bound on 2 cores. JIT
# tiers and the collector change no result. Subprocesses inherit it with os.environ.
_TEST_JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if _TEST_JVM_OPTS not in os.environ.get("SPARK_SUBMIT_OPTS", ""):
    os.environ["SPARK_SUBMIT_OPTS"] = f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} {_TEST_JVM_OPTS}".strip()
# Calibration cache (gpope.core.accounting.cache) in a fresh directory: tests never read or fill
# the user's cache. One directory per run: xdist workers keep the one the controller made (they
# inherit its environment), so a calibration made in one worker is not redone in the other (the
# cache is safe for concurrent processes), as in a one-process run.
_CACHE_PREFIX = "gpope-test-cache-"
if not (os.environ.get("PYTEST_XDIST_WORKER")
        and Path(os.environ.get("GPOPE_CACHE_DIR", "")).name.startswith(_CACHE_PREFIX)):
    os.environ["GPOPE_CACHE_DIR"] = tempfile.mkdtemp(prefix=_CACHE_PREFIX)


# The longest test files, longest first: the first seven are the slowest measured (under
# load, order approximate), then files expected to be long (a CLI experiment preset, Spark
# evaluations, a 2 GiB calibration, a wheel build). `make test` runs two xdist workers with
# `--dist loadfile --no-loadscope-reorder`, which hands out whole files in collection order:
# listing these first keeps a long file from starting last while the other worker idles
# (xdist's default order, most tests first, put the one-test Connect file last).
LONGEST_FIRST = (
    "tests/shell/test_connect.py",
    "tests/shell/test_atomic.py",
    "tests/core/test_experiments.py",
    "tests/shell/test_demo.py",
    "tests/shell/test_evaluate_privacy.py",
    "tests/shell/test_kill_points.py",
    "tests/shell/test_stats.py",
    "tests/shell/test_java.py",
    "tests/shell/test_experiment_cli.py",
    "tests/shell/test_evaluate.py",
    "tests/shell/test_evaluate_private_tune.py",
    "tests/core/test_accounting_pld_bounds.py",
    "tests/test_packaging.py",
)


def pytest_collection_modifyitems(config, items):
    """Run the files of :data:`LONGEST_FIRST` first, in that order; the rest keep their order."""
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


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

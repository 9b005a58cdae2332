"""Shared fixtures: one real local SparkSession for the whole test session, temp lakes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
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


def simulate_tables(domain, patients, seed, options=None, *, policy=None):
    """A whole simulated cohort in memory, no Spark: ``(episodes, bronze event tables)``, the
    concatenation of the parts ``gpope simulate`` writes (patient ``P{i:06d}`` = trajectory i)."""
    from gpope.core.envs.cohort import concatenate_episodes
    from gpope.shell.pipeline import simulate

    parts = list(simulate.iter_simulated_tables(domain, patients, seed, options, policy=policy))
    tables = {name: {column: np.concatenate([t[name][column] for _, t in parts])
                     for column in parts[0][1][name]} for name in parts[0][1]}
    return concatenate_episodes([p for p, _ in parts]), tables


@pytest.fixture(scope="session")
def spark():
    """A real local SparkSession (local[2], UI off, UTC), shared by all Spark tests."""
    from gpope.config import SparkSettings
    from gpope.shell.spark import get_spark

    session = get_spark(
        SparkSettings(master="local[2]", shuffle_partitions=2, driver_memory="2g",
                      app_name="gpope-tests", ui=False),
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


# ------------------------------------------- bad event rows for the ingest tests (one per reason)
def _append(table: dict[str, np.ndarray], rows: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    out = {}
    for col, values in table.items():
        extra = np.array(rows[col], dtype=values.dtype) if rows[col] else values[:0]
        out[col] = np.concatenate([values, extra])
    return out


def _inject_bad_rows(
    tables: dict[str, dict[str, np.ndarray]],
    rng: np.random.Generator,
    spec: Any,
    *,
    per_reason: int = 2,
    shuffle: bool = True,
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, int]]]:
    """Add ``per_reason`` bad rows of every kind to clean tables, returning the expected rejections.

    Bad rows are only *added* (nothing good is changed), each with exactly one defect, so ingest
    must reject exactly the added rows and build the same transitions as from the clean tables:

    - observations ``invalid_value``: a configured variable of a known patient, value NaN or +-inf,
      at a time one hour after one of the patient's decisions;
    - observations ``unknown_variable``: a variable not in the spec (``"unconfigured_lab"``);
    - observations / treatments ``duplicate_row``: an exact copy of an existing row (same patient
      and timestamp); one copy is used, each extra copy is rejected;
    - treatments ``unknown_action``: an action not in the vocabulary (``"unknown_drug"``), one hour
      after a decision;
    - treatments ``invalid_propensity``: a valid action with propensity 0, -0.1, 1.5 or NaN (outside
      (0, 1]), one hour after a decision;
    - outcomes ``invalid_value``: reward NaN or +-inf, one hour after a decision;
    - observations and outcomes ``no_treatments``: a new patient (``"NOTREAT<i>"``) with valid
      observations and outcomes but no treatment: all of its rows;
    - outcomes ``unknown_patient``: an outcome of a patient (``"GHOST<i>"``) with no other rows.

    Args:
        tables: clean tables from ``ehr.episodes_to_event_tables`` (at least one treatment).
        rng: chooses the rows to copy and the patients to attach bad rows to.
        spec: the spec the tables were written with.
        per_reason: number of bad rows per (table, reason) (for ``no_treatments``: patients, each with
            one observation per variable and one outcome).
        shuffle: permute all rows of each table (ingest must not rely on row order).

    Returns:
        ``(tables, expected)`` with ``expected[table][reason]`` the number of rows to be rejected.
    """
    k = int(per_reason)
    tre = tables["treatments"]
    n_tre = len(tre["patient_id"])
    assert n_tre > 0, "the clean tables need at least one treatment row"
    hour = np.timedelta64(3_600_000_000, "us")
    rows = {name: {col: [] for col in cols} for name, cols in tables.items()}
    expected: dict[str, dict[str, int]] = {name: {} for name in tables}

    def anchor() -> tuple[Any, np.datetime64]:
        i = int(rng.integers(n_tre))
        return tre["patient_id"][i], tre["time"][i] + hour

    bad_values = [np.nan, np.inf, -np.inf]
    for j in range(k):
        pid, tm = anchor()
        rows["observations"]["patient_id"].append(pid)
        rows["observations"]["time"].append(tm)
        rows["observations"]["variable"].append(spec.variables[j % len(spec.variables)])
        rows["observations"]["value"].append(bad_values[j % 3])
        pid, tm = anchor()
        rows["observations"]["patient_id"].append(pid)
        rows["observations"]["time"].append(tm)
        rows["observations"]["variable"].append("unconfigured_lab")
        rows["observations"]["value"].append(1.0)
        pid, tm = anchor()
        rows["treatments"]["patient_id"].append(pid)
        rows["treatments"]["time"].append(tm)
        rows["treatments"]["action"].append("unknown_drug")
        rows["treatments"]["propensity"].append(0.5)
        pid, tm = anchor()
        rows["treatments"]["patient_id"].append(pid)
        rows["treatments"]["time"].append(tm)
        rows["treatments"]["action"].append(spec.actions[0])
        rows["treatments"]["propensity"].append([0.0, -0.1, 1.5, np.nan][j % 4])
        pid, tm = anchor()
        rows["outcomes"]["patient_id"].append(pid)
        rows["outcomes"]["time"].append(tm)
        rows["outcomes"]["reward"].append(bad_values[j % 3])
        # A patient with observations and outcomes but no treatment.
        ghost_time = tre["time"][0]
        for var in spec.variables:
            rows["observations"]["patient_id"].append(f"NOTREAT{j}")
            rows["observations"]["time"].append(ghost_time)
            rows["observations"]["variable"].append(var)
            rows["observations"]["value"].append(0.0)
        rows["outcomes"]["patient_id"].append(f"NOTREAT{j}")
        rows["outcomes"]["time"].append(ghost_time + hour)
        rows["outcomes"]["reward"].append(0.0)
        rows["outcomes"]["patient_id"].append(f"GHOST{j}")
        rows["outcomes"]["time"].append(ghost_time + hour)
        rows["outcomes"]["reward"].append(1.0)
    # Exact duplicates of existing rows.
    for name in ("observations", "treatments"):
        cols = tables[name]
        n = len(next(iter(cols.values())))
        if n == 0:
            continue
        for i in rng.choice(n, size=min(k, n), replace=False):
            for col, values in cols.items():
                rows[name][col].append(values[i])
        expected[name]["duplicate_row"] = min(k, n)
    expected["observations"].update(invalid_value=k, unknown_variable=k, no_treatments=k * len(spec.variables))
    expected["treatments"].update(unknown_action=k, invalid_propensity=k)
    expected["outcomes"].update(invalid_value=k, no_treatments=k, unknown_patient=k)
    out = {name: _append(tables[name], rows[name]) for name in tables}
    if shuffle:
        for name, cols in out.items():
            perm = rng.permutation(len(next(iter(cols.values()))))
            out[name] = {col: values[perm] for col, values in cols.items()}
    return out, expected


@pytest.fixture
def inject_bad_rows():
    """:func:`_inject_bad_rows`: clean bronze tables -> (tables with bad rows added, expected
    rejections per table and reason)."""
    return _inject_bad_rows


#: The count epsilon at which fixtures release their small cohorts' m~ (noise std 0.17: m~ = m
#: except with probability about 1e-8), so tests that pin exact-m arithmetic on 40-120 patients
#: keep it; charged to the dataset's budget like any count (docs/ARCHITECTURE.md section 4).
EXACT_COUNT_EPSILON = 50.0


def _release_exact_count(spark, config, dataset: str, spec) -> float:
    """Release the m~ of ``dataset``'s current statistics version at
    :data:`EXACT_COUNT_EPSILON` (the dataset's budget must pay it) so every later run, private or
    seeded, reads it; returns the epsilon charged."""
    import dataclasses

    from gpope.shell.pipeline.released_count import public_count
    from gpope.shell.pipeline.stats import statistics_version, trajectory_count

    version = statistics_version(spark, config, dataset=dataset)
    m = trajectory_count(spark, config, dataset=dataset, spec=spec, version=version)
    exact = dataclasses.replace(config, privacy=dataclasses.replace(
        config.privacy, count_epsilon=EXACT_COUNT_EPSILON))
    count = public_count(exact, dataset=dataset, stats_version=version, m=m, spark=spark)
    assert count.private and abs(count.m_noisy - m) <= 1
    return EXACT_COUNT_EPSILON


@pytest.fixture(scope="session")
def exact_count():
    """:func:`_release_exact_count`: ``exact_count(spark, config, dataset, spec)``."""
    return _release_exact_count

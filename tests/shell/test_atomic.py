"""Multi-table steps are atomic (issue 13.2): real processes killed with SIGKILL between commits.

Each stage writes its tables in commits tagged with its run id and makes them visible with one
``pipeline_runs`` manifest commit (gpope.shell.lake.manifest). The tests run the real CLI in a
subprocess with ``GPOPE_FAULT_KILL=<stage>:<table>``, which kills the process with SIGKILL right
after that table's commit, and then check what readers see against the stored counts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from pyspark.sql import functions as F

from gpope.config import GpopeConfig, LakeSettings
from gpope.shell.lake import Lake, TableRef
from gpope.shell.lake.manifest import FAULT_ENV, PipelineRuns, pinned_version, read_pinned

pytestmark = pytest.mark.spark

GPOPE = [sys.executable, "-c", "import sys; from gpope.shell.cli import main; sys.exit(main())"]
BRONZE = ("observations", "treatments", "outcomes")


def test_pinned_version_skips_commits_of_incomplete_runs():
    history = [(0, None), (1, "r1"), (2, "killed"), (3, "r3")]
    assert pinned_version(history, {"r1", "r3"}) == 3
    assert pinned_version(history, {"r1"}) == 1  # r3 still running: readers see r1's version
    assert pinned_version(history[1:3], set()) is None


def _killed(args: list[str], point: str) -> None:
    env = {**os.environ, FAULT_ENV: point, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run([*GPOPE, *args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def _bad_treatments(spark, config, dataset, n):
    from gpope.shell import lake
    from gpope.shell.schemas import TREATMENTS

    rows = [(None, None, "go", 1.0)] * n  # null patient: rejected with a reason
    df = spark.createDataFrame(rows, schema=TREATMENTS)
    lake.write_table(df, config.lake, "bronze", dataset, "treatments", mode="append")


def _balance(spark, lk, runs, dataset):
    """Stored counts as a reader sees them: rows in (the bronze versions the visible ingest read)
    = transitions (treatments used) / used + rejected, per bronze table."""
    committed = runs.committed()
    transitions, tv = read_pinned(lk, TableRef("silver", "transitions", dataset), committed=committed)
    rejected, rv = read_pinned(lk, TableRef("silver", "rejected_events", dataset), committed=committed)
    manifest = runs.latest(stage="ingest", dataset=dataset)
    assert manifest.version(TableRef("silver", "transitions", dataset)) == tv
    assert manifest.version(TableRef("silver", "rejected_events", dataset)) == rv
    by_table = {r["table"]: r["n"] for r in rejected.groupBy("table").agg(F.count("*").alias("n")).collect()}
    details = manifest.details
    for table in BRONZE:
        ref = TableRef("bronze", table, dataset)
        rows_in = lk.read(ref, version=details["inputs"][str(ref)]).count()
        assert rows_in == details["rows_used"][table] + by_table.get(table, 0), table
    assert transitions.count() == details["rows_used"]["treatments"]
    return transitions.count(), by_table.get("treatments", 0)


def test_kill_between_ingest_commits_keeps_stored_counts_balanced(spark, lake_root):
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.simulate import SimulateOptions, run_simulate

    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    lk, runs = Lake.from_settings(spark, config.lake), PipelineRuns(config.lake, spark=spark)
    options = SimulateOptions(n_steps=4)
    run_simulate(spark, config, "k", domain="chain", patients=3, seed=1, options=options)
    _bad_treatments(spark, config, "k", 2)
    first = run_ingest(spark, config, "k", domain="chain")
    assert _balance(spark, lk, runs, "k") == (first.n_transitions, 2)

    # a new cohort (3 bad rows), then an ingest killed after transitions, before rejected_events
    run_simulate(spark, config, "k", domain="chain", patients=5, seed=2, options=options)
    _bad_treatments(spark, config, "k", 3)
    _killed(["ingest", "--dataset", "k", "--domain", "chain", "--lake", str(lake_root)],
            "ingest:transitions")
    transitions = TableRef("silver", "transitions", "k")
    latest = lk.read(transitions).count()
    assert lk.version(transitions) == 1 and latest != first.n_transitions  # the kill was mid-step
    assert _balance(spark, lk, runs, "k") == (first.n_transitions, 2)  # readers: the old, whole run

    second = run_ingest(spark, config, "k", domain="chain")  # a re-run completes the step
    assert _balance(spark, lk, runs, "k") == (second.n_transitions, 3)


def test_kill_between_simulate_commits_leaves_the_previous_cohort(spark, lake_root):
    from gpope.shell.pipeline.simulate import SimulateOptions, run_simulate

    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    lk, runs = Lake.from_settings(spark, config.lake), PipelineRuns(config.lake, spark=spark)
    run_simulate(spark, config, "s", domain="chain", patients=2, seed=1,
                 options=SimulateOptions(n_steps=3))
    _killed(["simulate", "--domain", "chain", "--patients", "4", "--steps", "3", "--dataset", "s",
             "--seed", "2", "--no-progress", "--lake", str(lake_root)], "simulate:treatments")
    committed = runs.committed()
    observations = TableRef("bronze", "observations", "s")
    assert lk.version(observations) == 1  # the killed run committed observations...
    patients = {}
    for table in BRONZE:  # ...but readers see the first cohort in all three tables
        df, version = read_pinned(lk, TableRef("bronze", table, "s"), committed=committed)
        assert version == 0
        patients[table] = {r[0] for r in df.select("patient_id").distinct().collect()}
    assert patients["observations"] == patients["treatments"] == patients["outcomes"]
    assert len(patients["treatments"]) == 2

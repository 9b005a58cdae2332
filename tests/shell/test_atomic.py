"""Multi-table steps are atomic (issue 13.2): real processes killed with SIGKILL between commits.

Each stage writes its tables in commits tagged with its run id and makes them visible with one
``pipeline_runs`` manifest commit (gpope.shell.lake.manifest). The tests run the real CLI in a
subprocess with ``GPOPE_FAULT=<stage>:<table>``, which kills the process with SIGKILL right
after that table's commit, and then check what readers see against the stored counts.

The three killed processes (simulate, ingest, release) each start their own Spark; a module
fixture prepares their lakes and runs the three processes concurrently, so the suite pays about
one JVM start instead of three. Each test then checks its own lake.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from gpope.config import GpopeConfig, LakeSettings
from gpope.core.accounting.admission import Charge
from gpope.errors import SchemaError
from gpope.shell import faults
from gpope.shell.lake import Lake, TableRef
from gpope.shell.lake.manifest import PipelineRuns, pinned_version, read_pinned

pytestmark = pytest.mark.spark

GPOPE = [sys.executable, "-c", "import sys; from gpope.cli import main; sys.exit(main())"]
BRONZE = ("observations", "treatments", "outcomes")


def test_pinned_version_skips_commits_of_incomplete_runs():
    history = [(0, None), (1, "r1"), (2, "killed"), (3, "r3")]
    assert pinned_version(history, {"r1", "r3"}) == 3
    assert pinned_version(history, {"r1"}) == 1  # r3 still running: readers see r1's version
    assert pinned_version(history[1:3], set()) is None


def _start_killed(argv: list[str], point: str, log) -> subprocess.Popen:
    """Start ``argv`` with ``$GPOPE_FAULT=point`` (SIGKILL right after that commit)."""
    env = {**os.environ, faults.ENV: point, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log)




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


@pytest.fixture(scope="module")
def killed(spark, tmp_path_factory):
    """Three lakes, each with one real process killed with SIGKILL between two commits.

    Returns {"simulate"|"ingest"|"release": (lake root, return code, stderr)} plus
    "first_ingest" (the complete ingest before the killed one) and "first_balance" (what readers
    saw before the kill). The killed processes run concurrently with each other and with the
    in-process preparation of the next lake."""
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.release import write_release
    from gpope.shell.pipeline.simulate import SimulateOptions, run_simulate

    roots = {name: tmp_path_factory.mktemp(f"atomic_{name}") / "lake"
             for name in ("simulate", "ingest", "release")}
    logs = {name: (root.parent / "killed.log").open("w+") for name, root in roots.items()}
    procs = {}
    # simulate: a first cohort, then a simulate killed after observations
    config = GpopeConfig(lake=LakeSettings(root=str(roots["simulate"])))
    run_simulate(spark, config, "s", domain="chain", patients=2, seed=1,
                 options=SimulateOptions(n_steps=3))
    procs["simulate"] = _start_killed(
        [*GPOPE, "simulate", "--domain", "chain", "--patients", "4", "--steps", "3", "--dataset",
         "s", "--seed", "2", "--no-progress", "--lake", str(roots["simulate"])],
        "simulate:treatments", logs["simulate"])
    # release: r1 released, then r2 reserved in the ledger and its release killed after
    # released_estimates
    from gpope.shell.pipeline.ledger import PrivacyLedger

    config = GpopeConfig(lake=LakeSettings(root=str(roots["release"])))
    ledger = PrivacyLedger(None, config)
    ledger.set_budget("d", epsilon=10.0, delta=1e-3)
    ledger.reserve(Charge(dataset="d", run_id="r1", epsilon=1.0, delta=1e-6, accountant="rdp",
                          mechanism="gaussian"))  # every release is reserved first (the ledger checks)
    write_release(spark, config, *_release("r1"))
    ledger.mark("d", "r1", "released")
    row, values = _release("r2")
    procs["release"] = _start_killed(
        [sys.executable, "-c", _RELEASE_SCRIPT, str(roots["release"]), repr(row), repr(values)],
        "release:released_estimates", logs["release"])
    # ingest: a complete ingest (2 bad rows), a new cohort (3 bad rows), then an ingest killed
    # after transitions, before rejected_events
    config = GpopeConfig(lake=LakeSettings(root=str(roots["ingest"])))
    lk, runs = Lake.from_settings(spark, config.lake), PipelineRuns(config.lake, spark=spark)
    options = SimulateOptions(n_steps=4)
    run_simulate(spark, config, "k", domain="chain", patients=3, seed=1, options=options)
    _bad_treatments(spark, config, "k", 2)
    first = run_ingest(spark, config, "k", domain="chain")
    first_balance = _balance(spark, lk, runs, "k")
    run_simulate(spark, config, "k", domain="chain", patients=5, seed=2, options=options)
    _bad_treatments(spark, config, "k", 3)
    procs["ingest"] = _start_killed(
        [*GPOPE, "ingest", "--dataset", "k", "--domain", "chain", "--lake", str(roots["ingest"])],
        "ingest:transitions", logs["ingest"])
    out = {"first_ingest": first, "first_balance": first_balance}
    for name, proc in procs.items():
        try:
            code = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        logs[name].seek(0)
        out[name] = (roots[name], code, logs[name].read())
        logs[name].close()
    return out


def test_kill_between_ingest_commits_keeps_stored_counts_balanced(spark, killed):
    from gpope.shell.pipeline.ingest import run_ingest

    lake_root, code, stderr = killed["ingest"]
    assert code == -signal.SIGKILL, stderr[-2000:]
    first = killed["first_ingest"]
    assert killed["first_balance"] == (first.n_transitions, 2)
    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    lk, runs = Lake.from_settings(spark, config.lake), PipelineRuns(config.lake, spark=spark)
    transitions = TableRef("silver", "transitions", "k")
    latest = lk.read(transitions).count()
    assert lk.version(transitions) == 1 and latest != first.n_transitions  # the kill was mid-step
    assert _balance(spark, lk, runs, "k") == (first.n_transitions, 2)  # readers: the old, whole run

    second = run_ingest(spark, config, "k", domain="chain")  # a re-run completes the step
    assert _balance(spark, lk, runs, "k") == (second.n_transitions, 3)


def test_kill_between_simulate_commits_leaves_the_previous_cohort(spark, killed):
    lake_root, code, stderr = killed["simulate"]
    assert code == -signal.SIGKILL, stderr[-2000:]
    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    lk, runs = Lake.from_settings(spark, config.lake), PipelineRuns(config.lake, spark=spark)
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


_RELEASE_SCRIPT = """
import datetime, sys
from gpope.config import GpopeConfig, LakeSettings, SparkSettings
from gpope.shell.spark import get_spark
from gpope.shell.pipeline.release import write_release
spark = get_spark(SparkSettings(master="local[1]", shuffle_partitions=1, app_name="kill", ui=False))
from gpope.shell.pipeline.ledger import Charge, PrivacyLedger
config = GpopeConfig(lake=LakeSettings(root=sys.argv[1]))
row, values = eval(sys.argv[2]), eval(sys.argv[3])
PrivacyLedger(None, config).reserve(Charge(dataset="d", run_id=row["run_id"], epsilon=1.0,
                                           delta=1e-6, accountant="rdp", mechanism="gaussian"))
write_release(spark, config, row, values)
"""


def _release(run_id: str):
    from gpope.shell.schemas import RELEASED_ESTIMATES, RELEASED_VALUES

    created = __import__("datetime").datetime(2024, 1, 1)
    row = {f.name: None for f in RELEASED_ESTIMATES.fields}
    row.update(run_id=run_id, dataset="d", spec_id="s", policy="p", epsilon=1.0, delta=1e-6,
               accountant="rdp", created_at=created, theta=[1.0], reference_states=["a", "b"],
               values=[1.0, 2.0], private=True, estimator="gpope")
    values = []
    for state, value in (("a", 1.0), ("b", 2.0)):
        v = {f.name: None for f in RELEASED_VALUES.fields}
        v.update({k: row[k] for k in v if k in row})
        v.update(spec_name="s", state=state, value=value)
        values.append(v)
    return row, values


def test_kill_between_release_commits_releases_nothing(spark, killed):
    from gpope.shell.lake.manifest import read_pinned
    from gpope.shell.pipeline.release import write_release

    def read_releases(spark, config, table="released_estimates"):  # as every reader sees them
        return read_pinned(Lake.from_settings(spark, config.lake), TableRef.shared(table))[0]

    lake_root, code, stderr = killed["release"]
    assert code == -signal.SIGKILL, stderr[-2000:]
    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    lk = Lake.from_settings(spark, config.lake)
    assert lk.read(TableRef.shared("released_estimates")).count() == 2  # r2's row was committed
    for table in ("released_estimates", "released_values"):  # but no reader sees it
        ids = {r[0] for r in read_releases(spark, config, table=table).select("run_id").collect()}
        assert ids == {"r1"}, table
    assert PipelineRuns(config.lake).committed() == {"r1"}
    from gpope.shell.pipeline.ledger_store import released_run_ids

    # reconcile's evidence reads through the manifest: r2's row is there, but r2 is no release
    assert released_run_ids(config, {"r1", "r2"}) == {"r1"}
    assert _raw_run_ids(config, "released_estimates") == {"r1", "r2"}  # raw readers see it...
    from gpope.shell.pipeline.ledger import PrivacyLedger

    settled = PrivacyLedger(None, config).reconcile("d")  # r2's process is gone: failed
    assert [(s.run_id, s.status) for s in settled] == [("r2", "failed")]
    for table in ("released_estimates", "released_values"):  # ...until reconcile deletes it
        assert _raw_run_ids(config, table) == {"r1"}, table
    write_release(spark, config, *_release("r3"))  # a later release does not reveal r2
    ids = {r[0] for r in read_releases(spark, config).select("run_id").collect()}
    assert ids == {"r1", "r3"}
    from gpope.shell.lake.manifest import read_pinned_arrow

    arrow = read_pinned_arrow(config.lake, TableRef.shared("released_values"))  # JVM-free readers
    assert set(arrow.column("run_id").to_pylist()) == {"r1", "r3"}

    row, values = _release("r4")  # a release failing after its released_estimates commit...
    values[1]["state"] = None  # (NOT NULL: the released_values write fails)
    with pytest.raises((SchemaError, ValueError)):  # Spark refuses the null (either place)
        write_release(spark, config, row, values)
    for table in ("released_estimates", "released_values"):  # ...deletes its row at once
        assert _raw_run_ids(config, table) == {"r1", "r3"}, table


def _raw_run_ids(config, table: str) -> set[str]:
    """run_ids at the latest version as raw Delta readers see them: delta-rs and DuckDB (over
    delta-rs's Arrow dataset), no manifest, no pinning."""
    import duckdb
    from deltalake import DeltaTable

    path = str(Path(config.lake.root) / "gold" / table)
    if not DeltaTable.is_deltatable(path):
        return set()
    by_delta_rs = set(DeltaTable(path).to_pyarrow_table().column("run_id").to_pylist())
    dataset = DeltaTable(path).to_pyarrow_dataset()  # noqa: F841 - DuckDB scans it by name
    by_duckdb = {r[0] for r in duckdb.sql("SELECT DISTINCT run_id FROM dataset").fetchall()}
    assert by_delta_rs == by_duckdb
    return by_delta_rs


def test_count_and_statistics_come_from_one_pinned_version(spark, lake_root):
    """Issue 12.7: m and the rows are read from the same Delta version of trajectory_stats."""
    from gpope.shell.pipeline.stats import read_statistics, statistics_version, trajectory_count
    from gpope.shell.schemas import TRAJECTORY_STATS

    class Spec:  # the two attributes trajectory_count reads
        spec_id, name = "s", "s"

    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    lk = Lake.from_settings(spark, config.lake)
    ref = TableRef("gold", "trajectory_stats", "d")

    def write(m):
        rows = [("s", i, 1, [1.0], [1.0], [1.0], None) for i in range(m)]
        lk.write(spark.createDataFrame(rows, TRAJECTORY_STATS), ref, mode="replace_where",
                 replace_where={"spec_id": "s"}, partition_by=["spec_id"])

    write(3)
    pinned = statistics_version(spark, config, dataset="d")
    write(5)  # a concurrent `gpope stats` lands between the count and the read
    m = trajectory_count(spark, config, dataset="d", spec=Spec(), version=pinned)
    rows = read_statistics(spark, config, dataset="d", spec_id="s", version=pinned).count()
    assert m == rows == 3
    assert trajectory_count(spark, config, dataset="d", spec=Spec()) == 5


def test_a_missing_manifest_file_is_one_line_naming_the_table_and_its_repair(tmp_path):
    """Every stage reads ``pipeline_runs`` first: a data file of it deleted by hand is a
    CorruptTableError naming the table and the repair, not delta-rs' FileNotFoundError."""
    from gpope.errors import CorruptTableError

    runs = PipelineRuns(LakeSettings(root=str(tmp_path / "lake")))
    runs.commit(run_id="a", stage="ingest", dataset="d", tables={"silver/d__transitions": 0})
    runs.commit(run_id="b", stage="ingest", dataset="d", tables={"silver/d__transitions": 1})
    assert runs.latest(stage="ingest", dataset="d").run_id == "b"
    first = sorted((tmp_path / "lake" / "gold" / "pipeline_runs").glob("*.parquet"))[0]
    first.unlink()
    with pytest.raises(CorruptTableError, match=r"gold/pipeline_runs .* is damaged: .* missing "
                                                r"\(" + first.name + r"\)\. Restore"):
        runs.latest(stage="ingest", dataset="d")

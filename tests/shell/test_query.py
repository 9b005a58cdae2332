"""The analysts' query path: DuckDB over the Delta tables the pipeline wrote, checked against Spark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gpope.cli import main
from gpope.config import load_config
from gpope.core.envs import mountaincar
from gpope.core.evaluation.settings import SettingsLayer
from gpope.core.spec import EvaluationSpec
from gpope.errors import ConfigError, QueryError
from gpope.shell import lake
from gpope.shell.evaluate.run import run_evaluate
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.query import describe, lake_views, query
from gpope.shell.schemas import COLUMN_COMMENTS, TABLE_SCHEMAS, TRANSITIONS

pytestmark = pytest.mark.spark

SPEC = {
    "name": "mc_query",
    "gamma": 0.9,
    "normalization": "transition",
    "length_scale": 30,
    "reward_scale": 0.1,
    "feature_map": {"kind": "fourier", "order": 1, "low": [-1.2, -0.07], "high": [0.6, 0.07]},
    "target_policy": {"kind": "uniform", "n_actions": 3},
    "reference_states": {"bottom": [-0.5, 0.0], "right": [0.3, 0.02]},
}


@pytest.fixture(scope="module")
def pipeline_lake(spark, tmp_path_factory):
    """Two datasets through stats, and two released runs of one of them (real Spark, real Delta)."""
    tmp = tmp_path_factory.mktemp("query")
    config = load_config(None, lake={"root": str(tmp / "lake")})
    behaviour = mountaincar.learned_policy("epsilon_greedy", epsilon=0.2)
    spec = EvaluationSpec.from_mapping(SPEC)
    for seed, name in ((1, "cohort_a"), (2, "cohort_b")):
        transitions = mountaincar.generate(12 + 3 * seed, np.random.default_rng(seed), behaviour,
                                           max_steps=30)
        df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
        lake.write_table(df, config.lake, "silver", name, "transitions", mode="overwrite")
        run_stats(spark, config, dataset=name, spec=spec)
    PrivacyLedger(spark, config).set_budget("cohort_a", epsilon=5.0, delta=1e-4)
    options = SettingsLayer.of(epsilon=1.0, delta=1e-5, iterations=200, step_size=0.2, seed=3,
                              allow_not_private=True,
                              public_trajectories=0)
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    for _ in range(2):
        run_evaluate(spark, config, dataset="cohort_a", spec=spec, options=options,
                     tracking_uri=uri)
    return config, spec


def test_every_contract_column_has_a_comment():
    for table, schema in TABLE_SCHEMAS.items():
        for f in schema.fields:
            assert f.metadata.get("comment"), f"{table}.{f.name} has no comment"
            assert f.metadata["comment"] == COLUMN_COMMENTS[table][f.name]


def test_views_follow_the_naming_rules(pipeline_lake):
    config, _ = pipeline_lake
    views = {v["view"]: v for v in lake_views(config, operator=True).views}
    assert views["cohort_a__transitions"]["layer"] == "silver"
    assert views["cohort_b__trajectory_stats"]["dataset"] == "cohort_b"
    assert views["released_estimates"]["dataset"] is None
    assert views["privacy_ledger"]["dataset"] is None


def test_counts_per_dataset_equal_spark(spark, pipeline_lake):
    config, _ = pipeline_lake
    got = query("SELECT dataset, count(*) AS n, sum(reward) AS r FROM transitions "
                "GROUP BY dataset ORDER BY dataset", lake=config, operator=True).to_pylist()
    for row in got:
        df = lake.read_table(spark, config.lake, "silver", row["dataset"], "transitions")
        expected = df.selectExpr("count(*) AS n", "sum(reward) AS r").collect()[0]
        assert row["n"] == expected["n"]
        assert row["r"] == pytest.approx(expected["r"], rel=1e-12)
    assert [r["dataset"] for r in got] == ["cohort_a", "cohort_b"]
    one = query("SELECT count(*) AS n FROM cohort_b__transitions", lake=config,
                operator=True).to_pylist()
    assert one == [{"n": got[1]["n"]}]


def test_statistics_arrays_and_partition_column_equal_spark(spark, pipeline_lake):
    config, spec = pipeline_lake
    got = query("SELECT spec_id, traj_index, tau, A, b FROM cohort_a__trajectory_stats "
                "ORDER BY traj_index", lake=config, operator=True).to_pandas()
    ref = (lake.read_table(spark, config.lake, "gold", "cohort_a", "trajectory_stats")
           .orderBy("traj_index").toPandas())
    assert list(got["spec_id"]) == [spec.spec_id] * len(ref)
    assert list(got["tau"]) == list(ref["tau"])
    np.testing.assert_array_equal(np.stack(got["A"]), np.stack(ref["A"]))
    np.testing.assert_array_equal(np.stack(got["b"]), np.stack(ref["b"]))


def test_released_estimates_equal_spark_and_times_are_utc(spark, pipeline_lake):
    config, _ = pipeline_lake
    got = query("SELECT run_id, created_at, theta, \"values\" FROM released_estimates "
                "ORDER BY created_at", lake=config).to_pylist()
    ref = {r["run_id"]: r for r in lake.read_shared_table(spark, config.lake,
                                                          "released_estimates").collect()}
    assert len(got) == 2 and {r["run_id"] for r in got} == set(ref)
    for row in got:
        assert row["theta"] == list(ref[row["run_id"]]["theta"])
        assert row["values"] == list(ref[row["run_id"]]["values"])
        # Spark's session is UTC (conftest) and returns naive UTC datetimes.
        assert row["created_at"].utcoffset().total_seconds() == 0
        assert row["created_at"].replace(tzinfo=None) == ref[row["run_id"]]["created_at"]


LATEST = """
SELECT dataset, spec_name, estimator, state, value, lower, upper, run_id
FROM released_values
QUALIFY row_number() OVER (PARTITION BY dataset, spec_id, estimator, state
                           ORDER BY created_at DESC, run_id) = 1
ORDER BY dataset, spec_name, state
"""


def test_latest_released_value_per_state_equals_pandas_on_spark(spark, pipeline_lake):
    config, spec = pipeline_lake
    got = query(LATEST, lake=config).to_pandas()
    ref = lake.read_shared_table(spark, config.lake, "released_values").toPandas()
    assert len(ref) == 2 * len(spec.reference_names)  # two runs x the spec's states
    ref = (ref.sort_values(["created_at", "run_id"], ascending=[False, True])
           .groupby(["dataset", "spec_id", "estimator", "state"], as_index=False).head(1)
           .sort_values(["dataset", "spec_name", "state"]).reset_index(drop=True))
    assert list(got["state"]) == sorted(spec.reference_names)
    assert list(got["run_id"]) == list(ref["run_id"]) and list(got["spec_name"]) == ["mc_query"] * 2
    np.testing.assert_array_equal(got["value"].to_numpy(), ref["value"].to_numpy())
    runs = query("SELECT DISTINCT run_id, created_at FROM released_values "
                 "WHERE spec_name = 'mc_query' ORDER BY created_at", lake=config).to_pylist()
    assert len(runs) == 2 and runs[0]["created_at"] <= runs[1]["created_at"]


def test_budget_status_view_is_the_ledgers_status(pipeline_lake):
    from gpope.shell.pipeline.ledger import PrivacyLedger

    config, _ = pipeline_lake
    rows = {r["dataset"]: r for r in query("SELECT * FROM budget_status", lake=config).to_pylist()}
    status = PrivacyLedger(None, config).status("cohort_a")  # the JVM-free ledger itself
    row = rows["cohort_a"]
    assert (row["budget_epsilon"], row["budget_delta"]) == (5.0, 1e-4)  # budget set
    assert row["remaining_epsilon"] == pytest.approx(status.remaining_epsilon, abs=1e-12)
    assert row["remaining_epsilon"] < 5.0 - 1.0  # two runs at epsilon 1 were spent
    naive = query("SELECT sum(epsilon) AS s FROM privacy_ledger WHERE dataset = 'cohort_a'",
                  lake=config).to_pylist()[0]["s"]
    assert naive != pytest.approx(5.0 - row["remaining_epsilon"])  # why the view exists


def test_latest_release_answers_value_interval_and_budget_in_one_query(pipeline_lake):
    """Issue 15's question in one view: released value + interval per state, and budget left."""
    config, spec = pipeline_lake
    got = query("SELECT * FROM latest_release ORDER BY dataset, spec_name, state",
                lake=config).to_pylist()
    want = query(LATEST, lake=config).to_pylist()  # the two views it joins, queried apart
    budget = query("SELECT * FROM budget_status WHERE dataset = 'cohort_a'",
                   lake=config).to_pylist()[0]
    assert [r["state"] for r in got] == sorted(spec.reference_names)
    for row, ref in zip(got, want, strict=True):
        assert {k: row[k] for k in ref} == ref
        assert row["lower"] is not None or row["upper"] is None
        assert row["estimand"].startswith("LSTD fixed point")  # a Fourier map: not exact
        assert "approximation error" in row["estimand"]
        for column in ("remaining_epsilon", "remaining_delta", "runs_left", "budget_epsilon"):
            assert row[column] == budget[column], column
    cols = {c["column"]: c["comment"] for c in describe("latest_release", lake=config)}
    assert cols["remaining_epsilon"] and cols["upper"] and "LATEST" in cols["value"]


def test_column_comments_reach_the_views(pipeline_lake):
    config, _ = pipeline_lake
    cols = {c["column"]: c for c in describe("released_estimates", lake=config)}
    assert cols["values"]["comment"] == COLUMN_COMMENTS["released_estimates"]["values"]
    stacked = {c["column"]: c for c in describe("trajectory_stats", lake=config, operator=True)}
    assert "stacks every dataset" in stacked["dataset"]["comment"]
    assert stacked["A"]["comment"] == COLUMN_COMMENTS["trajectory_stats"]["A"]


def test_unknown_view_and_bad_sql_are_clear_errors(pipeline_lake, tmp_path):
    config, _ = pipeline_lake
    with pytest.raises(QueryError, match=r"budget_status.*released_estimates"):
        query("SELECT * FROM released_estimatez", lake=config)
    with pytest.raises(QueryError, match="could not parse"):
        query("SELEC 1", lake=config)
    with pytest.raises(QueryError, match="empty"):
        query("  ", lake=config)
    with pytest.raises(ConfigError, match="does not exist"):
        query("SELECT 1", lake=tmp_path / "nowhere")


def test_cli_outputs_json_csv_and_exits_2_on_errors(pipeline_lake, capsys):
    config, _ = pipeline_lake
    root = config.lake.root
    sql = "SELECT dataset, count(*) AS n FROM trajectory_stats GROUP BY dataset ORDER BY dataset"
    assert main(["query", "--lake", root, "--json", "--operator", sql]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["dataset"] for r in doc["rows"]] == ["cohort_a", "cohort_b"]
    assert doc["columns"][1] == {"name": "n", "type": "int64"}
    assert main(["query", "--lake", root, "--csv", "--operator", sql]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dataset,n" and lines[1].startswith("cohort_a,")
    assert main(["query", "--lake", root, "--operator", sql]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0].split() == ["dataset", "n"]
    assert "2 rows" in captured.err and "operator mode" in captured.err
    assert main(["query", "--lake", root, sql]) == 2  # analysts: no per-patient table
    assert "--operator" in capsys.readouterr().err
    assert main(["query", "--lake", root, "SELECT * FROM nope"]) == 2
    assert "no" in capsys.readouterr().err.lower()


def test_query_command_starts_no_spark_and_no_jvm(pipeline_lake):
    config, _ = pipeline_lake
    code = (
        "import sys, subprocess\n"
        "from gpope.cli import main\n"
        f"rc = main(['query', '--lake', {config.lake.root!r}, '--json', '--operator', "
        "'SELECT count(*) AS n FROM transitions'])\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "import os\n"
        "def parent(pid):\n"
        "    try:\n"
        "        stat = open(f'/proc/{pid}/stat').read()\n"
        "    except OSError:\n"
        "        return None\n"
        "    return stat[stat.rindex(')') + 2:].split()[1]\n"
        "kids = [p for p in os.listdir('/proc') if p.isdigit() and parent(p) == str(os.getpid())]\n"
        "print('LOADED', loaded, 'CHILDREN', kids, 'RC', rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parent)
    assert out.returncode == 0, out.stderr
    assert "LOADED [] CHILDREN [] RC 0" in out.stdout


def test_loading_the_configuration_imports_no_accounting_or_spark():
    # `gpope query` and `gpope budget` load the configuration on every call: it must stay cheap.
    code = ("import sys; from gpope.config import load_config; from gpope.core.evaluation.settings import RunSettings; load_config(); "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('dp_accounting', 'numba', 'pyspark', 'mlflow')); print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    from gpope.core.tuning.private_settings import PrivateTuningSettings

    PrivateTuningSettings()  # the defaults are valid
    with pytest.raises(ConfigError):
        PrivateTuningSettings(quantile_share=0.9)  # a changed value is still validated


def test_half_written_pipeline_steps_never_show(spark, pipeline_lake):
    # Runs last in this module: it leaves torn (tagged, unmanifested) commits in the lake.
    from pyspark.sql import functions as F

    from gpope.shell.lake.manifest import read_pinned

    config, _ = pipeline_lake
    lk = lake.Lake.from_settings(spark, config.lake)
    sql = ("SELECT (SELECT count(*) FROM released_estimates) AS releases, "
           "(SELECT count(*) FROM cohort_b__transitions) AS transitions")
    before = query(sql, lake=config, operator=True).to_pylist()[0]
    releases = lake.TableRef.shared("released_estimates")
    torn = lk.read(releases).limit(1).withColumn("run_id", F.lit("torn" * 8))
    lk.write(torn, releases, mode="append", run_id="torn" * 8)  # a release killed pre-manifest
    transitions = lake.TableRef("silver", "transitions", "cohort_b")
    lk.write(lk.read(transitions).limit(3), transitions, mode="overwrite", run_id="half" * 8)
    assert lk.read(releases).count() == before["releases"] + 1  # the raw table has the row...
    assert query(sql, lake=config, operator=True).to_pylist()[0] == before  # ...readers do not see it
    for ref, n in ((releases, before["releases"]), (transitions, before["transitions"])):
        assert read_pinned(lk, ref)[0].count() == n  # the Spark readers agree


def test_latest_release_follows_commit_order_not_the_writers_clock(pipeline_lake):
    # A release committed last from a host whose clock is 2 h behind: its created_at is the
    # oldest, yet it is the latest release (commit order, the released_values version).
    from datetime import timedelta

    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import CommitProperties, DeltaTable, write_deltalake

    from gpope.shell.lake.base import encode_user_metadata
    from gpope.shell.lake.manifest import PipelineRuns

    config, _ = pipeline_lake
    before = query("SELECT * FROM latest_release WHERE dataset = 'cohort_a' ORDER BY state",
                   lake=config).to_pylist()
    path = lake.shared_table_location(config.lake, "released_values")
    table = DeltaTable(path)
    rows = query(f"SELECT * FROM released_values WHERE run_id = '{before[0]['run_id']}'",
                 lake=config).table
    run_id = "skewed" + "0" * 26
    skewed = (rows.set_column(rows.schema.get_field_index("run_id"), "run_id",
                              pa.array([run_id] * rows.num_rows))
              .set_column(rows.schema.get_field_index("value"), "value",
                          pc.add(rows.column("value"), 1.0))
              .set_column(rows.schema.get_field_index("created_at"), "created_at",
                          pc.subtract(rows.column("created_at"),
                                      pa.scalar(timedelta(hours=2), pa.duration("us")))))
    write_deltalake(path, skewed.select(table.schema().to_arrow().names).cast(
        pa.schema(table.schema().to_arrow())), mode="append",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": encode_user_metadata("append", None, run_id)}))
    PipelineRuns(config.lake).commit(run_id=run_id, stage="release", dataset="cohort_a",
                                     tables={"gold/released_values": DeltaTable(path).version()})
    after = query("SELECT * FROM latest_release WHERE dataset = 'cohort_a' ORDER BY state",
                  lake=config).to_pylist()
    assert {r["run_id"] for r in after} == {run_id}
    for old, new in zip(before, after, strict=True):
        assert new["value"] == pytest.approx(old["value"] + 1.0)
        assert new["created_at"] < old["created_at"] and new["release_version"] > old["release_version"]


def test_a_query_reads_every_table_at_one_instant(tmp_path):
    # A writer appends one row to a, b, c, d in turn, again and again; every answer must be a
    # state the lake was in: counts non-increasing from a to d and at most one apart.
    import itertools
    import threading

    import pyarrow as pa
    from deltalake import write_deltalake

    names = "abcd"
    paths = [tmp_path / "lake" / "silver" / "d" / x for x in names]
    for p in paths:
        write_deltalake(p, pa.table({"k": pa.array([0], pa.int64())}))
    stop = threading.Event()

    def writer() -> None:
        k = 1
        while not stop.is_set():
            for p in paths:
                write_deltalake(p, pa.table({"k": pa.array([k], pa.int64())}), mode="append")
            k += 1

    thread = threading.Thread(target=writer)
    thread.start()
    sql = "SELECT " + ", ".join(f"(SELECT count(*) FROM d__{x}) AS {x}" for x in names)
    try:
        answers = [list(query(sql, lake=tmp_path / "lake", operator=True).to_pylist()[0].values())
                   for _ in range(15)]
    finally:
        stop.set()
        thread.join()
    mixed = [a for a in answers
             if not (all(x >= y for x, y in itertools.pairwise(a)) and a[0] - a[-1] <= 1)]
    assert not mixed and answers[-1][0] > answers[0][0]


def test_a_lake_released_before_the_estimand_column_keeps_working(spark, tmp_path):
    # released_values written with the contract as it was before the estimand column, through
    # the lake layer; a release then appends through the release writer (schema evolution on
    # append): every reader sees both, the old row's estimand null, the new rows' filled.
    from datetime import datetime

    from pyspark.sql.types import StructType

    from gpope.core.intervals import Interval
    from gpope.core.policy_value_release import PolicyValueInterval
    from gpope.shell.evaluate.policy_value import policy_value_rows
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import read_pinned
    from gpope.shell.pipeline.release import release_row, value_rows, write_release

    config = load_config(None, lake={"root": str(tmp_path / "lake")})
    contract = TABLE_SCHEMAS["released_values"]
    old = StructType([f for f in contract.fields if f.name != "estimand"])
    created = datetime(2026, 1, 1)
    old_row = ("old_run", "cohort_a", "old_spec", "old", "gpope", "s0", 0.5, 0.1, 0.9, 0.2,
               0.95, 1.0, 1e-5, "pld", True, created)
    lake.write_shared_table(spark.createDataFrame([old_row], schema=old), config.lake,
                            "released_values", mode="append", schema=old)
    assert query("SELECT estimand FROM latest_release", lake=config).to_pylist() == [
        {"estimand": None}]  # a table that never had the column reads it null
    spec = EvaluationSpec.from_mapping({
        "name": "tab", "gamma": 0.9, "length_scale": 10, "feature_map": {"kind": "tabular", "n_states": 3},
        "target_policy": {"kind": "uniform", "n_actions": 2},
        "reference_states": {"s0": [0], "s2": [2]}})
    row = release_row(run_id="new_run", dataset="cohort_a", spec=spec, policy="uniform",
                      epsilon=1.0, delta=1e-5, accountant="pld", created_at=created,
                      theta=np.zeros(3), values=np.array([0.25, 0.75]), private=True)
    scalars = {"policy_value": PolicyValueInterval(0.3, 0.1, 0.5, 0.1, 0.95),
               "behaviour_value": PolicyValueInterval(0.2, 0.1, 0.3, 0.1, 0.95),
               "policy_contrast": PolicyValueInterval(0.1, -0.1, 0.3, -0.1, 0.95,
                                                      estimand="picked by the run")}
    ends = np.array([0.25, 0.75])
    interval = Interval(value=ends, lower=ends - 0.1, upper=ends + 0.1, lower_bound=ends - 0.1,
                        se=np.full(2, 0.05), level=0.95, df=100)
    write_release(spark, config, row, value_rows(row, spec=spec, interval=interval)
                  + policy_value_rows(row, spec_name="tab", released=scalars))
    got = {(r["spec_name"], r["state"]): r["estimand"] for r in query(
        "SELECT spec_name, state, estimand FROM latest_release", lake=config).to_pylist()}
    assert got[("old", "s0")] is None
    for state in ("s0", "s2"):
        assert got[("tab", state)].startswith("tabular fixed point")
    assert "identified set" in got[("tab", "policy_value")]
    assert got[("tab", "behaviour_value")].startswith("mean recorded discounted return")
    assert got[("tab", "policy_contrast")] == "picked by the run"
    assert len(got) == 6
    cols = {c["column"]: c["comment"] for c in describe("released_values", lake=config)}
    assert cols["estimand"] == COLUMN_COMMENTS["released_values"]["estimand"]
    assert "approximation error" in cols["estimand"] and "mean recorded" in cols["estimand"]
    spark_rows = {r["run_id"]: r["estimand"] for r in read_pinned(
        Lake.from_settings(spark, config.lake), TableRef.shared("released_values"))[0].collect()}
    # Spark reads both too
    assert spark_rows["old_run"] is None and spark_rows["new_run"] is not None
    contrasts = query("SELECT run_a, estimand_a, estimand_b FROM release_contrasts "
                      "WHERE state = 's0'", lake=config).to_pylist()
    assert {r["run_a"]: (r["estimand_a"], r["estimand_b"]) for r in contrasts} == {
        "new_run": (got[("tab", "s0")], None), "old_run": (None, got[("tab", "s0")])}

"""The Delta table layer: real Spark, real Delta tables (delta-rs path) in temp dirs, no mocks.

delta-rs's own reader (``deltalake.DeltaTable(...).to_pyarrow_table()``) is the independent oracle
for what the layer committed.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake
from pyspark.sql.types import (
    ArrayType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gpope.config import LakeSettings
from gpope.errors import CommitError, ConfigError, DataError, SchemaError, TableNotFoundError
from gpope.shell.lake import (
    Lake,
    TableRef,
    read_shared_table,
    shared_table_location,
    table_location,
    table_path,
    uc_table_name,
    write_shared_table,
)
from gpope.shell.lake.delta_rs import local_file_path
from gpope.shell.schemas import PRIVACY_LEDGER

pytestmark = pytest.mark.spark

EVENTS = StructType(
    [
        StructField("patient_id", StringType(), False),
        StructField("time", TimestampType(), True),
        StructField("n", LongType(), False),
        StructField("values", ArrayType(DoubleType(), False), False),
    ]
)
STATS = StructType(
    [
        StructField("spec_id", StringType(), False),
        StructField("traj_index", LongType(), False),
        StructField("v", DoubleType(), True),
    ]
)
T0 = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def _df(spark, rows, schema: StructType):
    """An Arrow-backed DataFrame (a local relation: no Python worker, so writes stay fast)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema)
    table = pa.Table.from_pylist(
        [dict(zip(schema.names, r, strict=True)) for r in rows], arrow_schema
    )
    return spark.createDataFrame(table, schema)


def _events(spark, rows):
    return _df(spark, rows, EVENTS)


def _nullable(schema: StructType) -> StructType:
    return StructType.fromJson(
        json.loads(
            schema.json()
            .replace('"nullable":false', '"nullable":true')
            .replace('"containsNull":false', '"containsNull":true')
        )
    )


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def _live_files(path: str) -> set[str]:
    return {str(Path(local_file_path(p)).resolve()) for p in DeltaTable(path).file_uris()}


def _parquet_on_disk(path: str) -> set[str]:
    return {str(p.resolve()) for p in Path(path).rglob("*.parquet")}


@pytest.fixture
def lake(spark, lake_root) -> Lake:
    return Lake(spark, lake_root, mode="delta-rs")


@pytest.fixture
def ref() -> TableRef:
    return TableRef("bronze", "events", "demo")


# ---------------------------------------------------------------------- names (pure)
def test_path_layout_and_unity_catalog_mapping(tmp_path):
    per_dataset = TableRef("silver", "transitions", "hiv_demo")
    shared = TableRef.shared("privacy_ledger")
    assert table_path(tmp_path, per_dataset) == str(
        tmp_path / "silver" / "hiv_demo" / "transitions"
    )
    assert table_path(tmp_path, shared) == str(tmp_path / "gold" / "privacy_ledger")
    assert table_path("dbfs:/lake/", per_dataset) == "dbfs:/lake/silver/hiv_demo/transitions"
    assert table_path(f"file://{tmp_path}", shared) == str(tmp_path / "gold" / "privacy_ledger")
    assert uc_table_name("main", "gpope", per_dataset) == "main.gpope.hiv_demo__transitions"
    assert uc_table_name("main", "gpope", shared) == "main.gpope.privacy_ledger"
    assert uc_table_name("main", "gpope", shared, quoted=True) == "`main`.`gpope`.`privacy_ledger`"
    uc = LakeSettings(catalog="main", schema="gpope")
    assert table_location(uc, "gold", "hiv_demo", "trajectory_stats") == (
        "main.gpope.hiv_demo__trajectory_stats"
    )
    assert shared_table_location(uc, "released_estimates") == "main.gpope.released_estimates"
    assert table_location(LakeSettings(root=str(tmp_path)), "bronze", "d", "outcomes") == str(
        tmp_path / "bronze" / "d" / "outcomes"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("platinum", "t", "d"), "layer"),
        (("silver", "t", None), "needs a dataset"),
        (("gold", "privacy_ledger", "d"), "shared"),
        (("silver", "t", "../x"), "dataset"),
        (("silver", "a-b", "d"), "table"),
        (("silver", "t", "abc\n"), "dataset"),  # '$' matched before a trailing newline
        (("silver", "t", "a" * 129), "1 to 128 characters"),
        (("silver", "t", ""), "dataset"),
    ],
)
def test_table_ref_rejects_bad_names(args, needle):
    with pytest.raises(ConfigError, match=needle):
        TableRef(*args)


def test_lake_mode_detection_and_configuration_errors(spark, lake_root):
    assert Lake(spark, lake_root).storage == "delta-rs"  # no Delta JARs on this machine
    native_uc = Lake(spark, catalog="main", schema="gpope", mode="native")
    assert native_uc.location(TableRef("silver", "transitions", "d")) == "main.gpope.d__transitions"
    with pytest.raises(ConfigError, match="Unity Catalog"):
        Lake(spark, catalog="main", schema="gpope", mode="delta-rs")
    with pytest.raises(ConfigError, match="local lake roots"):
        Lake(spark, "s3://bucket/lake", mode="delta-rs")
    with pytest.raises(ConfigError, match="lake storage must be one of"):
        Lake(spark, lake_root, mode="fast")  # type: ignore[arg-type]


# ---------------------------------------------------------------------- reads and writes
def test_write_append_overwrite_time_travel_and_history(spark, lake, ref):
    first = [("p1", T0, 1, [1.0, 2.0]), ("p2", None, 2, [])]
    assert lake.write(_events(spark, first), ref, mode="overwrite", schema=EVENTS) == 0
    assert _rows(lake.read(ref)) == _rows(_events(spark, first))
    assert lake.read(ref).schema.names == EVENTS.names

    assert (
        lake.write(_events(spark, [("p3", T0, 3, [3.0])]), ref, mode="append", schema=EVENTS) == 1
    )
    assert [r[0] for r in _rows(lake.read(ref))] == ["p1", "p2", "p3"]

    assert (
        lake.write(_events(spark, [("p9", T0, 9, [9.0])]), ref, mode="overwrite", schema=EVENTS)
        == 2
    )
    assert [r[0] for r in _rows(lake.read(ref))] == ["p9"]
    assert _rows(lake.read(ref, version=0)) == _rows(_events(spark, first))
    assert lake.version(ref) == 2 and lake.exists(ref)

    history = lake.history(ref)
    assert [h.version for h in history] == [0, 1, 2]
    assert [h.mode for h in history] == ["overwrite", "append", "overwrite"]
    assert history[0].operation == "CREATE TABLE" and history[1].operation == "WRITE"
    assert all(h.timestamp.tzinfo is not None for h in history)

    # the independent reader sees exactly the same rows and types
    arrow = DeltaTable(lake.location(ref)).to_pyarrow_table()
    assert arrow.column("patient_id").to_pylist() == ["p9"]
    assert arrow.column("time").to_pylist()[0] == T0
    assert arrow.column("values").to_pylist() == [[9.0]]
    assert lake.read_arrow(ref, version=1).num_rows == 3
    assert lake.read_arrow(ref).to_pandas()["n"].tolist() == [9]
    with pytest.raises(ConfigError, match=r"versions 0\.\.2"):
        lake.read(ref, version=7)


def test_replace_where_replaces_only_its_partition_and_is_idempotent(spark, lake_root):
    lake = Lake(spark, lake_root, mode="delta-rs")
    ref = TableRef("gold", "stats", "demo")
    odd = "a b:c/%d"  # characters that need escaping in Hive folder names
    base = _df(spark, [("s1", 0, 1.0), ("s1", 1, 2.0), (odd, 0, 5.0)], STATS)
    lake.write(base, ref, mode="overwrite", schema=STATS, partition_by=["spec_id"])
    new_s1 = _df(spark, [("s1", 0, 10.0), ("s1", 1, 20.0), ("s1", 2, 30.0)], STATS)
    for _ in range(2):  # a re-run replaces, never duplicates
        lake.write(new_s1, ref, mode="replace_where", schema=STATS, replace_where={"spec_id": "s1"})
    expected = [(odd, 0, 5.0), ("s1", 0, 10.0), ("s1", 1, 20.0), ("s1", 2, 30.0)]
    assert _rows(lake.read(ref)) == expected
    independent = DeltaTable(lake.location(ref)).to_pyarrow_table().to_pylist()
    assert sorted((r["spec_id"], r["traj_index"], r["v"]) for r in independent) == expected
    assert [h.mode for h in lake.history(ref)] == ["overwrite", "replace_where", "replace_where"]

    # rows outside the partition: refused, nothing committed, no new files left behind
    before_files, before_version = _parquet_on_disk(lake.location(ref)), lake.version(ref)
    with pytest.raises(DataError, match="only contain rows of the partition"):
        lake.write(base, ref, mode="replace_where", schema=STATS, replace_where={"spec_id": "s1"})
    assert lake.version(ref) == before_version
    assert _parquet_on_disk(lake.location(ref)) == before_files
    with pytest.raises(ConfigError, match="partition columns"):
        lake.write(new_s1, ref, mode="replace_where", schema=STATS, replace_where={"v": 1.0})
    with pytest.raises(ConfigError, match="required with mode='replace_where'"):
        lake.write(new_s1, ref, mode="replace_where", schema=STATS)


def test_overwrite_after_a_concurrent_append_keeps_only_the_new_rows(spark, lake, ref):
    lake.write(_events(spark, [("p1", T0, 1, [1.0])]), ref, mode="overwrite", schema=EVENTS)
    cached = lake.read(ref)  # everything the layer could have cached about version 0
    assert cached.count() == 1
    other = pa.table(
        {"patient_id": ["intruder"], "time": [T0], "n": [7], "values": [[7.0]]},
        schema=pa.schema(
            [
                pa.field("patient_id", pa.string(), nullable=False),
                pa.field("time", pa.timestamp("us", tz="UTC")),
                pa.field("n", pa.int64(), nullable=False),
                pa.field(
                    "values",
                    pa.list_(pa.field("element", pa.float64(), nullable=False)),
                    nullable=False,
                ),
            ]
        ),
    )
    write_deltalake(lake.location(ref), other, mode="append")  # another writer, meanwhile
    assert (
        lake.write(_events(spark, [("p2", T0, 2, [2.0])]), ref, mode="overwrite", schema=EVENTS)
        == 2
    )
    assert [r[0] for r in _rows(lake.read(ref))] == ["p2"]
    assert DeltaTable(lake.location(ref)).to_pyarrow_table().column("patient_id").to_pylist() == ["p2"]


def test_empty_table_reads_as_empty_dataframe_with_schema(spark, lake, ref):
    lake.write(_events(spark, []), ref, mode="overwrite", schema=EVENTS)
    empty = lake.read(ref)
    assert empty.count() == 0
    assert [(f.name, f.dataType) for f in empty.schema] == [(f.name, f.dataType) for f in EVENTS]
    assert DeltaTable(lake.location(ref)).to_pyarrow_table().num_rows == 0


def test_safe_widening_is_cast_and_short_forms_use_the_contracts(spark, lake_root):
    settings = LakeSettings(root=str(lake_root), storage="delta-rs")
    row = ("d", "run1", "gaussian", 1.0, 1e-6, "rdp", "released", T0)
    # The ledger's later, nullable columns (kind, charged_*, ...) stay NULL on this row.
    row = row + (None,) * (len(PRIVACY_LEDGER.names) - len(row))
    df = _df(spark, [row], PRIVACY_LEDGER)
    assert write_shared_table(df, settings, "privacy_ledger", mode="append") == 0
    assert write_shared_table(df, settings, "privacy_ledger", mode="append") == 1
    assert read_shared_table(spark, settings, "privacy_ledger").count() == 2
    assert (lake_root / "gold" / "privacy_ledger" / "_delta_log").is_dir()

    lake = Lake.from_settings(spark, settings)
    ints = _df(
        spark,
        [("s", 1, 2)],
        StructType(
            [
                StructField("spec_id", StringType()),
                StructField("traj_index", IntegerType()),
                StructField("v", IntegerType()),
            ]
        ),
    )
    lake.write(ints, TableRef("gold", "widened", "d"), mode="overwrite", schema=STATS)
    read = lake.read(TableRef("gold", "widened", "d"))
    assert read.schema["traj_index"].dataType == LongType()
    assert _rows(read) == [("s", 1, 2.0)]


# ---------------------------------------------------------------------- failures
def test_schema_mismatches_raise_schema_error_and_commit_nothing(spark, lake, ref):
    good = _events(spark, [("p1", T0, 1, [1.0])])
    lake.write(good, ref, mode="overwrite", schema=EVENTS)
    files = _parquet_on_disk(lake.location(ref))
    with pytest.raises(SchemaError, match=r"missing \['n'\], unexpected \['extra'\]"):
        lake.write(good.withColumnRenamed("n", "extra"), ref, mode="append", schema=EVENTS)
    with pytest.raises(SchemaError, match="n: got double, expected bigint"):
        lake.write(
            good.withColumn("n", good["n"].cast("double")), ref, mode="append", schema=EVENTS
        )
    other_contract = StructType([*EVENTS.fields, StructField("x", IntegerType(), True)])
    with pytest.raises(SchemaError, match="contract is"):
        lake.write(
            good.withColumn("x", good["n"].cast("int")), ref, mode="append", schema=other_contract
        )
    nullable = _df(spark, [(None, T0, 1, [1.0])], _nullable(EVENTS))
    with pytest.raises(SchemaError, match=r"'patient_id' .* NOT NULL"):
        lake.write(nullable, ref, mode="append", schema=EVENTS)
    null_element = _df(spark, [("p", T0, 1, [None])], _nullable(EVENTS))
    with pytest.raises(SchemaError, match="'values'"):
        lake.write(null_element, ref, mode="append", schema=EVENTS)
    assert lake.version(ref) == 0
    assert _parquet_on_disk(lake.location(ref)) == files == _live_files(lake.location(ref))


def test_missing_table_names_location_and_creating_stage(lake):
    ref = TableRef("silver", "transitions", "hiv_demo")
    assert not lake.exists(ref)
    with pytest.raises(
        TableNotFoundError, match=r"silver/hiv_demo/transitions.*gpope ingest --dataset hiv_demo"
    ):
        lake.read(ref)
    with pytest.raises(TableNotFoundError, match="run the simulator"):
        lake.history(TableRef("bronze", "outcomes", "x"), hint="run the simulator")
    with pytest.raises(TableNotFoundError):
        lake.version(ref)


def test_a_missing_data_file_is_one_error_naming_the_table_and_its_repair(lake, lake_root):
    # a Parquet file the log lists is gone (deleted by hand, a partial copy): reads fail with
    # the table, the version and the command that writes it again, not Spark's PATH_NOT_FOUND
    from gpope.errors import CorruptTableError

    ref = TableRef("silver", "transitions", "w")
    path = Path(lake.location(ref))
    write_deltalake(str(path), pa.table({"x": [1]}))
    write_deltalake(str(path), pa.table({"x": [2]}), mode="append")
    assert lake.read(ref).count() == 2
    gone = sorted(path.glob("*.parquet"))[0]
    gone.unlink()
    for read in (lambda: lake.read(ref), lambda: lake.data_files(ref, version=1)):
        with pytest.raises(CorruptTableError) as err:
            read()
        text = str(err.value)
        assert f"Delta table silver/w/transitions at {path} is damaged" in text, text
        assert gone.name in text and "Re-run `gpope ingest --dataset w`" in text, text
    assert "version 1 lists" in text
    released = TableRef.shared("released_values")
    write_deltalake(lake.location(released), pa.table({"x": [1]}))
    next(Path(lake.location(released)).glob("*.parquet")).unlink()
    with pytest.raises(CorruptTableError, match="Restore the table's missing files from a backup"):
        lake.read(released)


def test_failed_commit_deletes_its_files_and_leaves_the_table_unchanged(spark, lake, ref):
    # a real commit failure: an append-only table refuses the removes of an overwrite
    path = lake.location(ref)
    write_deltalake(
        path,
        pa.table(
            {"spec_id": ["s"], "traj_index": [0], "v": [1.0]},
            schema=pa.schema(
                [
                    pa.field("spec_id", pa.string(), nullable=False),
                    pa.field("traj_index", pa.int64(), nullable=False),
                    pa.field("v", pa.float64()),
                ]
            ),
        ),
        configuration={"delta.appendOnly": "true"},
    )
    live = _live_files(path)
    df = _df(spark, [("t", 5, 2.0)], STATS)
    with pytest.raises(CommitError, match="append-only"):
        lake.write(df, ref, mode="overwrite", schema=STATS)
    assert DeltaTable(path).version() == 0
    assert _live_files(path) == live == _parquet_on_disk(path)
    assert lake.write(df, ref, mode="append", schema=STATS) == 1  # appends are still fine
    assert _rows(lake.read(ref)) == [("s", 0, 1.0), ("t", 5, 2.0)]


def test_delta_rs_refuses_a_commit_based_on_a_stale_snapshot(tmp_path):
    """Pins the delta-rs behaviour the writer's retry loop relies on (no Spark needed)."""
    from deltalake.exceptions import CommitFailedError

    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"x": [1]}))
    stale = DeltaTable(path)
    write_deltalake(path, pa.table({"x": [2]}), mode="append")
    with pytest.raises(CommitFailedError):
        stale.create_write_transaction(
            [],
            mode="append",
            schema=stale.schema(),
            commit_properties=CommitProperties(max_commit_retries=0),
        )
    assert DeltaTable(path).version() == 1


# ---------------------------------------------------------------------- hostile paths (issue 13.1)
@pytest.mark.parametrize("folder", ["ward é #7 q?r {x} 'y\""])
def test_hostile_lake_paths_keep_every_row(spark, tmp_path, folder):
    """A space, an accent, '#', '?', braces and quotes, together, in the lake path lose no row
    (issue 13.1; each character alone and in generated combinations: tests/shell/test_hostile_paths.py)."""
    root = tmp_path / folder / "lake"
    lake = Lake(spark, root, mode="delta-rs")
    ref = TableRef("gold", "trajectory_stats", "demo")
    rows = [("s1", i, float(i)) for i in range(7)] + [("s2", i, -1.0) for i in range(3)]
    assert lake.write(_df(spark, rows, STATS), ref, mode="overwrite", schema=STATS,
                      partition_by=["spec_id"]) == 0
    path = lake.location(ref)
    assert path.startswith(str(root))
    # every Parquet file is inside the table, none in a percent-encoded sibling
    assert not any("%" in str(p) for p in tmp_path.rglob("*.parquet"))
    assert _live_files(path) == _parquet_on_disk(path)
    assert DeltaTable(path).to_pyarrow_table().num_rows == 10
    assert _rows(lake.read(ref)) == sorted(rows)
    lake.write(_df(spark, rows[:2], STATS), ref, mode="replace_where", schema=STATS,
               replace_where={"spec_id": "s1"})
    assert _rows(lake.read(ref)) == sorted(rows[:2] + rows[7:])


@pytest.mark.parametrize("folder", ["a[1]", "x%20y", "back\\slash", "pipe|x"])
def test_lake_paths_delta_rs_cannot_address_are_refused_up_front(spark, tmp_path, folder):
    with pytest.raises(ConfigError, match="cannot address"):
        Lake(spark, tmp_path / folder / "lake", mode="delta-rs")
    assert not (tmp_path / folder).exists()


def test_a_commit_whose_staged_files_differ_from_what_spark_wrote_fails(spark, lake, ref, monkeypatch):
    """Files that Spark wrote elsewhere (the old percent-encoding bug) are never an empty commit."""
    from gpope.shell.lake import delta_rs

    def elsewhere(self, df, staging, partitions, table_name):  # Spark writes to another folder
        df.write.parquet(str(staging.parent / "elsewhere"))
        staging.mkdir(parents=True)
        (staging / "_SUCCESS").touch()
        return df.count()

    monkeypatch.setattr(delta_rs.DeltaRsStore, "_write_parquet", elsewhere)
    with pytest.raises(CommitError, match="reported writing 2 rows"):
        lake.write(_events(spark, [("a", T0, 1, [1.0]), ("b", T0, 2, [2.0])]), ref, mode="append",
                   schema=EVENTS)
    assert not lake.exists(ref)


def test_an_error_raised_in_a_spark_worker_reaches_the_user_with_its_message(spark, lake, ref):
    """Issue 13.3: the real message of a worker's error, not "exception in the Python worker"."""
    from gpope.errors import DataError as Data

    def kernel(table):
        raise Data("trajectory 7 has a non-finite reward sum (inf)")

    df = _df(spark, [("s", 0, 1.0)], STATS).groupBy("traj_index").applyInArrow(kernel, STATS)
    with pytest.raises(Data, match=r"trajectory 7 has a non-finite reward sum \(inf\)"):
        lake.write(df, ref, mode="append", schema=STATS)
    failing = _df(spark, [("s", 0, 1.0)], STATS).groupBy("traj_index").applyInArrow(
        lambda t: (_ for _ in ()).throw(ZeroDivisionError("division by zero in the kernel")), STATS
    )
    with pytest.raises(CommitError, match="ZeroDivisionError: division by zero in the kernel"):
        lake.write(failing, ref, mode="append", schema=STATS)
    assert not lake.exists(ref)


def test_a_lake_that_is_a_file_or_read_only_is_a_clear_config_error(spark, tmp_path):
    """Issue 13.6: causes, not tracebacks."""
    import os

    file = tmp_path / "lakefile"
    file.write_text("not a lake")
    with pytest.raises(ConfigError, match="is a file"):
        Lake(spark, file / "lake", mode="delta-rs")
    if os.geteuid() == 0:  # root ignores permissions: nothing to check
        return
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    lake = Lake(spark, locked / "lake", mode="delta-rs")
    with pytest.raises(ConfigError, match="writable directory"):
        lake.write(_df(spark, [("s", 0, 1.0)], STATS), TableRef("gold", "t", "d"), mode="append",
                   schema=STATS)


def test_arrow_writer_commits_all_parts_at_once_and_refuses_a_bad_part(spark, lake, ref):
    path = lake.location(ref)
    writer = lake.arrow_writer(ref, mode="overwrite", schema=EVENTS)
    writer.write(pa.table({"patient_id": ["a", "b"], "time": [T0, None], "n": [1, 2],
                           "values": [[1.0], [2.0, 3.0]]}))  # fmt: skip
    # a naive timestamp is UTC wall-clock time; int32 widens to int64
    writer.write(pa.table({"patient_id": ["c"], "time": [T0.replace(tzinfo=None)],
                           "n": pa.array([3], pa.int32()), "values": [[]]}))  # fmt: skip
    assert not lake.exists(ref)  # staged only
    assert writer.commit() == 0 and writer.rows == 3
    got = _rows(lake.read(ref))
    assert got == [("a", T0.replace(tzinfo=None), 1, [1.0]), ("b", None, 2, [2.0, 3.0]),
                   ("c", T0.replace(tzinfo=None), 3, [])]  # fmt: skip
    assert DeltaTable(path).to_pyarrow_table().num_rows == 3  # a second engine agrees
    files = _parquet_on_disk(path)
    assert _live_files(path) == files and [h.operation for h in lake.history(ref)] == [
        "CREATE TABLE"
    ]

    # a NOT NULL column with a null, a lossy type: SchemaError, nothing committed, nothing left
    for bad, match in (
        ({"patient_id": [None], "time": [T0], "n": [1], "values": [[1.0]]}, "NOT NULL"),
        ({"patient_id": ["d"], "time": [T0], "n": [1.5], "values": [[1.0]]}, "without loss"),
        ({"time": [T0], "patient_id": ["d"], "n": [1], "values": [[1.0]]}, "same order"),
    ):
        with pytest.raises(SchemaError, match=match), lake.arrow_writer(
            ref, mode="overwrite", schema=EVENTS
        ) as w:
            w.write(pa.table(bad))
    assert lake.version(ref) == 0 and _parquet_on_disk(path) == files
    assert not (Path(path) / "_gpope_staging").exists()
    with pytest.raises(ConfigError, match="unpartitioned"):
        lake.arrow_writer(TableRef("gold", "stats", "demo"), mode="replace_where", schema=STATS)


def test_worker_staging_commits_only_reported_files_in_hive_folders_with_statistics(
    spark, lake
):
    """Files written by (Python) workers: only the files the tasks reported are committed, in
    Hive-style folders with min/max statistics; a leftover of a failed attempt is dropped; files
    holding other row counts than reported, or rows of another partition, commit nothing."""
    from gpope.shell.lake.delta_rs import StagedFileWriter

    ref = TableRef("gold", "stats", "demo")
    path = lake.location(ref)

    def task(staging, spec_id, rows):
        writer = StagedFileWriter(staging.folder, {"spec_id": spec_id}, staging.arrow_schema,
                                  staging.table_name)  # fmt: skip
        for lo in range(0, len(rows), 2):  # several small batches, one row group
            writer.write(pa.table({"traj_index": [r[0] for r in rows[lo:lo + 2]],
                                   "v": [r[1] for r in rows[lo:lo + 2]]}))  # fmt: skip
        return writer.close()

    with lake.worker_staging(ref, mode="overwrite", schema=STATS, partition_by=["spec_id"]) as st:
        reports = [task(st, "s1", [(i, float(i)) for i in range(5)]),
                   task(st, "s2", [(7, -1.0)])]  # fmt: skip
        task(st, "s1", [(99, 99.0)])  # a failed attempt's file: written, never reported
        assert StagedFileWriter(st.folder, {"spec_id": "s1"}, st.arrow_schema, "t").close() == (
            None, 0)  # no rows: no file
        assert reports[0][1] == 5 and reports[0][0].startswith("spec_id=s1/")
        assert st.commit(reports) == 0
    got = DeltaTable(path).to_pyarrow_table().to_pylist()  # a second engine
    assert sorted((r["spec_id"], r["traj_index"], r["v"]) for r in got) == (
        [("s1", i, float(i)) for i in range(5)] + [("s2", 7, -1.0)])
    assert _live_files(path) == _parquet_on_disk(path)  # the unreported file is gone
    assert {Path(p).parent.name for p in _live_files(path)} == {"spec_id=s1", "spec_id=s2"}
    adds = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    assert sorted((a["min.traj_index"], a["max.traj_index"]) for a in adds) == [(0, 4), (7, 7)]
    assert not (Path(path) / "_gpope_staging").exists()

    files = _parquet_on_disk(path)
    with pytest.raises(CommitError, match="reported writing 3 rows"), lake.worker_staging(
        ref, mode="replace_where", schema=STATS, replace_where={"spec_id": "s1"}
    ) as st:
        name, rows = task(st, "s1", [(0, 0.5), (1, 1.5)])
        st.commit([(name, rows + 1)])
    with pytest.raises(DataError, match="replace_where"), lake.worker_staging(
        ref, mode="replace_where", schema=STATS, replace_where={"spec_id": "s1"}
    ) as st:
        st.commit([task(st, "s2", [(0, 0.5)])])
    with pytest.raises(CommitError, match="not staged"), lake.worker_staging(
        ref, mode="overwrite", schema=STATS
    ) as st:
        st.commit([("spec_id=s1/part-missing.parquet", 1)])
    assert lake.version(ref) == 0 and _parquet_on_disk(path) == files
    assert not (Path(path) / "_gpope_staging").exists()

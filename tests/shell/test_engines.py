"""Every engine reads the lake's Delta tables right (issue 13, "Delta tables that every engine
reads right"): DuckDB over deltalake's Arrow dataset is the second engine, compared with what
Spark wrote; Hive partition folders, min/max statistics, operation names, and `gpope maintain`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from gpope.config import GpopeConfig, LakeSettings
from gpope.shell.lake import Lake, TableRef
from gpope.shell.lake.maintain import maintain_lake

pytestmark = pytest.mark.spark


def _canonical(rows: list[dict]) -> list[str]:
    def value(v):
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else str(v)
        if isinstance(v, dt.datetime):  # Spark: naive local time; Arrow: aware UTC
            return v.astimezone(dt.UTC).replace(tzinfo=None).isoformat()
        if isinstance(v, list | tuple):
            return [value(x) for x in v]
        return v

    return sorted(json.dumps({k: value(v) for k, v in r.items()}, sort_keys=True) for r in rows)


def _duckdb_rows(path: str, where: str = "") -> list[dict]:
    dataset = DeltaTable(path).to_pyarrow_dataset()  # noqa: F841 - DuckDB scans it by name
    con = duckdb.connect()
    return con.sql(f"SELECT * FROM dataset {where}").to_arrow_table().to_pylist()


@pytest.fixture(scope="module")
def pipeline_lake(spark, tmp_path_factory):
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.jobargs import load_spec
    from gpope.shell.pipeline.simulate import SimulateOptions, run_simulate
    from gpope.shell.pipeline.stats import run_stats

    root = tmp_path_factory.mktemp("engines") / "lake"
    config = GpopeConfig(lake=LakeSettings(root=str(root)))
    run_simulate(spark, config, "e", domain="chain", patients=4, seed=3,
                 options=SimulateOptions(n_steps=5))
    run_ingest(spark, config, "e", domain="chain")
    run_stats(spark, config, dataset="e", spec=load_spec("conf/specs/chain.yaml"))
    return config, Lake.from_settings(spark, config.lake)


def _all_tables(lake: Lake) -> list[TableRef]:
    refs = [TableRef("bronze", t, "e") for t in ("observations", "treatments", "outcomes")]
    refs += [TableRef("silver", t, "e") for t in ("transitions", "rejected_events")]
    refs += [TableRef("gold", "trajectory_stats", "e"), TableRef.shared("pipeline_runs")]
    return [r for r in refs if lake.exists(r)]


def test_duckdb_reads_every_table_as_spark_wrote_it(pipeline_lake):
    _, lake = pipeline_lake
    refs = _all_tables(lake)
    assert len(refs) == 7
    for ref in refs:
        spark_rows = [r.asDict(recursive=True) for r in lake.read(ref).collect()]
        duck_rows = _duckdb_rows(lake.location(ref))
        if ref.table == "pipeline_runs":  # a map: Spark gives a dict, Arrow a list of pairs
            for r in duck_rows:
                r["tables"] = dict(r["tables"])
        assert _canonical(duck_rows) == _canonical(spark_rows), str(ref)


def test_partition_column_is_read_from_hive_folders_and_filters_work(pipeline_lake):
    _, lake = pipeline_lake
    path = lake.location(TableRef("gold", "trajectory_stats", "e"))
    spec_ids = {r["spec_id"] for r in _duckdb_rows(path)}
    assert len(spec_ids) == 1 and None not in spec_ids
    (spec_id,) = spec_ids
    folders = {p.parent.name for p in Path(path).rglob("*.parquet")}
    assert folders == {f"spec_id={spec_id}"}  # Hive-style: engines that read paths see it too
    assert len(_duckdb_rows(path, f"WHERE spec_id = '{spec_id}'")) == 4


def test_add_actions_carry_min_max_statistics_and_history_names_overwrites(pipeline_lake):
    _, lake = pipeline_lake
    path = lake.location(TableRef("silver", "transitions", "e"))
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pydict()
    assert all(n > 0 for n in actions["num_records"])
    assert min(actions["min.traj_index"]) == 0 and max(actions["max.traj_index"]) == 3
    assert all(v is not None for v in actions["max.reward"])
    history = lake.history(TableRef("bronze", "treatments", "e"))
    assert history[-1].operation in ("CREATE TABLE", "WRITE")
    stats = lake.history(TableRef("gold", "trajectory_stats", "e"))
    assert stats[-1].mode == "replace_where"


def test_overwrite_is_recorded_as_overwrite_and_maintain_keeps_content_and_time_travel(
    spark, pipeline_lake
):
    from gpope.shell.pipeline.ingest import run_ingest

    config, lake = pipeline_lake
    ref = TableRef("silver", "transitions", "e")
    before = sorted(map(tuple, lake.read(ref).collect()))
    run_ingest(spark, config, "e", domain="chain")  # a second overwrite of the silver tables
    entry = DeltaTable(lake.location(ref)).history(1)[0]
    assert entry["operation"] == "WRITE" and entry["operationParameters"]["mode"] == "Overwrite"
    version = lake.version(ref)
    report = maintain_lake(config.lake, retention_hours=168, dataset="e")
    done = {t.table: t for t in report.tables}
    assert done[str(ref)].files_after == 1 and done[str(ref)].skipped is None
    assert sorted(map(tuple, lake.read(ref).collect())) == before
    assert sorted(map(tuple, lake.read(ref, version=version - 1).collect())) == before  # time travel
    assert _canonical(_duckdb_rows(lake.location(ref))) == _canonical(
        [r.asDict(recursive=True) for r in lake.read(ref).collect()]
    )

"""``gpope load`` on files as pandas writes them, and CSV as RFC 4180 quotes it.

Oracles are independent of load: pandas' own conversion of tz-aware times to UTC, Python's
``zoneinfo`` for wall-clock times of a declared zone (fold 0, as java.time resolves a gap or an
overlap), and the frames' values as written.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from zoneinfo import ZoneInfo

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpope.errors import ConfigError, SchemaError
from gpope.shell.pipeline.ingest_contract import conform_bronze
from gpope.shell.pipeline.load import check_files, read_bronze_file
from gpope.shell.pipeline.load_types import NANOS_AS_LONG, set_nanos_as_long

_ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]
_EPOCH = dt.datetime(1970, 1, 1)
#: ns since the epoch: 1900 to 2200, inside pandas' nanosecond range, across many DST changes.
_NS = st.integers(-2_208_988_800 * 10**9, 7_258_118_400 * 10**9)
_TEXT = st.text(alphabet='ab ,"\n#é\\;', min_size=1, max_size=8)


@contextlib.contextmanager
def nanos_as_long(spark):
    """Spark reads TIMESTAMP(NANOS) as longs within the block (as load sets it for its reads)."""
    previous = spark.conf.get(NANOS_AS_LONG, None)
    set_nanos_as_long(spark, "true", where="The files")
    try:
        yield
    finally:
        set_nanos_as_long(spark, previous)


def _utc_micros(ns: int, *, naive: bool, zone: str | None) -> int:
    """The oracle: the UTC instant, in microseconds, of a time written as ``ns`` (an instant,
    or a wall clock in ``zone`` when ``naive``), floored to the microsecond."""
    micros = ns // 1000
    if not naive or zone is None:
        return micros
    wall = _EPOCH + dt.timedelta(microseconds=micros)
    local = wall.replace(tzinfo=ZoneInfo(zone))  # fold 0: java.time's choice in gaps/overlaps
    return micros - round(local.utcoffset().total_seconds()) * 10**6


@st.composite
def _extract(draw):
    """Three pandas frames of one extract, and how their times are written."""
    n = draw(st.integers(1, 6))
    unit = draw(st.sampled_from(["ns", "us", "ms"]))
    aware = draw(st.sampled_from([None, *_ZONES]))  # None: naive times
    zone = draw(st.sampled_from([None, *_ZONES]))  # the declared zone (naive times only)
    int_ids = draw(st.booleans())
    ids = draw(st.lists(st.integers(0, 2**62) if int_ids else _TEXT, min_size=n, max_size=n))
    times = draw(st.lists(_NS, min_size=n, max_size=n))
    if unit != "ns":  # a coarser unit holds whole units only
        step = {"us": 1000, "ms": 10**6}[unit]
        times = [t // step * step for t in times]
    codes = draw(st.lists(st.integers(-5, 5) | _TEXT, min_size=n, max_size=n))
    values = draw(st.lists(st.floats(-1e6, 1e6), min_size=n, max_size=n))
    stamp = pd.to_datetime(pd.Series(times, dtype="int64"), unit="ns").astype(f"datetime64[{unit}]")
    if aware is not None:
        stamp = stamp.dt.tz_localize("UTC").dt.tz_convert(aware)
    same_kind = [str(c) for c in codes] if any(isinstance(c, str) for c in codes) else codes
    frames = {
        "observations": pd.DataFrame({"patient_id": ids, "time": stamp,
                                      "variable": same_kind, "value": values}),
        "treatments": pd.DataFrame({"patient_id": ids, "time": stamp, "action": same_kind}),
        "outcomes": pd.DataFrame({"patient_id": ids, "time": stamp, "reward": values}),
    }
    if draw(st.booleans()):
        frames["treatments"]["propensity"] = draw(
            st.lists(st.floats(0.01, 1.0), min_size=n, max_size=n))
    return frames, times, aware is None, zone


def _bronze_rows(df) -> list[tuple]:
    """The contract's rows as ingest reads them, times as UTC microseconds."""
    from pyspark.sql import functions as F

    parsed = conform_bronze(df, _table_of(df), "test")
    cols = [F.unix_micros("time").alias("time") if c == "time" else c
            for c in parsed.columns if not c.startswith("_")]
    return [tuple(r) for r in parsed.select(*cols).collect()]


def _bronze_rows_of(frames: dict) -> dict[str, list[tuple]]:
    """:func:`_bronze_rows` of several tables in one Spark job (rows through JSON)."""
    import json
    from functools import reduce

    from pyspark.sql import functions as F

    parts = []
    for table, df in frames.items():
        parsed = conform_bronze(df, table, "test")
        cols = [F.unix_micros("time").alias("time") if c == "time" else F.col(c)
                for c in parsed.columns if not c.startswith("_")]
        parts.append(parsed.select(F.lit(table).alias("t"), F.to_json(
            F.array(*[F.to_json(F.struct(c.alias("v"))) for c in cols])).alias("row")))
    got: dict[str, list[tuple]] = {t: [] for t in frames}
    for r in reduce(lambda a, b: a.unionByName(b), parts).collect():
        got[r.t].append(tuple(json.loads(v).get("v") for v in json.loads(r.row)))
    return got


def _table_of(df) -> str:
    return ("observations" if "variable" in df.columns else
            "treatments" if "action" in df.columns else "outcomes")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extract=_extract())
def test_pandas_parquet_defaults_load_as_utc_instants(spark, tmp_path_factory, extract):
    # df.to_parquet with pandas' defaults: nanosecond (or coarser) times, tz-aware or naive
    # with a declared zone, integer or text ids and codes, with or without propensities.
    frames, times, naive, zone = extract
    folder = tmp_path_factory.mktemp("extract")
    files = {}
    for table, frame in frames.items():
        files[table] = str(folder / f"{table}.parquet")
        frame.to_parquet(files[table])
    assert pq.read_schema(files["outcomes"]).field("time").type.unit == \
        frames["outcomes"]["time"].dt.unit  # pandas wrote its own unit
    check_files(files, time_zone=zone)  # no refusal before Spark
    want_times = [_utc_micros(t, naive=naive, zone=zone) for t in times]
    with nanos_as_long(spark):
        got = _bronze_rows_of({t: read_bronze_file(spark, p, t, time_zone=zone)
                               for t, p in files.items()})
    for table, frame in frames.items():
        want = []
        for i, row in enumerate(frame.itertuples(index=False)):
            rest = tuple(float(v) if k in ("value", "reward", "propensity") else str(v)
                         for k, v in zip(frame.columns, row, strict=True)
                         if k not in ("patient_id", "time"))
            want.append((str(row.patient_id), want_times[i], *rest))
        if table == "treatments" and "propensity" not in frame:
            want = [(*w, None) for w in want]  # no logged propensities: null
        assert sorted(got[table], key=repr) == sorted(want, key=repr), table


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.lists(st.text(alphabet='ab ,"\n\r#é\\;', min_size=1, max_size=8), min_size=1,
                    max_size=6),
       wall=st.lists(st.integers(0, 4_102_444_800 * 10**6), min_size=6, max_size=6),
       zone=st.sampled_from([None, *_ZONES]))
def test_csv_ids_follow_rfc_4180_and_local_times_take_the_declared_zone(spark, tmp_path_factory,
                                                                        ids, wall, zone):
    # pandas' to_csv quotes a field holding a comma, quote or line break and doubles its quotes
    # (RFC 4180); its naive times are written without an offset: local times of the zone.
    folder = tmp_path_factory.mktemp("csv")
    stamps = [_EPOCH + dt.timedelta(microseconds=w) for w in wall[:len(ids)]]
    path = folder / "treatments.csv"
    pd.DataFrame({"patient_id": ids, "time": stamps, "action": ids,
                  "propensity": 0.5}).to_csv(path, index=False)
    assert '""' in path.read_text() or '"' not in "".join(ids)
    got = _bronze_rows(read_bronze_file(spark, str(path), "treatments", time_zone=zone))
    want = [(i, _utc_micros(w * 1000, naive=True, zone=zone), i, 0.5)
            for i, w in zip(ids, wall, strict=False)]
    assert sorted(got, key=repr) == sorted(want, key=repr)


def test_csv_times_with_an_offset_keep_it_whatever_the_declared_zone(spark, tmp_path):
    path = tmp_path / "outcomes.csv"
    path.write_text("patient_id,time,reward\n"
                    "1,2024-03-31T02:30:00+02:00,1\n"  # an offset: that instant
                    "1,2024-03-31 02:30:00,2\n"  # none, in a Berlin gap: java.time's 03:30 CEST
                    "1,2024-10-27 02:30:00.123456789,3\n"  # an overlap: the first (CEST)
                    "1,yesterday,4\n")  # not a time: kept, quarantined by ingest
    df = read_bronze_file(spark, str(path), "outcomes", time_zone="Europe/Berlin")
    raw = sorted((r.reward, r.time) for r in df.collect())
    assert raw[0][1] == "2024-03-31T02:30:00+02:00" and raw[3][1] == "yesterday"
    got = dict((r[2], r[1]) for r in _bronze_rows(df))
    utc = dt.datetime(2024, 3, 31, 0, 30) - _EPOCH
    assert got[1.0] == utc // dt.timedelta(microseconds=1)
    assert got[2.0] == (dt.datetime(2024, 3, 31, 1, 30) - _EPOCH) // dt.timedelta(microseconds=1)
    assert got[3.0] == (dt.datetime(2024, 10, 27, 0, 30, 0, 123456) - _EPOCH) \
        // dt.timedelta(microseconds=1)
    assert got[4.0] is None  # ingest's 'unparsable time'


def test_types_the_contract_cannot_hold_are_refused_before_spark_in_one_line(tmp_path):
    # a patient id with a missing value: pandas makes the column float
    ids = pd.Series([1, np.nan, 3])
    now = pd.Timestamp("2024-01-01")
    pd.DataFrame({"patient_id": ids, "time": now, "variable": "x", "value": 1.0}).to_parquet(
        tmp_path / "obs.parquet")
    pd.DataFrame({"patient_id": "1", "time": [now], "action": 1}).to_parquet(tmp_path / "tr.parquet")
    pd.DataFrame({"patient_id": "1", "time": [now.date()], "reward": 1.0}).to_parquet(
        tmp_path / "out.parquet")
    files = {"observations": str(tmp_path / "obs.parquet"),
             "treatments": str(tmp_path / "tr.parquet"), "outcomes": str(tmp_path / "out.parquet")}
    with pytest.raises(SchemaError) as info:
        check_files(files)
    message = str(info.value)
    assert "\n" not in message and "obs.parquet: column 'patient_id'" in message
    assert "Parquet type double" in message and ".astype('Int64')" in message
    files["observations"] = files["treatments"].replace("tr.", "obs2.")
    pd.DataFrame({"patient_id": ids.fillna(0).astype("Int64"), "time": now, "variable": 7,
                  "value": 1}).to_parquet(files["observations"])
    with pytest.raises(SchemaError, match=r"out.parquet: column 'time' \(bronze time\) has "
                                          r"Parquet type date32\[day\]"):
        check_files(files)
    # one table's files in two time units
    part = tmp_path / "outcomes"
    part.mkdir()
    for i, unit in enumerate(["ns", "us"]):
        pd.DataFrame({"patient_id": "1", "time": pd.Series([now]).astype(f"datetime64[{unit}]"),
                      "reward": 1.0}).to_parquet(part / f"part-{i}.parquet")
    files["outcomes"] = str(part)
    with pytest.raises(SchemaError, match=r"give column 'time' two types: timestamp\[ns\] in "
                                          r".*part-0.parquet and timestamp\[us\]"):
        check_files(files)
    with pytest.raises(ConfigError, match="--time-zone 'Berlin' is not a time zone name"):
        check_files(files, time_zone="Berlin")


def test_the_documented_pandas_extract_loads_with_its_local_clock(spark, tmp_path, monkeypatch,
                                                                  capsys):
    # docs/OWN_DATA.md's pandas frames and load command, as written: naive nanosecond times
    # of a Berlin ward across the spring daylight-saving change, no propensity column.
    import shlex
    from pathlib import Path

    from deltalake import DeltaTable

    from gpope.cli import main

    text = (Path(__file__).resolve().parents[2] / "docs" / "OWN_DATA.md").read_text()
    block = text.split("<!-- own-data pandas example: begin -->", 1)[1]
    code = block.split("```python", 1)[1].split("```", 1)[0]
    command = block.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "OWN_DATA.md", "exec"), {})
    assert pq.read_schema("ward/observations.parquet").field("time").type.unit == "ns"
    argv = shlex.split(command)
    assert argv[:2] == ["gpope", "load"]
    assert main([*argv[1:], "--lake", str(tmp_path / "lake")]) == 0
    out = capsys.readouterr().out
    assert "propensity: not in the file, not logged" in out and "Europe/Berlin" in out
    bronze = {t: DeltaTable(str(tmp_path / "lake" / "bronze" / "ward" / t)).to_pandas()
              for t in ("observations", "treatments", "outcomes")}
    utc = {t: sorted(str(v) for v in b["time"].dt.tz_convert("UTC").dt.tz_localize(None))
           for t, b in bronze.items()}
    # Berlin: CET (+1) until 2024-03-31 02:00, then CEST (+2)
    assert utc["observations"] == ["2024-03-30 21:00:00", "2024-03-31 00:00:00",
                                   "2024-03-31 01:10:00"]
    assert utc["treatments"] == ["2024-03-30 21:05:00", "2024-03-31 00:05:00",
                                 "2024-03-31 01:15:00"]
    assert utc["outcomes"] == ["2024-03-31 02:00:00"] * 2
    assert "propensity" not in bronze["treatments"]  # the schema says: not logged
    assert sorted(bronze["treatments"]["patient_id"]) == [7, 7, 12]  # as delivered: ingest reads
    # an integer id as text


def test_a_remote_path_with_nanosecond_times_reads_them_as_utc_instants(spark, tmp_path):
    # No footer can be read before Spark for a URI: Spark refuses TIMESTAMP(NANOS), the load
    # reads the file again with them as longs; a zone cannot be applied (naive or aware?).
    aware = pd.to_datetime(["2024-01-01 10:00:00.000001999"]).tz_localize("Asia/Kolkata")
    pd.DataFrame({"patient_id": ["a"], "time": aware, "reward": [1.0]}).to_parquet(
        tmp_path / "out.parquet")
    uri = (tmp_path / "out.parquet").as_uri()
    with nanos_as_long(spark):
        got = _bronze_rows(read_bronze_file(spark, uri, "outcomes"))
    want = (dt.datetime(2024, 1, 1, 4, 30, 0, 1) - _EPOCH) // dt.timedelta(microseconds=1)
    assert got == [("a", want, 1.0)]
    with pytest.raises(ConfigError, match=r"nanosecond times.*cannot be told for a remote path"):
        read_bronze_file(spark, uri, "outcomes", time_zone="Asia/Kolkata")


def test_integer_codes_in_the_datasets_entry_are_refused_with_the_quoting_that_fixes_them(
        tmp_path):
    # the data's integer action codes are read as text ("0"); YAML's 0 is an integer
    from gpope.config import load_config

    conf = tmp_path / "conf.yaml"
    conf.write_text("datasets:\n  w: {variables: [state], actions: [0, 1], max_length: 5}\n")
    with pytest.raises(ConfigError, match=r"actions\[0\] must be a string. Got 0 instead "
                                          r"\(a code is text: quote it, '0'"):
        load_config(conf)
    conf.write_text("datasets:\n  w: {variables: [state], actions: ['0', '1'], max_length: 5}\n")
    assert load_config(conf).datasets["w"].actions == ("0", "1")


def test_legacy_int96_times_are_wall_clock_times_like_naive_ones(spark, tmp_path):
    # Impala, Hive and old Spark write INT96 times, which carry no zone; pyarrow calls them
    # nanoseconds, Spark reads them as timestamps (no long to convert)
    import pyarrow as pa

    wall = pd.to_datetime(["2024-07-01 10:00:00.000001"])
    pq.write_table(pa.table({"patient_id": ["a"], "time": pa.array(wall, pa.timestamp("ns")),
                             "reward": [1.0]}),
                   tmp_path / "out.parquet", use_deprecated_int96_timestamps=True)
    path = str(tmp_path / "out.parquet")
    for zone, hours in ((None, 10), ("Europe/Berlin", 8)):  # CEST: UTC+2
        with nanos_as_long(spark):
            got = _bronze_rows(read_bronze_file(spark, path, "outcomes", time_zone=zone))
        want = dt.datetime(2024, 7, 1, hours, 0, 0, 1) - _EPOCH
        assert got == [("a", want // dt.timedelta(microseconds=1), 1.0)], zone

"""``gpope load --columns``: an extract's own column names mapped onto the bronze contract."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import pytest
from deltalake import DeltaTable
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.errors import ConfigError, SchemaError
from gpope.shell.pipeline.load import (
    BRONZE_COLUMNS,
    _check_sources,
    check_files,
    parse_column_map,
    read_bronze_file,
)

_FILES = {
    "vitals.csv": [["mrn", "charted_at", "item", "result", "unit"],
                   ["007", "2024-01-01T08:00:00+01:00", "pain", "3", "nrs"],
                   ["007", "2024-01-01T09:00:00Z", "pain", "", "nrs"],
                   ["012", "2024-01-01T08:30:00Z", "sedation", "1", ""]],
    "orders.csv": [["mrn", "ordered_at", "order_code", "p_logged"],
                   ["007", "2024-01-01T08:05:00Z", "opioid", "0.4"],
                   ["012", "2024-01-01T08:35:00Z", "none", "0.6"]],
    "outcomes.csv": [["mrn", "recorded_at", "comfort_score"],
                     ["007", "2024-01-01T10:00:00Z", "0.8"]],
}
_COLUMNS = ["patient_id=mrn,variable=item,value=result,action=order_code,propensity=p_logged",
            "reward=comfort_score,observations.time=charted_at,treatments.time=ordered_at,"
            "outcomes.time=recorded_at"]


@pytest.fixture
def extract(tmp_path):
    """A ward's three CSV exports, each with its own column names (one extra: ``unit``)."""
    for name, rows in _FILES.items():
        with open(tmp_path / name, "w", newline="") as fh:
            csv.writer(fh).writerows(rows)
    return {"observations": str(tmp_path / "vitals.csv"),
            "treatments": str(tmp_path / "orders.csv"),
            "outcomes": str(tmp_path / "outcomes.csv")}


def _documented_load() -> list[str]:
    """docs/OWN_DATA.md's ``gpope load --columns`` example as an argument list."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "OWN_DATA.md").read_text()
    block = text.split("<!-- load columns example: begin -->", 1)[1]
    body = block.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    argv = shlex.split(body)
    assert argv[:2] == ["gpope", "load"], argv
    return argv[1:]


def test_hospital_names_load_in_one_command_and_read_back_as_bronze(spark, extract, lake_root,
                                                                   capsys, monkeypatch):
    # the page's command as written, in the folder of the exports
    from gpope.cli import main

    monkeypatch.chdir(Path(extract["outcomes"]).parent)
    argv = [*_documented_load(), "--lake", str(lake_root), "--json"]
    assert [argv[argv.index("--columns") + 1], argv[-4]] == _COLUMNS
    assert main(argv) == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["columns"]["treatments"] == {"patient_id": "mrn", "time": "ordered_at",
                                               "action": "order_code", "propensity": "p_logged"}
    # read back by an independent reader (delta-rs) at the bronze layout
    tables = {t: DeltaTable(str(lake_root / "bronze" / "ward7" / t)).to_pyarrow_table()
              for t in extract}
    assert tables["observations"].column_names == ["patient_id", "time", "variable", "value",
                                                   "unit"]
    assert tables["treatments"].column_names == ["patient_id", "time", "action", "propensity"]
    assert tables["outcomes"].column_names == ["patient_id", "time", "reward"]
    for (table, arrow), rows in zip(tables.items(), _FILES.values(), strict=True):
        # counts in = out, and shown only as operator-only counts
        assert report["operator_only"]["rows"][table] == arrow.num_rows == len(rows) - 1
        got = sorted(tuple("" if v is None else v for v in r.values()) for r in arrow.to_pylist())
        assert got == sorted(tuple(r) for r in rows[1:])  # values as delivered


def test_bad_mappings_are_refused_naming_the_file_and_its_columns(spark, extract, tmp_path):
    with pytest.raises(ConfigError, match="'score' is not a column of the bronze contract"):
        parse_column_map("score=comfort_score")
    with pytest.raises(ConfigError, match="'reward' is not a column of the observations table"):
        parse_column_map("observations.reward=result")
    # one time column for all three tables: the orders file has none of that name
    with pytest.raises(SchemaError, match=r"treatments file .*orders.csv has no column\(s\) "
                                          r"\['charted_at'\].*found columns \['mrn', 'ordered_at'"):
        check_files(extract, columns=[_COLUMNS[0], "time=charted_at,reward=comfort_score"])
    # a mapping that leaves a contract column missing
    with pytest.raises(SchemaError, match=r"outcomes file .*outcomes.csv lacks the column\(s\) "
                                          r"\['reward'\].*--columns outcomes.reward=YOUR_NAME"):
        check_files(extract, columns=_COLUMNS[0] + ",observations.time=charted_at,"
                    "treatments.time=ordered_at,outcomes.time=recorded_at")
    # where Spark reads the file (a remote path): the same check on the columns it found
    with pytest.raises(SchemaError, match=r"vitals.csv has no column\(s\) \['taken_at'\]"):
        read_bronze_file(spark, extract["observations"], "observations",
                         columns={"patient_id": "mrn", "time": "taken_at"})


_CONTRACT_NAMES = sorted({c for cs in BRONZE_COLUMNS.values() for c in cs})
_NAME = st.one_of(st.text("abcdefgh_", min_size=1, max_size=6), st.sampled_from(_CONTRACT_NAMES))


@settings(max_examples=60, deadline=None)
@given(headers=st.fixed_dictionaries({t: st.lists(_NAME, min_size=len(c), max_size=len(c),
                                                  unique=True)
                                      for t, c in BRONZE_COLUMNS.items()}),
       plain=st.sets(st.sampled_from(_CONTRACT_NAMES)),
       order=st.randoms(use_true_random=False))
def test_any_header_maps_onto_the_contract_whatever_the_entry_order(headers, plain, order):
    # Each table's file names its contract columns its own way; a column whose name is the
    # same in every table that has it may be given once, unprefixed; the rest per table. In any
    # entry order, the map renames each file's header to exactly its contract's columns.
    entries, given_plain = [], set()
    for name in plain:
        owners = [t for t, cs in BRONZE_COLUMNS.items() if name in cs]
        sources = {headers[t][BRONZE_COLUMNS[t].index(name)] for t in owners}
        if len(sources) == 1:
            entries.append(f"{name}={sources.pop()}")
            given_plain.add(name)
    for table, columns in BRONZE_COLUMNS.items():
        for column, source in zip(columns, headers[table], strict=True):
            if column not in given_plain or order.random() < 0.5:  # a prefixed entry wins
                entries.append(f"{table}.{column}={source}")
    order.shuffle(entries)
    renames = parse_column_map(",".join(entries))
    for table, columns in BRONZE_COLUMNS.items():
        own = renames.get(table, {})
        if any(c in headers[table] for c in own):  # e.g. a rotation of contract names
            with pytest.raises(SchemaError, match="maps other columns to those names"):
                _check_sources(table, "f.csv", headers[table], own)
            continue
        _check_sources(table, "f.csv", headers[table], own)
        back = {s: c for c, s in own.items()}
        assert sorted(back.get(h, h) for h in headers[table]) == sorted(columns)

"""``gpope load --columns``: an extract's own column names mapped onto the bronze contract."""

from __future__ import annotations

import csv
import json
import shlex
from pathlib import Path

import pytest
from deltalake import DeltaTable

from gpope.errors import ConfigError, SchemaError
from gpope.shell.pipeline.load import check_files, parse_column_map, read_bronze_file

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
    from gpope.shell.cli import main

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
        assert report["rows"][table] == arrow.num_rows == len(rows) - 1  # counts in = out
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

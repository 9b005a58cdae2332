"""The scheduler entry points (console scripts gpope-<stage>, jobs/*.py) over gpope.api."""

from __future__ import annotations

import pytest

from gpope.shell import entrypoints

pytestmark = pytest.mark.spark


def test_simulate_if_missing_creates_the_cohort_once_then_keeps_it(spark, tmp_path, capsys):
    """The scheduled job's producer: day 1 simulates, later days leave the bronze tables alone."""
    from gpope import api
    from gpope.shell.lake import Lake, TableRef

    lake = str(tmp_path / "lake")
    argv = ["--lake", lake, "--dataset", "sched", "--domain", "hiv", "--patients", "5",
            "--steps", "3", "--seed", "1", "--if-missing"]
    config = api.load_config(lake=lake)
    assert api.bronze_tables(spark, "sched", config=config) == dict.fromkeys(
        ("observations", "treatments", "outcomes"), False)
    assert entrypoints.simulate(argv) == 0
    first = capsys.readouterr().out
    store = Lake.from_settings(spark, config.lake)
    versions = {t: store.version(TableRef("bronze", t, "sched")) for t in api.bronze_tables(
        spark, "sched", config=config)}
    assert "nothing simulated" not in first
    assert entrypoints.simulate(argv) == 0
    assert "nothing simulated (--if-missing)" in capsys.readouterr().out
    assert {t: store.version(TableRef("bronze", t, "sched")) for t in versions} == versions


def test_entry_point_errors_exit_2_with_one_line(spark, tmp_path, capsys):
    argv = ["--lake", str(tmp_path / "lake"), "--dataset", "absent"]
    assert entrypoints.ingest(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpope-ingest: error:")

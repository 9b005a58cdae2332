"""gpope query as a sandbox: one read-only SELECT over the served views, nothing else.

The lake here is written with delta-rs directly (no Spark): the sandbox is DuckDB's and the
view registration's, which need no pipeline run to be checked.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.cli import main
from gpope.config import load_config
from gpope.errors import ConfigError, QueryError
from gpope.shell.preflight import check_dataset_unique, check_stage
from gpope.shell.query import RELEASE_VIEWS, check_select, query


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    write_deltalake(root / "gold" / "released_values",
                    pa.table({"run_id": ["r1", "r1"], "dataset": ["ward", "ward"],
                              "state": ["a", "b"], "value": [0.25, 0.5]}))
    write_deltalake(root / "silver" / "ward" / "transitions",
                    pa.table({"patient_id": ["p1", "p2"], "reward": [1.0, -1.0]}))
    write_deltalake(root / "gold" / "ward" / "trajectory_stats", pa.table({"tau": [3, 4]}))
    write_deltalake(root / "bronze" / "ward" / "observations", pa.table({"value": [7.0]}))
    return root


def _escapes(tmp_path: Path, secret: Path) -> dict[str, Path | None]:
    """Statements that would read or write outside the views, and the file each would write."""
    out = tmp_path / "out"
    return {
        f"SELECT * FROM read_csv('{secret}')": None,
        f"SELECT * FROM '{secret}'": None,
        f"SELECT * FROM read_text('{secret}')": None,
        f"COPY (SELECT * FROM released_values) TO '{out}.csv'": out.with_suffix(".csv"),
        f"ATTACH '{out}.db' AS x": out.with_suffix(".db"),
        f"EXPORT DATABASE '{out}'": out,
        "INSTALL httpfs": None,
        "SET enable_external_access = true": None,
        "CREATE TABLE t AS SELECT 1": None,
        f"SELECT 1; COPY (SELECT 1) TO '{out}.two.csv'": out.with_suffix(".two.csv"),
    }


def test_escapes_are_refused_and_write_nothing(lake, tmp_path, capsys):
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    for sql, target in _escapes(tmp_path, secret).items():
        with pytest.raises(QueryError) as err:
            query(sql, lake=lake, operator=True)
        assert "hunter2" not in str(err.value), sql
        assert main(["query", "--lake", str(lake), sql]) == 2, sql
        printed = capsys.readouterr()
        assert "hunter2" not in printed.out + printed.err
        assert len(printed.err.strip().splitlines()) == 1, printed.err
        if target is not None:
            assert not target.exists(), sql
    assert list(tmp_path.iterdir()) == [lake, secret] or set(tmp_path.iterdir()) == {lake, secret}


def test_a_select_that_reaches_for_a_file_is_refused_after_the_views_are_locked(lake, tmp_path):
    # the statement IS one SELECT, so only DuckDB's locked external access stops it
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    with pytest.raises(QueryError, match="never other files"):
        query(f"SELECT count(*) FROM released_values, read_csv('{secret}')", lake=lake)


def test_plain_selects_over_released_views_answer(lake):
    got = query("SELECT state, value FROM released_values ORDER BY state", lake=lake).to_pylist()
    assert got == [{"state": "a", "value": 0.25}, {"state": "b", "value": 0.5}]
    with_cte = query("WITH v AS (SELECT sum(value) AS s FROM released_values) SELECT s FROM v",
                     lake=lake).to_pylist()
    assert with_cte == [{"s": 0.75}]
    assert query("FROM released_values SELECT count(*) AS n", lake=lake).to_pylist() == [{"n": 2}]
    assert "released_values" in RELEASE_VIEWS and "transitions" not in RELEASE_VIEWS


@pytest.mark.parametrize("view", ["ward__transitions", "transitions", "trajectory_stats",
                                  "ward__trajectory_stats", "ward__observations", "observations",
                                  "pipeline_runs", "rejected_events"])
def test_per_patient_tables_need_the_operator_switch(lake, view, capsys):
    with pytest.raises(QueryError, match="--operator") as err:
        query(f"SELECT count(*) FROM {view}", lake=lake)
    assert "not a released view" in str(err.value)
    assert main(["query", "--lake", str(lake), f"SELECT count(*) FROM {view}"]) == 2
    assert "--operator" in capsys.readouterr().err


def test_the_operator_switch_opens_them_and_says_so(lake, capsys):
    got = query("SELECT sum(reward) AS r FROM ward__transitions", lake=lake, operator=True)
    assert got.to_pylist() == [{"r": 0.0}]
    assert main(["query", "--lake", str(lake), "--operator", "--json",
                 "SELECT count(*) AS n FROM transitions"]) == 0
    captured = capsys.readouterr()
    assert '"n": 2' in captured.out and "not private" in captured.err
    assert main(["query", "--lake", str(lake), "--tables"]) == 0
    listed = capsys.readouterr()
    assert "released_values" in listed.out and "ward__transitions" not in listed.out
    assert "(3 raw and per-patient table(s) not listed" in listed.err
    assert main(["query", "--lake", str(lake), "--tables", "--operator", "--json"]) == 0
    views = {v["view"]: v for v in json.loads(capsys.readouterr().out)["views"]}
    assert views["ward__transitions"] == {"view": "ward__transitions", "layer": "silver",
                                          "dataset": "ward", "table": "transitions",
                                          "path": str(lake / "silver" / "ward" / "transitions")}
    assert views["transitions"]["dataset"] == "(all, column dataset)"
    assert views["transitions"]["path"] is None
    assert set(views) >= {"released_values", "latest_release", "observations", "trajectory_stats"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["SELECT 1", "COPY x TO 'y'", "ATTACH 'z'", "PRAGMA version",
                                 "SET threads = 1", "DETACH x", "CALL pragma_version()",
                                 "LOAD httpfs", "DROP TABLE x", "CHECKPOINT"]),
                min_size=1, max_size=3))
def test_only_exactly_one_select_passes_the_parser_check(statements):
    sql = "; ".join(statements)
    if statements == ["SELECT 1"]:
        check_select(sql)
    else:
        with pytest.raises(QueryError, match="exactly one read-only SELECT"):
            check_select(sql)


def test_dataset_names_that_differ_only_in_case_are_refused(tmp_path):
    root = tmp_path / "lake"
    write_deltalake(root / "bronze" / "base" / "observations", pa.table({"value": [1.0]}))
    config = load_config(None, lake={"root": str(root)})
    with pytest.raises(ConfigError, match="'Base' differs only in case from dataset 'base'"):
        check_dataset_unique(config, "Base")
    with pytest.raises(ConfigError, match="'base'"):
        check_stage(config, "simulate", "BASE")
    check_dataset_unique(config, "base")  # the same dataset again is fine
    check_dataset_unique(config, "base2")


def test_query_views_never_merge_two_datasets(tmp_path):
    # a lake written before the check: both exist; the views refuse to serve them as one
    root = tmp_path / "lake"
    write_deltalake(root / "bronze" / "Base" / "observations", pa.table({"value": [1.0] * 3}))
    write_deltalake(root / "bronze" / "base" / "observations", pa.table({"value": [2.0] * 5}))
    for sql in ("SELECT count(*) FROM Base__observations", "SELECT count(*) FROM observations"):
        with pytest.raises(QueryError, match="differ only in case"):
            query(sql, lake=root, operator=True)


def test_the_ledger_view_is_read_through_the_ledgers_audit(lake, capsys):
    # a commit gpope never writes (no commitInfo) makes the view one error naming the ledger
    from gpope.shell.pipeline.ledger import PrivacyLedger

    PrivacyLedger(None, load_config(None, lake={"root": str(lake)})).set_budget(
        "ward", epsilon=1.0, delta=1e-6)
    assert query("SELECT count(*) AS n FROM privacy_ledger", lake=lake).to_pylist() == [{"n": 1}]
    log = lake / "gold" / "privacy_ledger" / "_delta_log"
    last = max(int(p.name[:20]) for p in log.glob("*.json"))
    (log / f"{last + 1:020d}.json").write_text('{"remove": {"path": "x.parquet", '
                                               '"dataChange": true, "deletionTimestamp": 1}}\n')
    assert main(["query", "--lake", str(lake), "SELECT count(*) FROM privacy_ledger"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "privacy ledger" in err[0] and "Traceback" not in err[0]
    # with budget_status beside it, the view's audit is budget_status' own read of the ledger
    assert main(["query", "--lake", str(lake),
                 "SELECT count(*) FROM privacy_ledger, budget_status"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "privacy ledger" in err[0] and "Traceback" not in err[0]

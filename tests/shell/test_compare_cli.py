"""gpope compare on a lake written with delta-rs (no Spark): two released runs' rows in, their
differences with union-bound intervals and one sentence each out (gpope.core.compare)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from gpope.cli import main


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    root = tmp_path / "lake"
    inf = math.inf
    rows = [  # run, spec, state, value, lower, upper, ci_level
        ("ra", "protocol_a", "s0", 0.60, 0.55, 0.65, 0.95),
        ("ra", "protocol_a", "s1", 0.20, -inf, inf, 0.95),
        ("ra", "protocol_a", "policy_value", 0.41, 0.38, 0.44, 0.95),
        ("rb", "protocol_b", "s0", 0.40, 0.36, 0.44, 0.95),
        ("rb", "protocol_b", "s1", 0.10, 0.05, 0.15, 0.95),
        ("rb", "protocol_b", "policy_value", 0.40, 0.37, 0.43, 0.95),
        ("rc", "protocol_c", "s0", 0.40, 0.36, 0.44, 0.95),  # another dataset
    ]
    cols = list(zip(*rows, strict=True))
    write_deltalake(root / "gold" / "released_values", pa.table({
        "run_id": list(cols[0]), "dataset": ["ward"] * 6 + ["icu"], "spec_name": list(cols[1]),
        "estimator": ["untuned"] * 7, "state": list(cols[2]), "value": list(cols[3]),
        "lower": list(cols[4]), "upper": list(cols[5]), "ci_level": list(cols[6]),
        "epsilon": [1.0] * 7}))
    return root


def test_compare_prints_differences_from_the_released_intervals(lake, capsys):
    assert main(["compare", "--lake", str(lake), "--dataset", "ward", "--runs", "ra", "rb",
                 "--json"]) == 0
    out = {d["quantity"]: d for d in json.loads(capsys.readouterr().out)["differences"]}
    # s0: 0.60 - 0.40 in [0.55 - 0.44, 0.65 - 0.36] at 90%: better
    assert out["s0"]["verdict"] == "better"
    assert (out["s0"]["lower"], out["s0"]["upper"], out["s0"]["level"]) == pytest.approx(
        (0.11, 0.29, 0.90))
    assert out["s1"]["lower"] is None and out["s1"]["verdict"] == "cannot tell"
    assert out["policy_value"]["verdict"] == "cannot tell"
    assert main(["compare", "--lake", str(lake), "--dataset", "ward", "--runs", "rb", "ra"]) == 0
    text = capsys.readouterr().out
    assert "s0: A is worse than B by 0.2 (90% interval [-0.29, -0.11])." in text
    assert "policy_value: cannot tell A from B" in text


def test_a_run_without_rows_on_the_dataset_is_one_line(lake, capsys):
    assert main(["compare", "--lake", str(lake), "--dataset", "ward", "--runs", "ra", "rc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpope compare: error: Run 'rc' released nothing on dataset 'ward'")
    assert len(err.splitlines()) == 1


def test_track_logs_the_differences_and_their_figure_to_mlflow(lake, tmp_path, capsys):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["compare", "--lake", str(lake), "--dataset", "ward", "--runs", "ra", "rb",
                 "--json", "--track", "--tracking-uri", uri]) == 0
    run_id = json.loads(capsys.readouterr().out)["mlflow_run_id"]
    client = mlflow.MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.tags["gpope.stage"] == "compare"
    assert (run.data.tags["gpope.compare.run_a"], run.data.tags["gpope.compare.run_b"]) == (
        "ra", "rb")
    assert {a.path for a in client.list_artifacts(run_id)} == {"differences.json",
                                                               "differences.png"}
    logged = json.loads(Path(client.download_artifacts(run_id, "differences.json",
                                                       str(tmp_path))).read_text())
    assert {d["quantity"]: d["verdict"] for d in logged["differences"]}["s0"] == "better"


def test_the_release_contrasts_view_gives_what_compare_prints(lake, capsys):
    from gpope.shell.query import describe, query

    assert main(["compare", "--lake", str(lake), "--dataset", "ward", "--runs", "ra", "rb",
                 "--json"]) == 0
    printed = {d["quantity"]: d for d in json.loads(capsys.readouterr().out)["differences"]}
    rows = query("SELECT * FROM release_contrasts WHERE run_a = 'ra' AND run_b = 'rb'",
                 lake=lake).table.to_pylist()
    assert {r["state"] for r in rows} == set(printed)
    for r in rows:
        p = printed[r["state"]]
        assert r["verdict"] == p["verdict"]
        assert r["difference"] == pytest.approx(p["value"])
        assert r["ci_level"] == pytest.approx(p["level"])
        for end in ("lower", "upper"):
            assert (r[end] if math.isfinite(r[end]) else None) == (
                p[end] if p[end] is None else pytest.approx(p[end]))
    # another dataset's run never pairs with these, and the columns say what they hold
    assert not query("SELECT * FROM release_contrasts WHERE run_b = 'rc'",
                     lake=lake).table.num_rows
    comments = {c["column"]: c["comment"] for c in describe("release_contrasts", lake=lake)}
    assert "union bound" in comments["ci_level"]


def test_rows_of_two_estimands_are_named_and_old_rows_read_null(tmp_path, capsys):
    # a lake with the estimand column: a difference between rows that estimate different
    # things says so; the fixture's lake (written before the column) reads estimand null
    root = tmp_path / "lake"
    direct, identified = "direct J(target)", "identified set J(target)"
    write_deltalake(root / "gold" / "released_values", pa.table({
        "run_id": ["ra", "ra", "rb", "rb"], "dataset": ["ward"] * 4,
        "spec_name": ["a", "a", "b", "b"], "estimator": ["clipped_is"] * 4,
        "state": ["s0", "policy_value"] * 2, "value": [0.6, 0.4, 0.4, 0.3],
        "lower": [0.55, 0.3, 0.35, 0.2], "upper": [0.65, 0.5, 0.45, 0.4],
        "ci_level": [0.95] * 4, "epsilon": [1.0] * 4,
        "estimand": ["tabular", direct, "tabular", identified]}))
    assert main(["compare", "--lake", str(root), "--dataset", "ward", "--runs", "ra", "rb"]) == 0
    text = capsys.readouterr().out.splitlines()
    notes = [line for line in text if "NOTE" in line]
    assert notes == [f'  NOTE: A\'s row estimates "{direct}", B\'s "{identified}": the '
                     "difference mixes two estimands."]
    assert text[text.index(notes[0]) - 1].startswith("policy_value:")
    assert main(["compare", "--lake", str(root), "--dataset", "ward", "--runs", "ra", "rb",
                 "--json"]) == 0
    out = {d["quantity"]: d for d in json.loads(capsys.readouterr().out)["differences"]}
    assert (out["s0"]["estimand_a"], out["s0"]["estimand_b"]) == ("tabular", "tabular")


def test_a_lake_released_before_the_estimand_column_compares_with_null_estimands(lake, capsys):
    assert main(["compare", "--lake", str(lake), "--dataset", "ward", "--runs", "ra", "rb",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["differences"]
    assert {(d["estimand_a"], d["estimand_b"]) for d in out} == {(None, None)}

"""Hostile lake paths (issue 28.1): every combination of a space, non-ASCII letters, ``#``, ``?``,
``%``, braces and quotes works through every stage and every reader, or is refused up front with
the character named.

A hypothesis test drives the JVM-free path functions (root check, table paths, commit history,
pinned reads, ``gpope query``) over generated folder names; one small whole-pipeline run in a
combined nasty path checks Spark's stages and the CLI readers on top.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpope.config import LakeSettings
from gpope.errors import ConfigError
from gpope.shell.lake.names import TableRef, table_path

#: What users put in folder names, plus the characters delta-rs cannot address.
_ALPHABET = [" ", "é", "ü", "中", "#", "?", "%", "{", "}", "'", '"', ",", "=", "a", "7", "_",
             "[", "|", "^"]
_FOLDER = st.text(alphabet=_ALPHABET, min_size=1, max_size=8).filter(
    lambda s: s.strip() not in ("", ".", "..") and not s.endswith(" "))
_NASTY = "ward é #7 ?q=1 %zz {a,b} 'x\""


def _write_tagged(path: str, rows: pa.Table, run_id: str, mode: str) -> None:
    from deltalake import CommitProperties, write_deltalake

    from gpope.shell.lake.base import encode_user_metadata

    write_deltalake(path, rows, mode=mode, commit_properties=CommitProperties(
        custom_metadata={"userMetadata": encode_user_metadata(mode, None, run_id)}))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(folder=_FOLDER)
def test_generated_lake_paths_work_through_the_jvm_free_readers_or_are_refused(folder):
    from gpope.shell.lake.delta_rs import check_local_root
    from gpope.shell.lake.manifest import PipelineRuns, read_pinned_arrow
    from gpope.shell.query import latest_version, query

    base = Path(tempfile.mkdtemp())
    try:
        root = str(base / folder / "lake")
        try:
            check_local_root(root)
        except ConfigError as exc:  # refused up front, naming the character
            bad = [c for c in folder if c in "[]|^"]
            escapes = [folder[i:i + 3] for i in range(len(folder) - 2)
                       if folder[i] == "%" and all(c in "0123456789abcdefABCDEF"
                                                   for c in folder[i + 1:i + 3])]
            assert bad or escapes, f"{folder!r} refused: {exc}"
            for c in bad:
                assert repr(c) in str(exc)
            assert not (base / folder).exists()
            return
        settings_ = LakeSettings(root=root)
        ref = TableRef("silver", "transitions", "d")
        path = table_path(root, ref)
        assert path == str(Path(root).resolve() / "silver" / "d" / "transitions")
        rows = pa.table({"run_id": ["r1", "r1"], "x": [1.0, 2.0]})
        _write_tagged(path, rows, "r1", "overwrite")
        PipelineRuns(settings_).commit(run_id="r1", stage="ingest", dataset="d",
                                       tables={ref: 0})
        _write_tagged(path, pa.table({"run_id": ["r2"], "x": [3.0]}), "r2", "append")  # torn
        assert latest_version(path) == 1
        pinned = read_pinned_arrow(settings_, ref)  # the pipeline's JVM-free reader
        assert pinned is not None and pinned.column("x").to_pylist() == [1.0, 2.0]
        got = query("SELECT count(*) AS n, sum(x) AS s FROM d__transitions", lake=root).to_pylist()
        assert got == [{"n": 2, "s": 3.0}]
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.spark
def test_whole_pipeline_in_a_combined_hostile_path(spark, tmp_path, capsys):
    # Simulate, ingest, stats and a private evaluation on a small chain cohort whose lake path
    # holds a space, an accent, '#', '?', '%', braces, a comma and both quotes; then the JVM-free
    # readers (gpope query, budget show, the manifest) see every row.
    import json

    from gpope import api
    from gpope.config import load_config
    from gpope.shell.cli import main
    from gpope.shell.pipeline.simulate import SimulateOptions

    root = str(tmp_path / _NASTY / "lake")
    config = load_config(None, lake={"root": root})
    spec = str(Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml")
    sim = api.simulate(spark, "hostile", domain="chain", patients=30, seed=1, config=config,
                       options=SimulateOptions(n_steps=6))
    ingest = api.ingest(spark, "hostile", domain="chain", config=config)
    stats = api.stats(spark, "hostile", spec, config=config)
    api.set_budget(spark, "hostile", epsilon=5.0, delta=1e-4, config=config)
    report = api.evaluate(spark, "hostile", spec, epsilon=1.0, delta=1e-5, seed=2, config=config,
                          solver={"iterations": 200, "allow_not_private": True,
                                  "public_trajectories": 0},
                          tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert report.m == 30 and report.mlflow_run_id is not None
    del sim, stats
    assert main(["query", "--lake", root, "--json",
                 "SELECT (SELECT count(*) FROM hostile__transitions) AS transitions, "
                 "(SELECT count(DISTINCT run_id) FROM latest_release) AS releases, "
                 "(SELECT count(*) FROM hostile__trajectory_stats) AS trajectories"]) == 0
    got = json.loads(capsys.readouterr().out)["rows"][0]
    assert got == {"transitions": ingest.n_transitions, "releases": 1,
                   "trajectories": 30}
    assert main(["budget", "show", "--dataset", "hostile", "--lake", root, "--json"]) == 0
    budget = json.loads(capsys.readouterr().out)
    assert budget["spent_basic"]["epsilon"] == pytest.approx(1.0)
    assert [r["status"] for r in budget["runs"]] == ["released"]

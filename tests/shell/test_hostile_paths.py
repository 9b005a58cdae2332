"""Hostile lake paths (issue 28.1): every combination of a space, non-ASCII letters, ``#``, ``?``,
``%``, braces and quotes works through every stage and every reader, or is refused up front with
the character named.

A hypothesis test drives the JVM-free path functions (root check, table paths, commit history,
pinned reads, ``gpope query``) over generated folder names. The whole pipeline (files -> ``gpope
load`` -> ingest -> stats -> evaluate, a driver-side ``simulate``, then ``gpope query`` and
``gpope budget show``) runs in the combined nasty path in ``tests/shell/test_own_data_doc.py``,
where the documented own-data example runs in such a working directory.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
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
        got = query("SELECT count(*) AS n, sum(x) AS s FROM d__transitions", lake=root,
                    operator=True).to_pylist()
        assert got == [{"n": 2, "s": 3.0}]
    finally:
        shutil.rmtree(base, ignore_errors=True)

"""The native Delta path returns the version of its own commit, not the latest one.

No Delta JARs load here (no Maven access), so the native write itself cannot run; what decides the
returned version is the commit token in ``userMetadata`` and :func:`own_commit_version` over the
table history. Both are exercised on a real Delta table whose history has interleaved commits of
two writers (written by delta-rs, which records ``userMetadata`` exactly like delta-spark).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, write_deltalake

from gpope.errors import CommitError
from gpope.shell.lake.base import decode_user_metadata, encode_user_metadata
from gpope.shell.lake.native import own_commit_version, with_commit_token


def _commit(path, metadata: str) -> None:
    write_deltalake(
        str(path), pa.table({"x": [1]}), mode="append",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": metadata}),
    )


def _history(path) -> list[tuple[int, object]]:
    return [(c["version"], c.get("userMetadata")) for c in DeltaTable(str(path)).history()]


def test_own_version_is_found_although_another_writer_committed_after(tmp_path):
    path = tmp_path / "t"
    ours, token = with_commit_token(encode_user_metadata("append", None))
    theirs, other = with_commit_token(encode_user_metadata("append", None))
    _commit(path, theirs)          # version 0: another writer
    _commit(path, ours)            # version 1: this write
    _commit(path, theirs.replace(other, "x" * 32))  # version 2: another writer, after us
    history = _history(path)
    latest = max(v for v, _ in history)  # what DESCRIBE HISTORY ... LIMIT 1 returns
    assert latest == 2
    assert own_commit_version(history, token) == 1
    assert own_commit_version(history, other) == 0
    # the token does not disturb the write mode the table layer reads back
    assert decode_user_metadata(ours) == "append"


def test_missing_or_repeated_token_is_an_error(tmp_path):
    path = tmp_path / "t"
    ours, token = with_commit_token(encode_user_metadata("overwrite", None))
    _commit(path, ours)
    _commit(path, "not json")
    with pytest.raises(CommitError, match="0 times"):
        own_commit_version(_history(path), "f" * 32)
    _commit(path, ours)  # the same token twice cannot identify one commit
    with pytest.raises(CommitError, match="2 times"):
        own_commit_version(_history(path), token)


def test_tokens_are_unique():
    tokens = {with_commit_token("{}")[1] for _ in range(1000)}
    assert len(tokens) == 1000

"""The Delta commit of a delta-rs write: one transaction of staged files, retried on races."""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError
from gpope.shell.lake.base import WriteMode, WriteSpec, partition_string

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql.types import StructType

    from gpope.shell.lake.delta_rs.files import StagedFile
    from gpope.shell.lake.delta_rs.table import DeltaRsTables

__all__ = ["MAX_COMMIT_ATTEMPTS", "commit_files"]

MAX_COMMIT_ATTEMPTS = 8


def commit_files(
    store: DeltaRsTables,
    check_table: Callable[[DeltaTable, str, StructType, list[str], str], object],
    path: str,
    files: list[StagedFile],
    spec: WriteSpec,
) -> int:
    """Commit the staged ``files`` in one Delta transaction; return the version it created.

    The table is loaded fresh for each attempt (each snapshot validated by ``check_table``) and
    the transaction refuses to land on a newer version than the one it read, so a remove set
    always sees every concurrent commit; a lost race retries (:data:`MAX_COMMIT_ATTEMPTS`).

    Raises:
        CommitError: the commit failed, or other writers won every attempt.
    """
    from deltalake import Schema
    from deltalake.transaction import (
        AddAction,
        CommitProperties,
        create_table_with_add_actions,
    )

    schema, mode, table_name = spec.schema, spec.mode, spec.table_name
    partitions = spec.partition_by or []
    replace_where = spec.replace_where

    adds = [
        AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
        for f in files
    ]
    properties = CommitProperties(
        custom_metadata={"userMetadata": spec.user_metadata}, max_commit_retries=0
    )
    last_error: Exception | None = None
    for attempt in range(MAX_COMMIT_ATTEMPTS):
        if attempt:
            time.sleep(min(0.05 * 2**attempt, 1.0))
        if not store.exists(path):
            try:
                create_table_with_add_actions(
                    path,
                    Schema.from_json(schema.json()),
                    adds,
                    mode="error",
                    partition_by=partitions,
                    commit_properties=properties,
                )
                return 0
            except Exception as exc:
                if _is_live(store, path, adds):  # the commit landed; a later step failed
                    return store.version(path)
                if store.exists(path):  # another writer created it first: write into it
                    last_error = exc
                    continue
                raise _commit_error(table_name, path, exc) from exc
        table = store.open(path)  # fresh: the remove set must see every concurrent commit
        check_table(table, path, schema, partitions, table_name)
        read_version = int(table.version())
        try:
            _transact(table, adds, mode, partitions, replace_where, properties)
            return read_version + 1
        except Exception as exc:
            if _is_live(store, path, adds):
                return store.version(path)
            if store.version(path) > read_version:  # lost a race: reload and retry
                last_error = exc
                continue
            raise _commit_error(table_name, path, exc) from exc
    raise CommitError(
        f"Could not commit to {table_name} at {path}: other writers committed first "
        f"{MAX_COMMIT_ATTEMPTS} times in a row ({last_error}). Nothing was committed; "
        "retry when the concurrent jobs have finished."
    )


def _is_live(store: DeltaRsTables, path: str, adds: list[Any]) -> bool:
    """Whether the first of ``adds`` is a live file of the table (the commit landed)."""
    if not adds or not store.exists(path):
        return False
    return urllib.parse.unquote(adds[0].path) in store.live_paths(path)


def _transact(
    table: DeltaTable,
    adds: list[Any],
    mode: WriteMode,
    partitions: list[str],
    replace_where: Mapping[str, str | None] | None,
    properties: Any,
) -> None:
    """One commit of ``adds`` on ``table``'s snapshot, recorded under the right operation.

    ``append`` is a Delta append; ``overwrite`` and ``replace_where`` are ``WRITE`` operations in
    ``Overwrite`` mode whose removes delta-rs derives from the snapshot (all files, or the files of
    the replaced partition), so the history says what happened. A ``replace_where`` on a null
    partition value, which partition filters cannot express, removes its files explicitly.
    """
    if mode == "append":
        table.create_write_transaction(
            adds, mode="append", schema=table.schema(), partition_by=partitions,
            commit_properties=properties,
        )  # fmt: skip
        return
    if mode == "replace_where" and any(v is None for v in (replace_where or {}).values()):
        removes = _removes(table, mode, partitions, replace_where)
        table.create_write_transaction(
            [*adds, *removes], mode="append", schema=table.schema(), partition_by=partitions,
            commit_properties=properties,
        )  # fmt: skip
        return
    filters = (
        [(c, "=", v) for c, v in (replace_where or {}).items()]
        if mode == "replace_where"
        else None
    )
    table.create_write_transaction(
        adds, mode="overwrite", schema=table.schema(), partition_by=partitions,
        partition_filters=filters, commit_properties=properties,
    )  # fmt: skip


def _commit_error(table_name: str, path: str, exc: Exception) -> CommitError:
    return CommitError(
        f"The Delta commit to {table_name} at {path} failed ({type(exc).__name__}: {exc}). "
        "Nothing was committed and the new files were deleted."
    )


def _removes(
    table: DeltaTable,
    mode: WriteMode,
    partitions: list[str],
    replace_where: Mapping[str, str | None] | None,
) -> list[Any]:
    """Remove actions for the live files ``mode`` replaces (none for append)."""
    import pyarrow as pa
    from deltalake.transaction import RemoveAction

    if mode == "append":
        return []
    live = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    now = int(time.time() * 1000)
    removes = []
    for row in live:
        values = {c: partition_string(row.get(f"partition.{c}")) for c in partitions}
        if mode == "replace_where" and any(
            values[c] != v for c, v in (replace_where or {}).items()
        ):
            continue
        removes.append(RemoveAction(row["path"], True, now, row["size_bytes"], values))
    return removes

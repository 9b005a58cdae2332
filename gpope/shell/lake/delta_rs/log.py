"""Open a local Delta table with delta-rs: its log (damage named in one line), history, Arrow.

Every delta-rs read goes through :func:`read_table`, which scans on the calling thread: a scan
on Arrow's thread pool can abort the process at interpreter exit (apache/arrow#34314,
delta-io/delta-rs#2184).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["commit_history", "open_table", "read_table"]


def open_table(path: str, version: int | None = None) -> DeltaTable:
    """``DeltaTable(path, version=version)``; a log delta-rs cannot read (its error names
    neither table nor file) raises CorruptTableError naming the path, any other DeltaError
    passes unchanged."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    try:
        return DeltaTable(path, version=version)
    except TableNotFoundError:
        raise
    except DeltaError as exc:
        if version is not None:
            try:
                DeltaTable(path)
            except TableNotFoundError:
                raise exc from None
            except DeltaError:
                pass
            else:
                raise  # the table is sound; that version is the problem
        from gpope.errors import CorruptTableError

        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptTableError(
            f"The Delta table at {path} cannot be read: its log is damaged ({reason[:200]}). "
            "Restore the table's _delta_log from a backup, or re-run the stage that writes it "
            "(for bronze tables: reload the raw data)."
        ) from None


def read_table(table: DeltaTable) -> pa.Table:
    """The whole table, at the version it was opened at, as Arrow (scanned on this thread)."""
    return table.to_pyarrow_dataset().to_table(use_threads=False)


def commit_history(table: DeltaTable) -> list[dict[str, Any]]:
    """The ``commitInfo`` of each commit of ``table`` (plus its ``version``) up to the version
    it was opened at, newest first, as ``DeltaTable.history()`` returns them. The commit files
    are read directly: delta-rs's ``history()`` finds none under a path with ``#`` or ``?``.

    Raises:
        CorruptTableError: a commit file is not valid JSON; the message names table and file.
    """
    uri = table.table_uri
    if not uri.startswith("file:"):
        return table.history()
    from urllib.parse import unquote, urlsplit

    log = Path(unquote(urlsplit(uri).path if uri.startswith("file://") else uri[5:])) / "_delta_log"
    current = table.version()
    versions = sorted((int(n[:20]) for n in os.listdir(log)
                       if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
                       and int(n[:20]) <= current), reverse=True)
    out = []
    for version in versions:
        info = _commit_info(log / f"{version:020d}.json", log.parent)
        out.append({**info, "version": version})
    return out


def _commit_info(path: Path, table: Path) -> dict[str, Any]:
    from gpope.errors import CorruptTableError

    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    action = json.loads(line)
                    if "commitInfo" in action:
                        return dict(action["commitInfo"])
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptTableError(
            f"The Delta table at {table} has a damaged commit file {path.name} ({exc}); restore "
            "the file from a backup, or re-run the stage that writes this table."
        ) from None
    return {}

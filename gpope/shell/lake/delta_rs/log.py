"""Open a local Delta table with delta-rs: its log (damage named in one line), history, Arrow.

Reads into Arrow avoid the at-exit abort of threaded scans.

With deltalake 1.6 and pyarrow 25, ``DeltaTable.to_pyarrow_table()`` scans with Arrow's thread
pool, and about half of the processes that did so abort at interpreter exit ("terminate called
without an active exception", exit 134: a joinable ``std::thread`` destroyed during static
teardown; the same symptom as apache/arrow#34314 and delta-io/delta-rs#2184). A scan on the
calling thread leaves no such thread (abort rates: docs/BENCHMARKS.md, "JVM-free commands"). Every delta-rs read in gpope goes through :func:`read_table`, and every
commit-history read through :func:`commit_history`.
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
    """``DeltaTable(path, version=version)``, with a damaged log reported in one line.

    A truncated or otherwise unreadable commit file makes delta-rs raise a ``DeltaError`` whose
    text (a Rust backtrace) names neither the table nor the file.

    Raises:
        CorruptTableError: the table's log cannot be read; the message names the table's path.
        deltalake.exceptions.DeltaError: any other failure (e.g. ``version`` does not exist),
            unchanged.
    """
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


def commit_history(table: DeltaTable, limit: int | None = None) -> list[dict[str, Any]]:
    """The commit infos of ``table`` up to the version it was opened at, newest first.

    Each is the commit's ``commitInfo`` action (``timestamp``, ``operation``,
    ``operationParameters``, ``userMetadata``...) plus its ``version``, as
    ``DeltaTable.history()`` returns them. For a local table the commit files are read directly:
    delta-rs's own ``history()`` returns no commit at all for a path containing ``#`` or ``?``
    (it reads the log through a URL, where they start a fragment or a query), which made every
    pinned read of such a lake fail as "table does not exist".

    Raises:
        CorruptTableError: a commit file of the table is not valid JSON (truncated or damaged);
            the message names the table and the file.
    """
    uri = table.table_uri
    if not uri.startswith("file:"):
        return table.history(limit)
    from urllib.parse import unquote, urlsplit

    log = Path(unquote(urlsplit(uri).path if uri.startswith("file://") else uri[5:])) / "_delta_log"
    current = table.version()
    versions = sorted((int(n[:20]) for n in os.listdir(log)
                       if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()
                       and int(n[:20]) <= current), reverse=True)
    out = []
    for version in versions[:limit] if limit else versions:
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

"""Where the privacy ledger's rows live: delta-rs on a local lake (no JVM), else the Spark table
layer (Unity Catalog, non-local roots). Both hold the same Delta table (:data:`LEDGER_COLUMNS`).

Every append is one commit that records its rows' identities (``kind/run_id/status``) in the
commit metadata (``gpope.ledger_rows``); :meth:`LedgerStore.rows` returns each row with the
``version`` of the commit that added it (-1 once that commit left the log). The ledger decides
by that commit order, never by ``created_at`` (a writer's clock).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from gpope.core.accounting.budget import UNKNOWN_VERSION, LedgerRow
from gpope.shell.ledger_comments import LEDGER_COMMENTS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig

__all__ = ["LEDGER_COLUMNS", "LEDGER_COMMENTS", "LEDGER_DESCRIPTION", "DeltaRsLedgerStore",
           "LedgerStore", "SparkLedgerStore", "TableLedgerStore", "arrow_schema",
           "open_ledger_store", "released_run_ids", "rows_metadata"]

#: (name, arrow type name, nullable). The first eight are the DESIGN.md contract (NOT NULL).
LEDGER_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("dataset", "string", False),
    ("run_id", "string", False),
    ("mechanism", "string", False),
    ("epsilon", "double", False),
    ("delta", "double", False),
    ("accountant", "string", False),
    ("status", "string", False),
    ("created_at", "timestamp", False),
    ("kind", "string", True),
    ("charged_epsilon", "double", True),
    ("charged_delta", "double", True),
    ("valid_bound", "boolean", True),
    ("actor", "string", True),
    ("process", "string", True),
    ("note", "string", True),
)

LEDGER_DESCRIPTION = (
    "gpope privacy ledger (append-only). Do NOT sum the epsilon column: it mixes budgets, "
    "reservations and status changes. SUM(charged_epsilon) per dataset is the basic spend; "
    "`gpope budget show` / the budget_status view give budget, spent (basic and tight) and "
    "remaining."
)



def arrow_schema() -> pa.Schema:
    """The ledger's Arrow schema (with column comments as field metadata)."""
    import pyarrow as pa

    types = {"string": pa.string(), "double": pa.float64(), "boolean": pa.bool_(),
             "timestamp": pa.timestamp("us", tz="UTC")}
    return pa.schema([
        pa.field(name, types[t], nullable, metadata={"comment": LEDGER_COMMENTS[name]})
        for name, t, nullable in LEDGER_COLUMNS
    ])


#: Commit metadata key holding the JSON list of the identities of the rows a commit adds.
ROWS_KEY = "gpope.ledger_rows"


def _commit_rows(rows: list[dict[str, Any]]) -> str:
    """The commit metadata value for an append of ``rows``."""
    return json.dumps([LedgerRow.from_mapping(r).key for r in rows])


def _versions(history: Iterable[tuple[int, Any]]) -> dict[str, int]:
    """Row identity -> version of the first commit that added it, from (version, metadata)."""
    out: dict[str, int] = {}
    for version, value in history:
        if not value:
            continue
        try:
            keys = json.loads(value)
        except (TypeError, ValueError):
            continue
        for key in keys if isinstance(keys, list) else ():
            if isinstance(key, str):
                out[key] = min(out.get(key, version), int(version))
    return out


def _with_versions(rows: list[dict[str, Any]], versions: dict[str, int]) -> list[dict[str, Any]]:
    for r in rows:
        r["version"] = versions.get(LedgerRow.from_mapping(r).key, UNKNOWN_VERSION)
    return rows


def _naive_utc(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


class LedgerStore(Protocol):
    """Reads all ledger rows and appends new ones atomically."""

    location: str

    def rows(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """All rows (of ``dataset`` when given), ``created_at`` as naive UTC, each with the
        ``version`` of the commit that added it."""
        ...

    def append(self, rows: list[dict[str, Any]]) -> None:
        """Append ``rows`` in one atomic commit that records their identities."""
        ...


def rows_metadata(info: Mapping[str, Any]) -> Any:
    """The ledger-row identities a commit recorded (:data:`ROWS_KEY`), or None: a top-level
    ``commitInfo`` field (delta-rs) or inside the ``userMetadata`` JSON (Spark's Delta)."""
    if ROWS_KEY in info:
        return info[ROWS_KEY]
    from gpope.shell.lake.base import user_metadata_field

    return user_metadata_field(info.get("userMetadata"), ROWS_KEY)


class TableLedgerStore:
    """The ledger through a table store (``exists``, ``read_arrow``, ``history``, ``append_arrow``
    at a location): every row comes back with the version of the commit that added it."""

    def __init__(self, tables: Any, location: str, *, version: int | None = None,
                 create_schema: Any = None) -> None:
        self.location = location
        self._tables = tables
        self._version = version  # read at this version (a pinned snapshot); None: the latest
        self._create_schema = create_schema

    def rows(self, dataset: str | None = None) -> list[dict[str, Any]]:
        """All rows (of ``dataset``), each with the version of the commit that added it."""
        if not self._tables.exists(self.location):
            return []
        data = self._read()
        history = (self._tables.history(self.location) if self._version is None
                   else self._tables.history(self.location, self._version))
        versions = _versions((h.version, rows_metadata(h.info)) for h in history)
        out = []
        for r in data:
            if dataset is not None and r.get("dataset") != dataset:
                continue
            full = {name: r.get(name) for name, _, _ in LEDGER_COLUMNS}
            full["created_at"] = _naive_utc(full["created_at"])
            out.append(full)
        return _with_versions(out, versions)

    def _read(self) -> list[dict[str, Any]]:
        """The table's rows as mappings (the Spark store: its layer's errors as they come)."""
        return self._tables.read_arrow(self.location, self._version).to_pylist()

    def append(self, rows: list[dict[str, Any]]) -> None:
        """One atomic append recording the rows' identities in the commit's metadata; a failure
        (CommitError) commits nothing."""
        import pyarrow as pa

        data = {name: [r.get(name).replace(tzinfo=UTC) if name == "created_at" else r.get(name)
                       for r in rows] for name, _, _ in LEDGER_COLUMNS}
        self._tables.append_arrow(
            self.location, pa.table(data, schema=arrow_schema()),
            create_schema=self._create_schema, merge_schema=True,
            description=LEDGER_DESCRIPTION, commit_metadata={ROWS_KEY: _commit_rows(rows)},
            table_name="the privacy ledger",
        )  # fmt: skip


class DeltaRsLedgerStore(TableLedgerStore):
    """The ledger of a local lake through the JVM-free local tables (delta-rs), under any local
    path (delta-rs encodes it itself)."""

    def __init__(self, path: str, *, version: int | None = None) -> None:
        from gpope.shell.lake.local import local_tables

        super().__init__(local_tables(), path, version=version)

    def _read(self) -> list[dict[str, Any]]:
        """The rows, after the audit of the retained log (:mod:`.ledger_audit`); a missing data
        file or a foreign commit raises CorruptTableError naming the repair."""
        from gpope.errors import GpopeError
        from gpope.shell.pipeline.ledger_audit import audit_log, unreadable

        try:
            data = self._tables.read_arrow(self.location, self._version).to_pylist()
        except GpopeError:
            raise
        except Exception as exc:  # delta-rs / Arrow: a missing or damaged data file
            raise unreadable(self.location, exc) from None
        keys = {LedgerRow.from_mapping({**r, "created_at": None}).key for r in data}
        audit_log(self.location, keys, ROWS_KEY, version=self._version)
        return data

    def append(self, rows: list[dict[str, Any]]) -> None:
        """:meth:`TableLedgerStore.append`, refused (CommitError) before delta-rs writes when the
        table's folders are not writable (a failed upload would end the process in a panic)."""
        import os
        from pathlib import Path

        from gpope.errors import CommitError

        folders = [p for p in (Path(self.location), Path(self.location) / "_delta_log")
                   if p.is_dir()]
        if not folders:
            parent = Path(self.location).parent
            while not parent.is_dir() and parent != parent.parent:
                parent = parent.parent
            folders = [parent]
        locked = [str(p) for p in folders if not os.access(p, os.W_OK | os.X_OK)]
        if locked:
            raise CommitError(
                f"Could not append to the privacy ledger at {self.location}: {locked[0]} is not "
                "writable. This append was not committed; make the lake writable."
            )
        super().append(rows)


class SparkLedgerStore(TableLedgerStore):
    """The ledger through the Spark table layer's store (Unity Catalog names, non-local roots;
    native Delta where the Delta classes load, else delta-rs under Spark)."""

    def __init__(self, spark: SparkSession, config: GpopeConfig) -> None:
        from gpope.shell.lake.layer import Lake
        from gpope.shell.lake.names import TableRef
        from gpope.shell.schemas import PRIVACY_LEDGER

        lake = Lake.from_settings(spark, config.lake)
        self.storage = lake.storage
        super().__init__(lake.store, lake.location(TableRef.shared("privacy_ledger")),
                         create_schema=PRIVACY_LEDGER)


def _local_path(config: GpopeConfig, table: str) -> str | None:
    from gpope.shell.lake.names import TableRef, local_root, table_path

    if config.lake.catalog is not None:
        return None
    if local_root(str(config.lake.root)) is None:
        return None
    return table_path(config.lake.root, TableRef.shared(table))


def _local_path_of(config: GpopeConfig, layer: str, dataset: str, table: str) -> str | None:
    from gpope.shell.lake.names import TableRef, local_root, table_path

    if config.lake.catalog is not None or local_root(str(config.lake.root)) is None:
        return None
    return table_path(config.lake.root, TableRef(layer, table, dataset))  # type: ignore[arg-type]


def open_ledger_store(config: GpopeConfig, spark: SparkSession | None = None) -> LedgerStore:
    """The ledger store for ``config``'s lake: delta-rs on a local lake, else Spark (started only
    then)."""
    path = _local_path(config, "privacy_ledger")
    if path is not None:
        return DeltaRsLedgerStore(path)
    if spark is None:
        from gpope.shell.spark import get_spark

        spark = get_spark(config.spark)
    return SparkLedgerStore(spark, config)


def released_run_ids(config: GpopeConfig, run_ids: set[str],
                     spark: SparkSession | None = None) -> set[str]:
    """Which of ``run_ids`` have a released_estimates row visible through the ``pipeline_runs``
    manifest: a row whose manifest was never committed is no release (reconcile settles that
    run ``failed``, still counted)."""
    if not run_ids:
        return set()
    from gpope.errors import TableNotFoundError
    from gpope.shell.lake import TableRef
    from gpope.shell.lake.manifest import read_pinned_arrow

    ref = TableRef.shared("released_estimates")
    if _local_path(config, "released_estimates") is not None:
        table = read_pinned_arrow(config.lake, ref)
        ids = [] if table is None else table.column("run_id").to_pylist()
        return run_ids & set(ids)
    from pyspark.sql import functions as F

    from gpope.shell.lake import Lake
    from gpope.shell.lake.manifest import read_pinned

    if spark is None:
        from gpope.shell.spark import get_spark

        spark = get_spark(config.spark)
    try:
        df, _ = read_pinned(Lake.from_settings(spark, config.lake), ref)
    except TableNotFoundError:
        return set()
    found = df.where(F.col("run_id").isin(sorted(run_ids))).select("run_id").collect()
    return {r.run_id for r in found}

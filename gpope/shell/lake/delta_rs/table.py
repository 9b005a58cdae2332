"""The Delta log of a local table through delta-rs alone (no Spark, no JVM).

:class:`DeltaRsTables` is the JVM-free half of the delta-rs store: what the driver needs of a
local table without a Spark session; :class:`~gpope.shell.lake.delta_rs.store.DeltaRsStore` adds
Spark reads and writes on top. Tables are opened through :mod:`gpope.shell.lake.delta_rs.log`.
"""

from __future__ import annotations

import datetime as dt
import json
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError, ConfigError
from gpope.shell.lake.base import (
    HistoryEntry,
    MissingTableError,
    decode_user_metadata,
    decode_user_metadata_run,
    sql_in,
)
from gpope.shell.lake.delta_rs.log import commit_history, open_table, read_table

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pds
    from deltalake import DeltaTable
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

__all__ = ["CATALOG_REFUSAL", "DeltaRsTables", "check_local_root", "local_file_path"]

CATALOG_REFUSAL = (
    "Unity Catalog tables need the native Delta path, but the Delta classes do not load in this "
    "Spark session (or storage 'delta-rs' was forced). Run on a cluster with Delta Lake, or drop "
    "catalog/schema to use a path lake."
)

# Characters delta-rs (1.x) cannot address in a local path: it panics on ``[ ] | ^`` ("invalid
# object store url"), decodes ``%XX`` a second time and treats ``\`` as a separator.
_UNADDRESSABLE = ("[", "]", "|", "^", "\\")

_UNSUPPORTED_READER_FEATURES = ("columnMapping", "deletionVectors")



def check_local_root(root: str) -> str:
    """Return ``root`` if delta-rs can address every table under it, else raise ConfigError.

    Spaces, non-ASCII letters, ``#``, ``?``, ``{``, ``:``, quotes... all work. delta-rs cannot
    address ``[ ] | ^ \\``, control characters, or ``%`` followed by two hex digits (it
    decodes them): such a root is refused before anything is written.
    """
    import re

    existing = Path(root)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise ConfigError(
            f"The lake root {root!r} cannot be a directory: {str(existing)!r} is a file. Pass a "
            "directory (or a path that does not exist yet) as --lake."
        )
    bad = sorted({c for c in root if c in _UNADDRESSABLE or ord(c) < 32 or ord(c) == 127})
    escapes = re.findall(r"%[0-9A-Fa-f]{2}", root)
    if bad or escapes:
        shown = ", ".join(repr(c) for c in [*bad, *escapes])
        raise ConfigError(
            f"The lake root {root!r} contains {shown}, which the delta-rs storage path cannot "
            "address (Delta file paths are URLs). Choose a lake directory without these "
            "characters (spaces, accents and '#' are fine)."
        )
    return root



def local_file_path(uri: str) -> str:
    """The local path of a file URI as delta-rs returns it (``file://`` or a bare encoded path)."""
    if uri.startswith("file://"):
        uri = urllib.parse.urlsplit(uri).path
    elif uri.startswith("file:"):
        uri = uri[len("file:") :]
    return urllib.parse.unquote(uri)



class DeltaRsTables:
    """Local Delta tables through delta-rs: the log, small Arrow reads and appends (``spark``
    None for JVM-free use)."""

    name = "delta-rs"

    def __init__(self, spark: SparkSession | None = None, *, by_name: bool = False) -> None:
        if by_name:
            raise ConfigError(CATALOG_REFUSAL)
        self._spark = spark

    # ------------------------------------------------------------------ the log
    def exists(self, path: str) -> bool:
        from deltalake import DeltaTable

        return bool(DeltaTable.is_deltatable(path))

    def open(self, path: str, version: int | None = None) -> DeltaTable:
        """The table at ``path`` (as of ``version``), freshly loaded.

        Raises:
            MissingTableError: no Delta table at ``path``.
            ConfigError: ``version`` does not exist, or the table uses an unsupported feature.
        """
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError, TableNotFoundError

        if not self.exists(path):
            raise MissingTableError(path)
        try:
            table = open_table(path, version=version)
        except TableNotFoundError as exc:
            raise MissingTableError(path) from exc
        except DeltaError as exc:
            latest = DeltaTable(path).version()
            raise ConfigError(
                f"Delta table {path} has versions 0..{latest}; version {version!r} cannot be "
                f"loaded ({exc})."
            ) from exc
        protocol = table.protocol()
        features = set(protocol.reader_features or ())
        unsupported = sorted(features.intersection(_UNSUPPORTED_READER_FEATURES))
        if protocol.min_reader_version == 2 or unsupported:
            raise ConfigError(
                f"Delta table {path} uses reader features {unsupported or ['columnMapping']}, "
                "which the delta-rs storage path cannot read with Spark; use lake storage "
                "'native' on a cluster with Delta Lake."
            )
        return table

    def version(self, path: str) -> int:
        return int(self.open(path).version())

    def history(self, path: str, version: int | None = None) -> list[HistoryEntry]:
        """The commits of the table at ``path`` (up to ``version``, default all), oldest first."""
        entries = []
        for commit in commit_history(self.open(path, version)):
            parameters = {
                str(k): v if isinstance(v, str) else json.dumps(v)
                for k, v in (commit.get("operationParameters") or {}).items()
            }
            entries.append(
                HistoryEntry(
                    version=int(commit["version"]),
                    timestamp=dt.datetime.fromtimestamp(commit["timestamp"] / 1000, tz=dt.UTC),
                    operation=str(commit.get("operation", "")),
                    mode=decode_user_metadata(commit.get("userMetadata")),
                    parameters=parameters,
                    run_id=decode_user_metadata_run(commit.get("userMetadata")),
                    info=dict(commit),
                )
            )
        return sorted(entries, key=lambda e: e.version)

    def schema(self, table: DeltaTable) -> StructType:
        """The table's schema as a Spark StructType (Delta's schema JSON is Spark's)."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(table.schema().to_json()))

    def arrow_schema(self, contract: StructType) -> pa.Schema:
        """The Arrow schema delta-rs writes for a table contract (its Delta schema)."""
        import pyarrow as pa
        from deltalake import Schema

        return pa.schema(Schema.from_json(contract.json()).to_arrow())

    def live_paths(self, path: str) -> set[str]:
        """The decoded paths (relative to the table) of the table's live files."""
        import pyarrow as pa

        live = pa.table(self.open(path).get_add_actions(flatten=True)).column("path").to_pylist()
        return {urllib.parse.unquote(p) for p in live}

    def has_partition(self, path: str, column: str, value: str) -> bool:
        """True when a live file of the table holds partition ``column`` = ``value``, or the
        table is not partitioned by ``column``."""
        table = self.open(path)
        if column not in table.metadata().partition_columns:
            return True
        actions = table.get_add_actions(flatten=True)
        names = [n for n in actions.schema.names
                 if n in (f"partition.{column}", f"partition_values.{column}")]
        if not names:
            return True
        return value in set(actions.column(names[0]).to_pylist())

    # ------------------------------------------------------------------ Arrow
    def read_arrow(self, path: str, version: int | None = None) -> pa.Table:
        """The table at ``path`` (as of ``version``) as an Arrow table, read by delta-rs alone."""
        return read_table(self.open(path, version))

    def arrow_dataset(self, path: str, version: int | None = None) -> pds.Dataset:
        """The table (as of ``version``) as a lazy pyarrow dataset (for DuckDB and Polars)."""
        return self.open(path, version).to_pyarrow_dataset()

    def column_comments(self, path: str, version: int | None = None) -> dict[str, str]:
        """The column comments of the table's schema (column -> comment)."""
        comments = {}
        for f in self.open(path, version).schema().fields:
            comment = (f.metadata or {}).get("comment")
            if isinstance(comment, str) and comment:
                comments[f.name] = comment
        return comments

    def append_arrow(
        self,
        path: str,
        data: pa.Table,
        *,
        create_schema: StructType | None = None,
        merge_schema: bool = False,
        description: str | None = None,
        commit_metadata: Mapping[str, str] | None = None,
        table_name: str,
    ) -> int:
        """Append ``data`` in one atomic commit; return the table version it created. With
        ``create_schema`` a missing table is first created empty (concurrent creators race
        safely); ``commit_metadata`` goes into the commit's ``commitInfo``.

        Raises:
            CommitError: the commit failed (nothing was committed).
        """
        from deltalake import CommitProperties, DeltaTable, Schema, write_deltalake
        from deltalake.exceptions import DeltaError

        properties = (CommitProperties(custom_metadata=dict(commit_metadata))
                      if commit_metadata else None)
        try:
            Path(path).mkdir(parents=True, exist_ok=True)
            if create_schema is not None and not self.exists(path):
                try:
                    DeltaTable.create(path, schema=Schema.from_json(create_schema.json()),
                                      mode="ignore")
                except DeltaError:  # another writer created it first
                    pass
            write_deltalake(path, data, mode="append",
                            schema_mode="merge" if merge_schema else None,
                            description=description, commit_properties=properties)
        except (DeltaError, OSError) as exc:
            raise CommitError(
                f"Could not append to {table_name} at {path}: {exc}. Nothing was committed; "
                "check that the lake is writable."
            ) from exc
        return self.version(path)

    def delete_rows(
        self, path: str, column: str, values: set[str], *, user_metadata: str, table_name: str
    ) -> int | None:
        """Remove every row whose ``column`` is in ``values`` in one commit; its version, or
        None when no live row matched (CommitError: nothing was removed)."""
        import pyarrow.compute as pc
        from deltalake import CommitProperties
        from deltalake.exceptions import DeltaError

        if not values or not self.exists(path):
            return None
        table = self.open(path)
        data = table.to_pyarrow_dataset().to_table(columns=[column], use_threads=False)
        if not pc.any(pc.is_in(data.column(column), value_set=_strings(values))).as_py():
            return None
        try:
            table.delete(sql_in(column, values),
                         commit_properties=CommitProperties(
                             custom_metadata={"userMetadata": user_metadata}))
        except DeltaError as exc:
            raise CommitError(
                f"Could not remove the rows of {sorted(values)} from {table_name} at {path}: "
                f"{exc}. Nothing was removed; run the command again."
            ) from exc
        return self.version(path)

    # ------------------------------------------------------------------ maintenance
    def file_count(self, path: str) -> int:
        return len(self.open(path).file_uris())

    def compact(self, path: str) -> None:
        """Rewrite small files into larger ones (delta-rs OPTIMIZE; content unchanged)."""
        self.open(path).optimize.compact()

    def vacuum(self, path: str, *, retention_hours: float, dry_run: bool) -> list[str]:
        """Delete (or, with ``dry_run``, list) files unreferenced for ``retention_hours``."""
        return list(self.open(path).vacuum(
            retention_hours=int(retention_hours), dry_run=dry_run,
            enforce_retention_duration=False, full=True,
        ))  # fmt: skip


def _strings(values: set[str]) -> Any:
    import pyarrow as pa

    return pa.array(sorted(values), type=pa.string())

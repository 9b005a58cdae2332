"""Delta tables without the Delta JARs: Spark writes Parquet, delta-rs commits it.

Write protocol (one call = one atomic Delta commit):

1. The DataFrame is conformed to the contract (:mod:`gpope.shell.lake.contract`).
2. Spark writes Parquet in parallel into a fresh folder of the table directory,
   ``<table>/gpope-<utc time>-<random>/``, so concurrent or earlier files are never clobbered.
   Timestamps are written as ``TIMESTAMP_MICROS`` (UTC), the Delta encoding.
3. The driver flattens Spark's Hive partition folders (``col=value/``) into that folder: the
   partition values are read from the folder names and recorded in the add actions (the Delta
   log, not the layout, is where partition values live), and file paths keep only the characters
   ``[A-Za-z0-9._-/]``, for which every Delta reader agrees on the path encoding.
4. Each file's footer is checked (its columns and types must equal the table's data columns:
   a commit of add actions does not check this by itself) and gives ``numRecords`` and
   ``nullCount`` statistics.
5. The driver loads the table *fresh*, computes the files to remove (all live files for
   ``overwrite``, the live files of the ``replace_where`` partitions, none for ``append``) and
   commits adds and removes in one transaction that refuses to land on a newer version than the
   one it read (``max_commit_retries=0``). If another writer committed in between, it reloads,
   recomputes the remove set and tries again, so a concurrent append is never kept by an
   overwrite that did not see it.
6. If anything before the commit fails, the new folder is deleted: no stray files, and none of
   them is ever live.

Reads list the live files of a version with delta-rs, group them by partition values, read each
group with ``spark.read.parquet`` under the table's schema and add the partition columns back as
literals, so reads never depend on the file layout. This backend supports local lake roots only.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError, ConfigError, DataError, SchemaError
from gpope.shell.lake.base import (
    HistoryEntry,
    WriteMode,
    decode_user_metadata,
    partition_string,
)
from gpope.shell.lake.contract import NULL_GUARD_MARKER, conform

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["DeltaRsStore", "MissingTableError"]

_MAX_COMMIT_ATTEMPTS = 8
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_PARTITION_TYPES = ("string", "tinyint", "smallint", "int", "bigint", "boolean", "date")
_UNSUPPORTED_READER_FEATURES = ("columnMapping", "deletionVectors")


class MissingTableError(LookupError):
    """Internal: the location holds no Delta table (the table layer turns it into a user error)."""


@dataclass(frozen=True)
class _StagedFile:
    path: str  # relative to the table root, safe characters only
    size: int
    modification_time: int  # ms since epoch
    partition_values: dict[str, str | None]
    num_records: int
    stats: str


class DeltaRsStore:
    """Read and write path-based Delta tables with Spark for data and delta-rs for the log.

    Args:
        spark: the session that reads and writes the Parquet files.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark

    # ------------------------------------------------------------------ metadata
    def exists(self, path: str) -> bool:
        """True when ``path`` holds a Delta table."""
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
            table = DeltaTable(path, version=version)
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
        """The latest version of the table at ``path``."""
        return int(self.open(path).version())

    def history(self, path: str) -> list[HistoryEntry]:
        """All commits of the table at ``path``, oldest first."""
        entries = []
        for commit in self.open(path).history():
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
                )
            )
        return sorted(entries, key=lambda e: e.version)

    def schema(self, table: DeltaTable) -> StructType:
        """The table's schema as a Spark StructType (Delta's schema JSON is Spark's)."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(table.schema().to_json()))

    # ------------------------------------------------------------------ reads
    def read(self, path: str, version: int | None = None) -> DataFrame:
        """The table at ``path`` (as of ``version``) as a lazy Spark DataFrame.

        Guarantees: the table's columns in the table's order; partition columns restored from
        the log with their declared types; an empty table reads as an empty DataFrame.
        """
        from pyspark.sql import functions as F

        table = self.open(path, version)
        schema = self.schema(table)
        partition_columns = list(table.metadata().partition_columns)
        data_schema = _without(schema, partition_columns)
        types = {f.name: f.dataType for f in schema.fields}
        if partition_columns:
            groups = [
                (
                    part,
                    table.file_uris(
                        file_pruning_predicate=[
                            (c, "=", "" if part.get(c) is None else part[c])
                            for c in partition_columns
                        ]
                    ),
                )
                for part in table.partitions()
            ]
        else:
            groups = [({}, table.file_uris())]
        frames = []
        for part, uris in groups:
            if not uris:
                continue
            frame = (
                self._spark.read.schema(data_schema)
                .option("recursiveFileLookup", "true")  # no partition inference from paths
                .parquet(*uris)
            )
            for column in partition_columns:
                frame = frame.withColumn(column, F.lit(part.get(column)).cast(types[column]))
            frames.append(frame.select(*[f"`{f.name}`" for f in schema.fields]))
        if not frames:  # an empty Arrow table: a local relation, no Python worker needed
            from pyspark.sql.pandas.types import to_arrow_schema

            return self._spark.createDataFrame(to_arrow_schema(schema).empty_table(), schema)
        return reduce(lambda a, b: a.union(b), frames)

    def read_arrow(self, path: str, version: int | None = None) -> pa.Table:
        """The table at ``path`` (as of ``version``) as an Arrow table, read by delta-rs alone."""
        return self.open(path, version).to_pyarrow_table()

    # ------------------------------------------------------------------ writes
    def write(
        self,
        df: DataFrame,
        path: str,
        *,
        schema: StructType,
        mode: WriteMode,
        partition_by: list[str] | None,
        replace_where: Mapping[str, str | None] | None,
        user_metadata: str,
        table_name: str,
    ) -> int:
        """Write ``df`` to the table at ``path`` in one atomic commit; return the new version.

        Args:
            df: the rows to write.
            path: local table directory.
            schema: the table contract.
            mode: ``append``, ``overwrite`` (replace all rows) or ``replace_where``.
            partition_by: partition columns; None keeps the table's (or none for a new table).
            replace_where: for ``replace_where``: partition column -> Delta partition string.
            user_metadata: recorded as the commit's ``userMetadata``.
            table_name: the logical table, for messages.

        Raises:
            SchemaError: the DataFrame, the existing table or a written file does not match the
                contract, or a NOT NULL column holds nulls. Nothing was committed.
            DataError: rows outside the ``replace_where`` partition. Nothing was committed.
            CommitError: Spark could not write the files or the commit failed. Nothing was
                committed and the written files were deleted.
        """
        existing = self.open(path) if self.exists(path) else None
        partitions = self._check_table(existing, path, schema, partition_by, table_name)
        if replace_where is not None:
            unknown = sorted(set(replace_where) - set(partitions))
            if unknown or not replace_where:
                raise ConfigError(
                    f"replace_where on {table_name} must name partition columns {partitions}; "
                    f"got {sorted(replace_where)}. Partition the table by the columns a job "
                    "replaces (partition_by=...)."
                )
        conformed = conform(df, schema, table=table_name)
        root = Path(path)
        folder = f"gpope-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:12]}"
        staging = root / folder
        try:
            self._write_parquet(conformed, staging, partitions, table_name)
            files = _stage_files(root, folder, partitions, _without(schema, partitions), table_name)
            if replace_where is not None:
                _check_replace_where(files, replace_where, table_name)
            return self._commit(
                path, files, schema, partitions, mode, replace_where, user_metadata, table_name
            )
        except Exception:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def _check_table(
        self,
        table: DeltaTable | None,
        path: str,
        schema: StructType,
        partition_by: list[str] | None,
        table_name: str,
    ) -> list[str]:
        """Validate the existing table against the contract; return the partition columns."""
        if table is None:
            partitions = list(partition_by or [])
            types = {f.name: f.dataType.simpleString() for f in schema.fields}
            bad = [c for c in partitions if types.get(c) not in _PARTITION_TYPES]
            if bad or len(set(partitions)) != len(partitions):
                raise ConfigError(
                    f"partition_by={partitions} of {table_name} must name distinct contract "
                    f"columns of type {', '.join(_PARTITION_TYPES)}; bad: {bad}."
                )
            return partitions
        current = self.schema(table)
        if _shape(current) != _shape(schema):
            raise SchemaError(
                f"Delta table {path} ({table_name}) has schema {_describe(current)}, but the "
                f"contract is {_describe(schema)}. Migrate the table, or delete it and rerun the "
                "stage that writes it."
            )
        partitions = list(table.metadata().partition_columns)
        if partition_by is not None and list(partition_by) != partitions:
            raise SchemaError(
                f"Delta table {path} ({table_name}) is partitioned by {partitions}; the write "
                f"asked for {list(partition_by)}. Use the table's partitioning."
            )
        return partitions

    def _write_parquet(
        self, df: DataFrame, staging: Path, partitions: list[str], table_name: str
    ) -> None:
        conf = self._spark.conf
        key = "spark.sql.parquet.outputTimestampType"
        previous = conf.get(key, None)
        conf.set(key, "TIMESTAMP_MICROS")
        try:
            writer = df.write.mode("errorifexists")
            if partitions:
                writer = writer.partitionBy(*partitions)
            writer.parquet(staging.as_uri())
        except Exception as exc:
            message = str(exc)
            if NULL_GUARD_MARKER in message:
                column = message.split(NULL_GUARD_MARKER, 1)[1].split()[0]
                raise SchemaError(
                    f"Column {column!r} of {table_name} is NOT NULL in the contract, but the "
                    "DataFrame has null values there. Fix or filter the rows in the producing "
                    "job. Nothing was committed."
                ) from exc
            raise CommitError(
                f"Spark could not write the Parquet files of {table_name} "
                f"({type(exc).__name__}: {message.splitlines()[0] if message else ''}). "
                "Nothing was committed."
            ) from exc
        finally:
            if previous is None:
                conf.unset(key)
            else:
                conf.set(key, previous)

    def _commit(
        self,
        path: str,
        files: list[_StagedFile],
        schema: StructType,
        partitions: list[str],
        mode: WriteMode,
        replace_where: Mapping[str, str | None] | None,
        user_metadata: str,
        table_name: str,
    ) -> int:
        from deltalake import Schema
        from deltalake.transaction import (
            AddAction,
            CommitProperties,
            create_table_with_add_actions,
        )

        adds = [
            AddAction(f.path, f.size, f.partition_values, f.modification_time, True, f.stats)
            for f in files
        ]
        properties = CommitProperties(
            custom_metadata={"userMetadata": user_metadata}, max_commit_retries=0
        )
        last_error: Exception | None = None
        for attempt in range(_MAX_COMMIT_ATTEMPTS):
            if attempt:
                time.sleep(min(0.05 * 2**attempt, 1.0))
            if not self.exists(path):
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
                    if self._is_live(path, adds):  # the commit landed; a later step failed
                        return self.version(path)
                    if self.exists(path):  # another writer created it first: write into it
                        last_error = exc
                        continue
                    raise _commit_error(table_name, path, exc) from exc
            table = self.open(path)  # fresh: the remove set must see every concurrent commit
            self._check_table(table, path, schema, partitions, table_name)
            read_version = int(table.version())
            removes = _removes(table, mode, partitions, replace_where)
            try:
                table.create_write_transaction(
                    [*adds, *removes],
                    mode="append",
                    schema=table.schema(),
                    partition_by=partitions,
                    commit_properties=properties,
                )
                return read_version + 1
            except Exception as exc:
                if self._is_live(path, adds):
                    return self.version(path)
                if self.version(path) > read_version:  # lost a race: reload and retry
                    last_error = exc
                    continue
                raise _commit_error(table_name, path, exc) from exc
        raise CommitError(
            f"Could not commit to {table_name} at {path}: other writers committed first "
            f"{_MAX_COMMIT_ATTEMPTS} times in a row ({last_error}). Nothing was committed; "
            "retry when the concurrent jobs have finished."
        )

    def _is_live(self, path: str, adds: list[Any]) -> bool:
        if not adds or not self.exists(path):
            return False
        import pyarrow as pa

        live = set(
            pa.table(self.open(path).get_add_actions(flatten=True)).column("path").to_pylist()
        )
        return adds[0].path in live


def _commit_error(table_name: str, path: str, exc: Exception) -> CommitError:
    return CommitError(
        f"The Delta commit to {table_name} at {path} failed ({type(exc).__name__}: {exc}). "
        "Nothing was committed and the new files were deleted."
    )


def _without(schema: StructType, columns: list[str]) -> StructType:
    from pyspark.sql.types import StructType

    return StructType([f for f in schema.fields if f.name not in set(columns)])


def _shape(schema: StructType) -> list[tuple[str, Any, bool]]:
    """Names, types and nullability (column metadata such as comments is not part of the contract)."""
    return [(f.name, f.dataType.jsonValue(), f.nullable) for f in schema.fields]


def _describe(schema: StructType) -> str:
    return ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' not null'}"
        for f in schema.fields
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


def _stage_files(
    root: Path, folder: str, partitions: list[str], data_schema: StructType, table_name: str
) -> list[_StagedFile]:
    """Flatten Spark's output folder, check every file's footer, build the add-action records."""
    import pyarrow.parquet as pq

    staging = root / folder
    found: list[tuple[Path, dict[str, str | None]]] = []
    for directory, _, names in os.walk(staging):
        for name in names:
            file = Path(directory) / name
            if not name.endswith(".parquet") or name.startswith((".", "_")):
                file.unlink()  # _SUCCESS, .crc checksums
                continue
            found.append((file, _partition_values(file.parent.relative_to(staging), partitions)))
    expected = [(f.name, _spark_type_key(f.dataType)) for f in data_schema.fields]
    staged = []
    for index, (file, values) in enumerate(sorted(found)):
        metadata = pq.read_metadata(file)
        arrow_schema = metadata.schema.to_arrow_schema()
        got = [(f.name, _arrow_type_key(f.type)) for f in arrow_schema]
        if got != expected:
            raise SchemaError(
                f"A Parquet file written for {table_name} has columns {got}, but the table's "
                f"data columns are {expected}. Nothing was committed."
            )
        if metadata.num_rows == 0:
            file.unlink()
            continue
        target = staging / f"{index:05d}-{file.name}"
        file.rename(target)
        stat = target.stat()
        staged.append(
            _StagedFile(
                path=f"{folder}/{target.name}",
                size=stat.st_size,
                modification_time=int(stat.st_mtime * 1000),
                partition_values=values,
                num_records=metadata.num_rows,
                stats=_stats(metadata, arrow_schema),
            )
        )
    for directory, _, _ in sorted(os.walk(staging), key=lambda t: -len(t[0])):
        if Path(directory) != staging:
            os.rmdir(directory)  # now-empty partition folders
    for file in staged:
        if urllib.parse.quote(file.path, safe="/") != file.path:  # pragma: no cover
            raise CommitError(f"Unsafe file name {file.path!r} in {table_name}.")
    return staged


def _partition_values(relative: Path, partitions: list[str]) -> dict[str, str | None]:
    parts = [p for p in relative.parts if p not in ("", ".")]
    names = [p.split("=", 1)[0] for p in parts]
    if names != partitions:
        raise CommitError(
            f"Spark wrote a file under {relative}, which does not match the partition columns "
            f"{partitions}. Nothing was committed."
        )
    values: dict[str, str | None] = {}
    for part in parts:
        name, raw = part.split("=", 1)
        values[name] = None if raw == _HIVE_NULL else urllib.parse.unquote(raw)
    return values


def _check_replace_where(
    files: list[_StagedFile], replace_where: Mapping[str, str | None], table_name: str
) -> None:
    for file in files:
        outside = {
            c: file.partition_values.get(c)
            for c, v in replace_where.items()
            if file.partition_values.get(c) != v
        }
        if outside:
            raise DataError(
                f"The rows written to {table_name} with replace_where={dict(replace_where)} "
                f"include rows with {outside}; a replace_where write may only contain rows of the "
                "partition it replaces. Nothing was committed."
            )


def _stats(metadata: Any, arrow_schema: pa.Schema) -> str:
    """Delta file statistics: ``numRecords`` and, for flat columns, ``nullCount``."""
    import pyarrow as pa

    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    null_count: dict[str, int] = {}
    for field in arrow_schema:
        if pa.types.is_nested(field.type) or field.name not in paths:
            continue
        column, total = paths[field.name], 0
        for group in range(metadata.num_row_groups):
            column_stats = metadata.row_group(group).column(column).statistics
            if column_stats is None or not column_stats.has_null_count:
                break
            total += column_stats.null_count
        else:
            null_count[field.name] = total
    if null_count:
        stats["nullCount"] = null_count
    return json.dumps(stats)


def _spark_type_key(dtype: Any) -> str:
    """A canonical type string (no nullability, no list field names) of a Spark type."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, ArrayType):
        return f"array<{_spark_type_key(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"map<{_spark_type_key(dtype.keyType)},{_spark_type_key(dtype.valueType)}>"
    if isinstance(dtype, StructType):
        return (
            "struct<"
            + ",".join(f"{f.name}:{_spark_type_key(f.dataType)}" for f in dtype.fields)
            + ">"
        )
    return {
        "timestamp": "timestamp[us,UTC]",
        "timestamp_ntz": "timestamp[us]",
        "tinyint": "int8",
        "smallint": "int16",
        "int": "int32",
        "bigint": "int64",
        "float": "float",
        "double": "double",
        "boolean": "bool",
        "string": "string",
        "binary": "binary",
        "date": "date32",
    }.get(dtype.simpleString(), dtype.simpleString())


def _arrow_type_key(dtype: pa.DataType) -> str:
    """The same canonical string for an Arrow type read from a Parquet footer."""
    import pyarrow as pa

    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return f"array<{_arrow_type_key(dtype.value_type)}>"
    if pa.types.is_map(dtype):
        return f"map<{_arrow_type_key(dtype.key_type)},{_arrow_type_key(dtype.item_type)}>"
    if pa.types.is_struct(dtype):
        return "struct<" + ",".join(f"{f.name}:{_arrow_type_key(f.type)}" for f in dtype) + ">"
    if pa.types.is_timestamp(dtype):
        tz = "UTC" if dtype.tz in ("UTC", "+00:00", "Etc/UTC") else dtype.tz
        return f"timestamp[{dtype.unit}{',' + tz if tz else ''}]"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "binary"
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    return {"float32": "float", "float64": "double"}.get(str(dtype), str(dtype))

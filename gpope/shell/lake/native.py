"""Delta tables through Spark's own ``delta`` format (a cluster with Delta Lake, e.g. Databricks).

Each operation is a thin delta-spark call; Delta itself makes every write one atomic commit, keeps
``replaceWhere`` writes inside their partition and enforces NOT NULL columns. Tables are addressed
by path or, with Unity Catalog, by name (``by_name=True``).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError, ConfigError, SchemaError
from gpope.shell.lake.base import (
    HistoryEntry,
    MissingTableError,
    PartitionValue,
    WriteSpec,
    columns_to_add,
    decode_user_metadata,
    decode_user_metadata_run,
    replace_where_sql,
    spark_write_cause,
    sql_in,
)
from gpope.shell.lake.contract import NULL_GUARD_MARKER, conform

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["COMMIT_TOKEN_KEY", "BufferedArrowWriter", "NativeStore", "own_commit_version",
           "with_commit_token"]

COMMIT_TOKEN_KEY = "gpope.commit"
_DELTA_LOADS: weakref.WeakKeyDictionary[SparkSession, bool] = weakref.WeakKeyDictionary()


def with_commit_token(user_metadata: str) -> tuple[str, str]:
    """``user_metadata`` with a fresh random commit token added; returns (metadata, token): the
    token identifies this write's commit whatever other writers commit around it."""
    token = uuid.uuid4().hex
    try:
        payload = json.loads(user_metadata) if user_metadata else {}
    except ValueError:
        payload = {"text": user_metadata}
    if not isinstance(payload, dict):
        payload = {"value": payload}
    payload[COMMIT_TOKEN_KEY] = token
    return json.dumps(payload, sort_keys=True), token


def own_commit_version(history: Iterable[tuple[int, object]], token: str) -> int:
    """The version of the one commit of ``history`` (``(version, userMetadata)``, any order)
    whose ``userMetadata`` carries ``token`` (CommitError: none, or several)."""
    versions = []
    for version, metadata in history:
        if not isinstance(metadata, str):
            continue
        try:
            payload = json.loads(metadata)
        except ValueError:
            continue
        if isinstance(payload, dict) and payload.get(COMMIT_TOKEN_KEY) == token:
            versions.append(int(version))
    if len(versions) != 1:
        raise CommitError(
            f"The write's commit (token {token}) appears {len(versions)} times in the table "
            "history; expected once. Check the table's history (DESCRIBE HISTORY)."
        )
    return versions[0]


class NativeStore:
    """Read and write Delta tables with delta-spark (``by_name``: locations are Unity Catalog
    names, else paths)."""

    name = "native"

    def __init__(self, spark: SparkSession | None, *, by_name: bool = False) -> None:
        if spark is None:
            raise ConfigError("The native Delta store runs in a Spark session; pass one.")
        self._spark = spark
        self._by_name = by_name

    @classmethod
    def available(cls, spark: SparkSession) -> bool:
        """Whether the Delta classes load in ``spark``'s JVM, detected once per session."""
        from gpope.shell.spark import delta_available

        try:
            cached = _DELTA_LOADS.get(spark)
        except TypeError:  # pragma: no cover - a session type without weak references
            return delta_available(spark)
        if cached is None:
            cached = _DELTA_LOADS[spark] = delta_available(spark)
        return cached

    @classmethod
    def check_lake(cls, spark: SparkSession, root: str, *, local: bool, by_name: bool) -> None:
        """Any root or Unity Catalog schema works where the Delta classes load."""

    def _sql_target(self, location: str) -> str:
        return location if self._by_name else "delta.`" + location.replace("`", "``") + "`"

    def exists(self, location: str) -> bool:
        if self._by_name:
            return bool(self._spark.catalog.tableExists(location))
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self._spark, location))

    def _require(self, location: str) -> None:
        if not self.exists(location):
            raise MissingTableError(location)

    def read(self, location: str, version: int | None = None) -> DataFrame:
        self._require(location)
        reader = self._spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", int(version))
        return reader.table(location) if self._by_name else reader.load(location)

    def read_arrow(self, location: str, version: int | None = None) -> pa.Table:
        return self.read(location, version).toArrow()

    def data_files(self, location: str, version: int | None = None,
                   partition: Mapping[str, PartitionValue] | None = None) -> None:
        """None: the files are Delta's business (deletion vectors, column mapping...); callers
        read :meth:`read`."""
        return None

    def history(self, location: str) -> list[HistoryEntry]:
        self._require(location)
        rows = self._spark.sql(f"DESCRIBE HISTORY {self._sql_target(location)}").collect()
        entries = []
        for row in rows:
            stamp = row["timestamp"]
            if stamp.tzinfo is None:  # session time zone is UTC (gpope.shell.spark)
                stamp = stamp.replace(tzinfo=dt.UTC)
            parameters = {
                str(k): v if isinstance(v, str) else json.dumps(v)
                for k, v in (row["operationParameters"] or {}).items()
            }
            entries.append(
                HistoryEntry(
                    version=int(row["version"]),
                    timestamp=stamp,
                    operation=str(row["operation"]),
                    mode=decode_user_metadata(row["userMetadata"]),
                    parameters=parameters,
                    run_id=decode_user_metadata_run(row["userMetadata"]),
                    info={"userMetadata": row["userMetadata"]},
                )
            )
        return sorted(entries, key=lambda e: e.version)

    def version(self, location: str) -> int:
        """The latest version (whoever committed it; a write returns its own version)."""
        self._require(location)
        target = self._sql_target(location)
        return int(self._spark.sql(f"DESCRIBE HISTORY {target} LIMIT 1").collect()[0]["version"])

    def write(self, df: DataFrame, location: str, spec: WriteSpec) -> int:
        """Write ``df`` in one Delta commit; return the table's version right after it.

        Raises:
            SchemaError: the DataFrame or the existing table does not match the contract.
            CommitError: Delta refused or failed the write (nothing was committed).
        """
        schema, mode, table_name = spec.schema, spec.mode, spec.table_name
        if self.exists(location):
            current = self.read(location).schema
            if spec.merge_schema and columns_to_add(current, schema):
                self._add_columns(location, columns_to_add(current, schema), table_name)
                current = self.read(location).schema
            if current.simpleString() != schema.simpleString():
                raise SchemaError(
                    f"Delta table {location} ({table_name}) has schema {current.simpleString()}, "
                    f"but the contract is {schema.simpleString()}. Migrate the table, or drop it "
                    "and rerun the stage that writes it."
                )
        user_metadata, token = with_commit_token(spec.user_metadata)
        writer = (
            conform(df, schema, table=table_name)
            .write.format("delta")
            .option("userMetadata", user_metadata)
        )
        if mode == "append":
            writer = writer.mode("append")
        else:
            writer = writer.mode("overwrite")
            if mode == "replace_where":
                where = replace_where_sql(spec.replace_where or {})
                writer = writer.option("replaceWhere", where)
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        try:
            if self._by_name:
                writer.saveAsTable(location)
            else:
                writer.save(location)
        except Exception as exc:
            message = str(exc)
            if NULL_GUARD_MARKER in message:
                raise SchemaError(
                    f"{table_name}: {message.split(NULL_GUARD_MARKER, 1)[1].split()[0]!r} is NOT "
                    "NULL in the contract, but the DataFrame has nulls there. Nothing was "
                    "committed."
                ) from exc
            cause = spark_write_cause(exc, table_name)
            raise CommitError(
                f"Delta refused the write to {table_name} at {location} ({cause}). Nothing was "
                "committed."
            ) from exc
        return self._own_version(location, token)

    def _add_columns(self, location: str, fields: list[Any], table_name: str) -> None:
        """``ALTER TABLE ... ADD COLUMNS`` (nullable, with their comments): one schema commit."""
        def column(f: Any) -> str:
            comment = (f.metadata or {}).get("comment")
            quoted = "" if not comment else " COMMENT '" + comment.replace("'", "\\'") + "'"
            return f"`{f.name}` {f.dataType.simpleString()}{quoted}"

        try:
            self._spark.sql(f"ALTER TABLE {self._sql_target(location)} ADD COLUMNS "
                            f"({', '.join(column(f) for f in fields)})")
        except Exception as exc:
            names = set(self.read(location).columns)
            if all(f.name in names for f in fields):  # a concurrent writer added them first
                return
            raise CommitError(
                f"Could not add the columns {[f.name for f in fields]} to {table_name} at "
                f"{location} ({spark_write_cause(exc, table_name)}). Nothing was committed."
            ) from exc

    def _own_version(self, location: str, token: str) -> int:
        """The version this write committed: the history entry carrying its token.

        ``DESCRIBE HISTORY ... LIMIT 1`` would return whichever writer committed last.
        """
        from pyspark.sql import functions as F

        history = (
            self._spark.sql(f"DESCRIBE HISTORY {self._sql_target(location)}")
            .where(F.col("userMetadata").contains(token))
            .select("version", "userMetadata")
            .collect()
        )
        return own_commit_version(((r["version"], r["userMetadata"]) for r in history), token)

    def append_arrow(
        self, location: str, data: pa.Table, *, create_schema: StructType | None = None,
        merge_schema: bool = False, description: str | None = None,
        commit_metadata: Mapping[str, str] | None = None, table_name: str,
    ) -> int:  # fmt: skip
        """Append driver-side rows through Spark in one Delta commit; return its version
        (``commit_metadata`` goes into the commit's ``userMetadata`` JSON).

        Raises:
            CommitError: Delta refused or failed the write (nothing was committed).
        """
        df = self._spark.createDataFrame(data.to_pandas(), schema=create_schema)
        user_metadata, token = with_commit_token(json.dumps(dict(commit_metadata or {})))
        writer = df.write.format("delta").mode("append").option("userMetadata", user_metadata)
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        if description is not None and not self.exists(location):
            writer = writer.option("description", description)
        try:
            writer.saveAsTable(location) if self._by_name else writer.save(location)
        except Exception as exc:
            raise CommitError(
                f"Delta refused the append to {table_name} at {location} "
                f"({spark_write_cause(exc, table_name)}). Nothing was committed."
            ) from exc
        return self._own_version(location, token)

    def arrow_writer(self, location: str, spec: WriteSpec) -> BufferedArrowWriter:
        return BufferedArrowWriter(self, location, spec)

    def worker_staging(self, location: str, spec: WriteSpec) -> None:
        """None: Spark's own Delta writer writes the files (callers use :meth:`write`)."""
        return None

    def delete_rows(
        self, location: str, column: str, values: set[str], *, user_metadata: str,
        table_name: str,
    ) -> int | None:  # fmt: skip
        """``DELETE FROM`` the rows whose ``column`` is in ``values`` (one Delta commit)."""
        if not values or not self.exists(location):
            return None
        predicate = sql_in(column, values)
        if self.read(location).where(predicate).limit(1).count() == 0:
            return None
        key = "spark.databricks.delta.commitInfo.userMetadata"
        user_metadata, token = with_commit_token(user_metadata)
        self._spark.conf.set(key, user_metadata)
        try:
            self._spark.sql(f"DELETE FROM {self._sql_target(location)} WHERE {predicate}")
        except Exception as exc:
            raise CommitError(
                f"Could not remove the rows of {sorted(values)} from {table_name} at {location} "
                f"({spark_write_cause(exc, table_name)}). Nothing was removed."
            ) from exc
        finally:
            self._spark.conf.unset(key)
        return self._own_version(location, token)


class BufferedArrowWriter:
    """The native form of an Arrow writer: tables buffered, one Spark write at ``commit()``."""

    def __init__(self, store: NativeStore, location: str, spec: WriteSpec) -> None:
        self._store, self._location, self._spec = store, location, spec
        self._tables: list[pa.Table] = []
        self.rows = 0
        self.version: int | None = None

    def write(self, table: pa.Table) -> None:
        self._tables.append(table)
        self.rows += table.num_rows

    def commit(self) -> int:
        import pyarrow as pa

        whole = pa.concat_tables(self._tables) if self._tables else None
        self._tables = []
        df = self._store._spark.createDataFrame(
            whole.to_pandas() if whole is not None else [], schema=self._spec.schema
        )
        self.version = self._store.write(df, self._location, self._spec)
        return self.version

    def abort(self) -> None:
        self._tables = []

    def __enter__(self) -> BufferedArrowWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.abort()

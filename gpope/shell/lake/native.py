"""Delta tables through Spark's own ``delta`` format (a cluster with Delta Lake, e.g. Databricks).

The same operations as :mod:`gpope.shell.lake.delta_rs`, each a thin call into delta-spark:
``format("delta")`` writes (``append``, ``overwrite``, ``overwrite`` + ``replaceWhere``), reads with
``versionAsOf``, ``DESCRIBE HISTORY``. Delta itself makes every write one atomic commit, checks
that ``replaceWhere`` writes stay inside their partition and enforces NOT NULL columns. Tables are
addressed by path or, with Unity Catalog, by name (``by_name=True``).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from gpope.errors import CommitError, SchemaError
from gpope.shell.lake.base import (
    HistoryEntry,
    PartitionValue,
    WriteMode,
    decode_user_metadata,
    decode_user_metadata_run,
    replace_where_sql,
    spark_write_cause,
)
from gpope.shell.lake.contract import NULL_GUARD_MARKER, conform
from gpope.shell.lake.delta_rs import MissingTableError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["COMMIT_TOKEN_KEY", "NativeStore", "own_commit_version", "with_commit_token"]

COMMIT_TOKEN_KEY = "gpope.commit"


def with_commit_token(user_metadata: str) -> tuple[str, str]:
    """``user_metadata`` with a fresh random commit token added; returns (metadata, token).

    The token identifies this write's commit in the table history, whatever other writers
    commit around it.
    """
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
    """The version of the one commit whose ``userMetadata`` carries ``token``.

    Args:
        history: ``(version, userMetadata)`` of the table's commits, any order.
        token: from :func:`with_commit_token`.

    Raises:
        CommitError: no commit, or more than one, carries the token.
    """
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
    """Read and write Delta tables with delta-spark.

    Args:
        spark: a session whose JVM has the Delta Lake classes.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark

    @staticmethod
    def _sql_target(location: str, by_name: bool) -> str:
        return location if by_name else "delta.`" + location.replace("`", "``") + "`"

    def exists(self, location: str, *, by_name: bool) -> bool:
        """True when the table exists (a catalog table, or a Delta table at the path)."""
        if by_name:
            return bool(self._spark.catalog.tableExists(location))
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self._spark, location))

    def _require(self, location: str, by_name: bool) -> None:
        if not self.exists(location, by_name=by_name):
            raise MissingTableError(location)

    def read(self, location: str, *, by_name: bool, version: int | None = None) -> DataFrame:
        """The table (as of ``version``) as a lazy DataFrame."""
        self._require(location, by_name)
        reader = self._spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", int(version))
        return reader.table(location) if by_name else reader.load(location)

    def read_arrow(self, location: str, *, by_name: bool, version: int | None = None) -> pa.Table:
        """The table as an Arrow table, collected through Spark."""
        return self.read(location, by_name=by_name, version=version).toArrow()

    def history(self, location: str, *, by_name: bool) -> list[HistoryEntry]:
        """All commits, oldest first."""
        self._require(location, by_name)
        rows = self._spark.sql(f"DESCRIBE HISTORY {self._sql_target(location, by_name)}").collect()
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
                )
            )
        return sorted(entries, key=lambda e: e.version)

    def version(self, location: str, *, by_name: bool) -> int:
        """The latest version (whoever committed it; a write returns its own version)."""
        self._require(location, by_name)
        target = self._sql_target(location, by_name)
        return int(self._spark.sql(f"DESCRIBE HISTORY {target} LIMIT 1").collect()[0]["version"])

    def write(
        self,
        df: DataFrame,
        location: str,
        *,
        by_name: bool,
        schema: StructType,
        mode: WriteMode,
        partition_by: list[str] | None,
        replace_where: Mapping[str, PartitionValue] | None,
        user_metadata: str,
        table_name: str,
    ) -> int:
        """Write ``df`` in one Delta commit; return the table's version right after it.

        Raises:
            SchemaError: the DataFrame or the existing table does not match the contract.
            CommitError: Delta refused or failed the write (nothing was committed).
        """
        if self.exists(location, by_name=by_name):
            current = self.read(location, by_name=by_name).schema
            if current.simpleString() != schema.simpleString():
                raise SchemaError(
                    f"Delta table {location} ({table_name}) has schema {current.simpleString()}, "
                    f"but the contract is {schema.simpleString()}. Migrate the table, or drop it "
                    "and rerun the stage that writes it."
                )
        user_metadata, token = with_commit_token(user_metadata)
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
                writer = writer.option("replaceWhere", replace_where_sql(replace_where or {}))
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        try:
            if by_name:
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
        return self._own_version(location, by_name, token)

    def _own_version(self, location: str, by_name: bool, token: str) -> int:
        """The version this write committed: the history entry carrying its token.

        ``DESCRIBE HISTORY ... LIMIT 1`` would return whichever writer committed last.
        """
        from pyspark.sql import functions as F

        history = (
            self._spark.sql(f"DESCRIBE HISTORY {self._sql_target(location, by_name)}")
            .where(F.col("userMetadata").contains(token))
            .select("version", "userMetadata")
            .collect()
        )
        return own_commit_version(((r["version"], r["userMetadata"]) for r in history), token)

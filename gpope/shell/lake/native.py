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
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpope.errors import CommitError, SchemaError
from gpope.shell.lake.base import (
    HistoryEntry,
    PartitionValue,
    WriteMode,
    decode_user_metadata,
    replace_where_sql,
)
from gpope.shell.lake.contract import NULL_GUARD_MARKER, conform
from gpope.shell.lake.delta_rs import MissingTableError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["NativeStore"]


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
                )
            )
        return sorted(entries, key=lambda e: e.version)

    def version(self, location: str, *, by_name: bool) -> int:
        """The latest version."""
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
            raise CommitError(
                f"Delta refused the write to {table_name} at {location} ({type(exc).__name__}: "
                f"{message.splitlines()[0] if message else ''}). Nothing was committed."
            ) from exc
        return self.version(location, by_name=by_name)

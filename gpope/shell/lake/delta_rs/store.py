"""The delta-rs store: Spark writes Parquet, delta-rs commits it (see the package docstring)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import replace
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError, ConfigError, SchemaError
from gpope.shell.lake.base import (
    PartitionValue,
    WriteSpec,
    check_data_files,
    columns_to_add,
    encode_user_metadata,
    partition_string,
    spark_write_cause,
)
from gpope.shell.lake.contract import NULL_GUARD_MARKER, conform
from gpope.shell.lake.delta_rs.commit import commit_files
from gpope.shell.lake.delta_rs.files import (
    check_replace_where,
    check_replace_where_columns,
    drop_staging,
    new_staging,
    remove_empty_dirs,
    stage_files,
    without,
)
from gpope.shell.lake.delta_rs.table import (
    CATALOG_REFUSAL,
    DeltaRsTables,
    check_local_root,
    local_file_path,
)
from gpope.shell.lake.delta_rs.writers import ArrowTableWriter, WorkerStaging
from gpope.shell.lake.names import spark_path

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["DeltaRsStore"]

_PARTITION_TYPES = ("string", "tinyint", "smallint", "int", "bigint", "boolean", "date")



class DeltaRsStore(DeltaRsTables):
    """Read and write path-based Delta tables with Spark for data and delta-rs for the log
    (``spark`` None: the JVM-free operations of :class:`DeltaRsTables` only)."""

    @classmethod
    def available(cls, spark: SparkSession) -> bool:
        """Always: delta-rs needs no JVM classes."""
        return True

    @classmethod
    def check_lake(cls, spark: SparkSession, root: str, *, local: bool, by_name: bool) -> None:
        """Refuse a lake this store cannot serve: Unity Catalog names, a non-local root, a root
        delta-rs cannot address, or a Spark Connect server on another host (it writes where this
        process cannot read)."""
        if by_name:
            raise ConfigError(CATALOG_REFUSAL)
        if not local:
            raise ConfigError(
                f"The delta-rs storage path supports local lake roots only; got {root!r}. Use a "
                "local directory, or run on a cluster with Delta Lake (storage 'native')."
            )
        check_local_root(root)
        _check_reach(spark, root)

    def _session(self) -> SparkSession:
        if self._spark is None:
            raise ConfigError(
                "This delta-rs table operation runs Spark jobs; open the store with a Spark "
                "session (Lake(spark, ...))."
            )
        return self._spark

    def read(self, path: str, version: int | None = None) -> DataFrame:
        """The table at ``path`` (as of ``version``) as a lazy Spark DataFrame.

        Guarantees: the table's columns in the table's order; partition columns restored from
        the log with their declared types; an empty table reads as an empty DataFrame.
        """
        from pyspark.sql import functions as F

        table = self.open(path, version)
        schema = self.schema(table)
        partition_columns = list(table.metadata().partition_columns)
        data_schema = without(schema, partition_columns)
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
        # a file the log lists but the disk lacks: one error naming the table, not Spark's
        check_data_files([local_file_path(u) for _, uris in groups for u in uris], version)
        frames = []
        for part, uris in groups:
            if not uris:
                continue
            frame = (
                self._session().read.schema(data_schema)
                .option("recursiveFileLookup", "true")  # no partition inference from paths
                .parquet(*[spark_path(local_file_path(u)) for u in uris])
            )
            for column in partition_columns:
                frame = frame.withColumn(column, F.lit(part.get(column)).cast(types[column]))
            frames.append(frame.select(*[f"`{f.name}`" for f in schema.fields]))
        if not frames:  # an empty Arrow table: a local relation, no Python worker needed
            from pyspark.sql.pandas.types import to_arrow_schema

            return self._session().createDataFrame(to_arrow_schema(schema).empty_table(), schema)
        return reduce(lambda a, b: a.union(b), frames)

    def data_files(self, path: str, version: int | None = None,
                   partition: Mapping[str, PartitionValue] | None = None) -> list[str]:
        """The local paths of the live Parquet files (data columns only) of the table at
        ``path`` as of ``version``: all, or those of one ``partition`` (ConfigError for a key
        that is not a partition column)."""
        table = self.open(path, version)
        partition_columns = list(table.metadata().partition_columns)
        wanted = _partition_strings(partition) or {}
        unknown = sorted(set(wanted) - set(partition_columns))
        if unknown:
            raise ConfigError(
                f"Delta table {path} is partitioned by {partition_columns}; {unknown} are not "
                "partition columns."
            )
        if wanted:
            predicate = [(c, "=", "" if v is None else v) for c, v in wanted.items()]
            uris = table.file_uris(file_pruning_predicate=predicate)
        else:
            uris = table.file_uris()
        return check_data_files([local_file_path(u) for u in uris], version)

    # ------------------------------------------------------------------ writes
    def write(self, df: DataFrame, path: str, spec: WriteSpec) -> int:
        """Write ``df`` to the table at ``path`` in one atomic commit; return the new version.

        Raises (nothing committed, no file left behind):
            SchemaError: the DataFrame, the existing table or a written file does not match the
                contract, or a NOT NULL column holds nulls.
            DataError: rows outside the ``replace_where`` partition.
            CommitError: Spark could not write the files or the commit failed.
        """
        resolved, root, token, staging = self._stage(path, spec)
        conformed = conform(df, spec.schema, table=spec.table_name)
        partitions = resolved.partition_by or []
        return self.publish(
            lambda: self._write_parquet(conformed, staging, partitions, spec.table_name),
            path, root, staging, token, resolved,
        )  # fmt: skip

    def arrow_writer(self, path: str, spec: WriteSpec) -> ArrowTableWriter:
        """A writer that stages driver-side Arrow tables as Parquet (no Spark job) and commits
        them in one Delta commit, by the protocol of :meth:`write` from step 3 on; unpartitioned
        tables, ``append`` or ``overwrite`` only (else ConfigError)."""
        existing = self._merged(path, spec)
        partitions = self.check_table(existing, path, spec.schema, None, spec.table_name)
        if partitions or spec.mode not in ("append", "overwrite"):
            raise ConfigError(
                f"An Arrow write to {spec.table_name} needs an unpartitioned table and mode append "
                f"or overwrite; got partitions {partitions}, mode {spec.mode!r}. Write a Spark "
                "DataFrame."
            )
        root, token, staging = new_staging(Path(path), spec.table_name)
        resolved = replace(spec, partition_by=[], replace_where=None)
        return ArrowTableWriter(self, path, root, staging, token, resolved)

    def worker_staging(self, path: str, spec: WriteSpec) -> WorkerStaging:
        """A staging folder that Spark's Python workers write Parquet files into themselves
        (:class:`StagedFileWriter`, each task returning ``(file, rows)``), so a kernel's rows
        never travel back into the JVM; :meth:`WorkerStaging.commit` takes what the tasks
        returned, by the protocol of :meth:`write` from step 3 on."""
        resolved, root, token, staging = self._stage(path, spec)
        return WorkerStaging(self, path, root, staging, token, resolved)

    def _stage(self, path: str, spec: WriteSpec) -> tuple[WriteSpec, Path, str, Path]:
        """Check ``spec`` against the table at ``path``; return it resolved (the table's
        partition columns, ``replace_where`` values as partition strings) and a new staging
        folder ``(root, token, staging)``."""
        existing = self._merged(path, spec)
        partitions = self.check_table(
            existing, path, spec.schema, spec.partition_by, spec.table_name
        )
        rw = _partition_strings(spec.replace_where)
        check_replace_where_columns(rw, partitions, spec.table_name)
        root, token, staging = new_staging(Path(path), spec.table_name)
        return replace(spec, partition_by=partitions, replace_where=rw), root, token, staging

    def publish(
        self,
        produce: Any,
        path: str,
        root: Path,
        staging: Path,
        token: str,
        spec: WriteSpec,
        reported: set[str] | None = None,
    ) -> int:
        """Run ``produce`` (writes the staged files, returns the rows it wrote), check, commit.

        ``spec`` is resolved (:meth:`_stage`): its ``partition_by`` are the table's partition
        columns and its ``replace_where`` values partition strings. ``reported``: the staged
        files (relative to ``staging``) the producer reports; only these are committed (None:
        every staged file).
        """
        schema, table_name = spec.schema, spec.table_name
        partitions = spec.partition_by or []
        moved: list[Path] = []
        try:
            written = produce()
            _check_visible(staging, table_name)
            files = stage_files(
                root, staging, token, partitions, without(schema, partitions), table_name, moved,
                reported,
            )
            staged_rows = sum(f.num_records for f in files)
            if staged_rows != written:
                raise CommitError(
                    f"Spark reported writing {written} rows of {table_name}, but the files "
                    f"staged under {staging} hold {staged_rows}. Nothing was committed (were the "
                    "files written somewhere else, or removed while the job ran?)."
                )
            if spec.replace_where is not None:
                check_replace_where(files, spec.replace_where, table_name)
            return commit_files(self, self.check_table, path, files, spec)
        except BaseException:
            for file in moved:
                file.unlink(missing_ok=True)
            remove_empty_dirs(root, moved)
            raise
        finally:
            drop_staging(staging)

    def _merged(self, path: str, spec: WriteSpec) -> DeltaTable | None:
        """The existing table (None: none yet), with the contract's missing nullable columns
        added first when ``spec.merge_schema`` (:func:`columns_to_add`)."""
        if not self.exists(path):
            return None
        table = self.open(path)
        extra = columns_to_add(self.schema(table), spec.schema) if spec.merge_schema else []
        if not extra:
            return table
        from deltalake import CommitProperties, Field

        try:
            table.alter.add_columns(
                [Field.from_json(json.dumps(f.jsonValue())) for f in extra],
                commit_properties=CommitProperties(
                    custom_metadata={"userMetadata": encode_user_metadata("add_columns", None)}),
            )  # fmt: skip
        except Exception as exc:  # a concurrent writer may have added them first
            table = self.open(path)
            if columns_to_add(self.schema(table), spec.schema):
                raise CommitError(
                    f"Could not add the columns {[f.name for f in extra]} to {spec.table_name} "
                    f"at {path} ({exc}). Nothing was committed; check that the lake is writable."
                ) from exc
        return self.open(path)

    def check_table(
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
    ) -> int:
        """Spark writes ``df`` under ``staging``; return the number of rows Spark wrote.

        The folder is given to Hadoop as a ``file:`` path (Hadoop encodes it itself): a
        percent-encoded URI would be encoded twice and land the files in another folder.
        """
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        conf = self._session().conf
        key = "spark.sql.parquet.outputTimestampType"
        previous = conf.get(key, None)
        conf.set(key, "TIMESTAMP_MICROS")
        observation = Observation(f"gpope_write_{uuid.uuid4().hex[:8]}")
        try:
            writer = df.observe(observation, F.count(F.lit(1)).alias("rows")).write.mode(
                "error"  # "errorifexists" is refused by Spark Connect
            )
            if partitions:
                writer = writer.partitionBy(*partitions)
            writer.parquet("file:" + str(staging))
            metrics = observation.get
            # Spark Connect may return no observed metrics for a write of some plans (a local
            # relation): count the rows instead, so the staged-files check still has its number.
            written = int(metrics["rows"]) if "rows" in metrics else int(df.count())
        except Exception as exc:
            message = str(exc)
            if NULL_GUARD_MARKER in message:
                column = message.split(NULL_GUARD_MARKER, 1)[1].split()[0]
                raise SchemaError(
                    f"Column {column!r} of {table_name} is NOT NULL in the contract, but the "
                    "DataFrame has null values there. Fix or filter the rows in the producing "
                    "job. Nothing was committed."
                ) from exc
            cause = spark_write_cause(exc, table_name)
            raise CommitError(
                f"Spark could not write the Parquet files of {table_name} ({cause}). "
                "Nothing was committed."
            ) from exc
        finally:
            if previous is None:
                conf.unset(key)
            else:
                conf.set(key, previous)
        if staging.is_dir() and not (staging / "_SUCCESS").is_file():  # (no folder: see
            # _check_visible, a Connect server on another machine)
            raise CommitError(
                f"Spark reported writing {written} rows of {table_name} but left no _SUCCESS "
                f"marker in {staging}: the files went somewhere else. Nothing was committed."
            )
        return written


def _check_visible(staging: Path, table_name: str) -> None:
    """Spark reported success: the staged folder must be visible here, else refuse to commit.

    With Spark Connect the files are written by the server; the delta-rs path works only when
    the server and this process share the lake's file system (a server on this machine).
    """
    if not staging.is_dir():
        raise ConfigError(
            f"Spark wrote the Parquet files of {table_name} to {staging}, but this process does "
            "not see them there (a Spark Connect server on another machine?). The delta-rs path "
            "needs the Spark server and this process to share the lake's file system: run the "
            "Connect server on this machine, or use a Spark with Delta Lake (storage 'native', "
            "e.g. Databricks). Nothing was committed."
        )


def _shape(schema: StructType) -> list[tuple[str, Any, bool]]:
    """Names, types and nullability (column metadata such as comments is not part of the contract)."""
    return [(f.name, f.dataType.jsonValue(), f.nullable) for f in schema.fields]


def _describe(schema: StructType) -> str:
    return ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' not null'}"
        for f in schema.fields
    )


def _check_reach(spark: SparkSession, root: str) -> None:
    """Refuse a Spark Connect server on another host: it would write where this process,
    which commits the files, cannot see (the native store serves such sessions)."""
    from gpope.shell.spark import connect_host, is_connect, is_loopback

    if is_connect(spark) and not is_loopback(connect_host(spark)):
        raise ConfigError(
            f"The delta-rs storage path needs the Spark server to write into this machine's lake "
            f"root {root}, but the Spark Connect server is at {connect_host(spark)!r}. Use a "
            "server with Delta Lake (storage 'native': Databricks, or Delta on the server's "
            "classpath), or a Connect server on this machine (sc://localhost:PORT)."
        )


def _partition_strings(
    values: Mapping[str, PartitionValue] | None,
) -> dict[str, str | None] | None:
    """Partition values as the Delta partition strings delta-rs compares."""
    return None if values is None else {c: partition_string(v) for c, v in values.items()}

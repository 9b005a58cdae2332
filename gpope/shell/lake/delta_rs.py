"""Delta tables without the Delta JARs: Spark writes Parquet, delta-rs commits it.

Write protocol (one call = one atomic Delta commit):

1. The DataFrame is conformed to the contract (:mod:`gpope.shell.lake.contract`).
2. Spark writes Parquet in parallel into a fresh staging folder
   ``<table>/_gpope_staging/<utc time>-<random>/`` (a ``_`` folder: no reader looks there), given
   to Hadoop as a ``file:`` path, never a percent-encoded URI, so any local path works (spaces,
   non-ASCII letters, ``#``...). Timestamps are written as ``TIMESTAMP_MICROS`` (UTC), the Delta
   encoding. The number of rows Spark wrote is observed on the write itself
   (:class:`pyspark.sql.Observation`).
   Rows produced by a Python kernel inside Spark (``gpope stats``) can skip the JVM: the Python
   workers write the Parquet files themselves (:class:`StagedFileWriter`, pyarrow, under a
   hidden name until the file is complete) into the staging folder of a :class:`WorkerStaging`
   and report ``(file, rows)``; only the reported files are taken, holding exactly those rows.
3. The driver checks Spark's ``_SUCCESS`` marker and that the staged files hold exactly the rows
   Spark reported writing (a mismatch fails loudly: nothing is committed), checks each file's
   footer (columns and types must equal the table's data columns) and derives Delta statistics
   from it: ``numRecords``, ``nullCount`` and ``minValues``/``maxValues`` of flat columns, so
   every engine can skip files.
4. The files move to their final, Hive-style places (``<table>/<col>=<value>/<name>.parquet`` for
   partitioned tables, ``<table>/<name>.parquet`` otherwise); partition values are also recorded
   in the add actions (what Delta readers use). A value that would need escaping in a folder name
   (engines disagree on that encoding) puts its file in ``<table>/gpope-escaped/``
   instead: paths in the log only ever use ``[A-Za-z0-9._=/-]``.
5. The driver loads the table *fresh* and commits the adds in one transaction that refuses to land
   on a newer version than the one it read (``max_commit_retries=0``): ``append`` as an append,
   ``overwrite`` and ``replace_where`` as Delta ``WRITE`` operations in ``Overwrite`` mode (delta-rs
   derives the removes from the snapshot it read: all files, or the replaced partition), so the
   history names each operation right. If another writer committed in between, it reloads and
   tries again, so a concurrent append is never kept by an overwrite that did not see it.
6. If anything before the commit fails, the staging folder and the moved files are deleted: no
   stray files, and none of them is ever live. Staging folders left by killed runs are removed by
   the next write to the table once they are older than :data:`STALE_STAGING_HOURS`.

Reads list the live files of a version with delta-rs, group them by partition values, read each
group with ``spark.read.parquet`` (local ``file:`` paths, glob characters escaped) under the
table's schema and add the partition columns back as literals, so reads never depend on the file
layout. This backend supports local lake roots only, whose path delta-rs can address
(:func:`check_local_root`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import socket
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError, ConfigError, DataError, SchemaError
from gpope.shell.delta_read import commit_history, open_table, read_table
from gpope.shell.lake.base import (
    HistoryEntry,
    WriteMode,
    decode_user_metadata,
    decode_user_metadata_run,
    partition_string,
    spark_write_cause,
)
from gpope.shell.lake.contract import NULL_GUARD_MARKER, conform

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "STAGING_FOLDER",
    "STALE_STAGING_HOURS",
    "ArrowTableWriter",
    "DeltaRsStore",
    "MissingTableError",
    "StagedFileWriter",
    "WorkerStaging",
    "check_local_root",
    "local_file_path",
]

STAGING_FOLDER = "_gpope_staging"
"""Folder of a table where Spark writes before the commit (``_``: ignored by every reader)."""
STALE_STAGING_HOURS = 24.0
"""Staging folders older than this were left by killed runs; the next write removes them."""

_MAX_COMMIT_ATTEMPTS = 8
#: This host in staging folder names (``-h<host>-p<pid>-``), so a later write on the same host
#: removes the folders of killed processes at once instead of after STALE_STAGING_HOURS.
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
_OWNER = re.compile(r"-h([0-9a-f]{8})-p([0-9]+)-")
# Characters delta-rs (1.x) cannot address in a local path: it panics on ``[ ] | ^`` ("invalid
# object store url"), decodes ``%XX`` a second time and treats ``\`` as a separator.
_UNADDRESSABLE = ("[", "]", "|", "^", "\\")
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
_PARTITION_TYPES = ("string", "tinyint", "smallint", "int", "bigint", "boolean", "date")
_UNSUPPORTED_READER_FEATURES = ("columnMapping", "deletionVectors")


class MissingTableError(LookupError):
    """Internal: the location holds no Delta table (the table layer turns it into a user error)."""


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


def _spark_path(path: str | Path) -> str:
    """A local path as Spark/Hadoop reads it literally: ``file:`` + glob characters escaped."""
    import re

    return "file:" + re.sub(r"([\\*?\[\]{}])", r"\\\1", str(path))


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
        """The latest version of the table at ``path``."""
        return int(self.open(path).version())

    def history(self, path: str) -> list[HistoryEntry]:
        """All commits of the table at ``path``, oldest first."""
        entries = []
        for commit in commit_history(self.open(path)):
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
                .parquet(*[_spark_path(local_file_path(u)) for u in uris])
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
        return read_table(self.open(path, version))

    def data_files(self, path: str, version: int | None = None,
                   partition: Mapping[str, str | None] | None = None) -> list[str]:
        """The local paths of the live Parquet files of the table at ``path`` (as of
        ``version``): all of them, or those of one ``partition`` (partition column -> value
        string, None for null). The files hold the data columns only (partition columns live in
        the log).

        Raises:
            ConfigError: a ``partition`` key that is not a partition column of the table.
        """
        table = self.open(path, version)
        partition_columns = list(table.metadata().partition_columns)
        wanted = dict(partition or {})
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
        return [local_file_path(u) for u in uris]

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
        _check_replace_where_columns(replace_where, partitions, table_name)
        conformed = conform(df, schema, table=table_name)
        root, token, staging = _new_staging(Path(path), table_name)
        return self._publish(
            lambda: self._write_parquet(conformed, staging, partitions, table_name),
            path, root, staging, token, schema, partitions, mode, replace_where, user_metadata,
            table_name,
        )  # fmt: skip

    def arrow_writer(
        self,
        path: str,
        *,
        schema: StructType,
        mode: WriteMode,
        user_metadata: str,
        table_name: str,
    ) -> ArrowTableWriter:
        """A writer that stages Arrow tables as Parquet and commits them in one Delta commit.

        For data that is already on the driver (``gpope simulate``): no Spark job, no copy into
        the JVM. The table must be unpartitioned; ``mode`` is ``append`` or ``overwrite``. The
        same protocol as :meth:`write` from step 3 on (staged files checked against the rows
        written, statistics, one commit, clean-up on failure).

        Raises:
            ConfigError: a partitioned table or ``replace_where``.
            SchemaError: the existing table does not match the contract.
        """
        existing = self.open(path) if self.exists(path) else None
        partitions = self._check_table(existing, path, schema, None, table_name)
        if partitions or mode not in ("append", "overwrite"):
            raise ConfigError(
                f"An Arrow write to {table_name} needs an unpartitioned table and mode append or "
                f"overwrite; got partitions {partitions}, mode {mode!r}. Write a Spark DataFrame."
            )
        root, token, staging = _new_staging(Path(path), table_name)
        return ArrowTableWriter(self, path, root, staging, token, schema, mode, user_metadata,
                                table_name)  # fmt: skip

    def worker_staging(
        self,
        path: str,
        *,
        schema: StructType,
        mode: WriteMode,
        partition_by: list[str] | None,
        replace_where: Mapping[str, str | None] | None,
        user_metadata: str,
        table_name: str,
    ) -> WorkerStaging:
        """A staging folder that Spark's Python workers write Parquet files into themselves.

        For a job whose rows are produced by a Python kernel (``mapInArrow``): each task writes
        its rows with :class:`StagedFileWriter` (pyarrow) and returns ``(file, rows)``, so the
        rows never travel back into the JVM nor through Spark's Parquet writer. The driver then
        calls :meth:`WorkerStaging.commit` with what the tasks returned: the same protocol as
        :meth:`write` from step 3 on (only the files the tasks reported, which must hold exactly
        the rows they reported; footers checked; statistics; Hive-style places; one commit;
        clean-up on failure). Partitioned tables and ``replace_where`` work as in :meth:`write`.

        Raises:
            ConfigError: ``replace_where`` names no partition column.
            SchemaError: the existing table does not match the contract.
        """
        existing = self.open(path) if self.exists(path) else None
        partitions = self._check_table(existing, path, schema, partition_by, table_name)
        _check_replace_where_columns(replace_where, partitions, table_name)
        root, token, staging = _new_staging(Path(path), table_name)
        return WorkerStaging(self, path, root, staging, token, schema, partitions, mode,
                             replace_where, user_metadata, table_name)  # fmt: skip

    def _publish(
        self,
        produce: Any,
        path: str,
        root: Path,
        staging: Path,
        token: str,
        schema: StructType,
        partitions: list[str],
        mode: WriteMode,
        replace_where: Mapping[str, str | None] | None,
        user_metadata: str,
        table_name: str,
        reported: set[str] | None = None,
    ) -> int:
        """Run ``produce`` (writes the staged files, returns the rows it wrote), check, commit.

        ``reported``: the staged files (relative to ``staging``) the producer reports; only
        these are committed (None: every staged file).
        """
        moved: list[Path] = []
        try:
            written = produce()
            _check_visible(staging, table_name)
            files = _stage_files(
                root, staging, token, partitions, _without(schema, partitions), table_name, moved,
                reported,
            )
            staged_rows = sum(f.num_records for f in files)
            if staged_rows != written:
                raise CommitError(
                    f"Spark reported writing {written} rows of {table_name}, but the files "
                    f"staged under {staging} hold {staged_rows}. Nothing was committed (were the "
                    "files written somewhere else, or removed while the job ran?)."
                )
            if replace_where is not None:
                _check_replace_where(files, replace_where, table_name)
            return self._commit(
                path, files, schema, partitions, mode, replace_where, user_metadata, table_name
            )
        except BaseException:
            for file in moved:
                file.unlink(missing_ok=True)
            _remove_empty_dirs(root, moved)
            raise
        finally:
            _drop_staging(staging)

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
    ) -> int:
        """Spark writes ``df`` under ``staging``; return the number of rows Spark wrote.

        The folder is given to Hadoop as a ``file:`` path (Hadoop encodes it itself): a
        percent-encoded URI would be encoded twice and land the files in another folder.
        """
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        conf = self._spark.conf
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
            try:
                _transact(table, adds, mode, partitions, replace_where, properties)
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

        live = pa.table(self.open(path).get_add_actions(flatten=True)).column("path").to_pylist()
        decoded = {urllib.parse.unquote(p) for p in live}
        return urllib.parse.unquote(adds[0].path) in decoded


def _new_staging(root: Path, table_name: str) -> tuple[Path, str, Path]:
    """Create the table folder and a fresh staging folder (stale ones removed)."""
    _check_writable(root, table_name)
    token = (f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-h{_HOST}-p{os.getpid()}-"
             f"{uuid.uuid4().hex[:12]}")
    staging_root = root / STAGING_FOLDER
    _remove_stale_staging(staging_root)
    return root, token, staging_root / token


def _drop_staging(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    staging_root = staging.parent
    if staging_root.is_dir() and not any(staging_root.iterdir()):
        try:
            staging_root.rmdir()
        except OSError:  # another writer staged meanwhile
            pass


class ArrowTableWriter:
    """Stages Arrow tables as Parquet files; :meth:`commit` makes them one Delta commit.

    Created by :meth:`DeltaRsStore.arrow_writer`. Each :meth:`write` is checked against the
    contract (exact column names, types equal or cast without loss, no null in a NOT NULL column)
    and appended to the current staged file (a new file every :data:`ROWS_PER_FILE` rows).
    :meth:`abort` (or an exception inside a ``with`` block) deletes everything staged.
    """

    ROWS_PER_FILE = 8_000_000

    def __init__(
        self, store: DeltaRsStore, path: str, root: Path, staging: Path, token: str,
        schema: StructType, mode: WriteMode, user_metadata: str, table_name: str,
    ) -> None:  # fmt: skip
        from pyspark.sql.pandas.types import to_arrow_schema

        self._store, self._path, self._root, self._staging = store, path, root, staging
        self._token, self._schema, self._mode = token, schema, mode
        self._user_metadata, self._table_name = user_metadata, table_name
        self._arrow_schema = to_arrow_schema(schema)
        self._writer: Any = None
        self._file_rows = 0
        self._files = 0
        self.rows = 0
        self.version: int | None = None
        staging.mkdir(parents=True, exist_ok=True)

    def write(self, table: pa.Table) -> None:
        """Stage ``table`` (its columns named as the contract's; cast without loss)."""
        import pyarrow.parquet as pq

        conformed = _conform_arrow(table, self._arrow_schema, self._table_name)
        if conformed.num_rows == 0:
            return
        if self._writer is not None and self._file_rows >= self.ROWS_PER_FILE:
            self._writer.close()
            self._writer = None
        if self._writer is None:
            name = self._staging / f"part-{self._files:05d}.parquet"
            self._writer = pq.ParquetWriter(
                name, self._arrow_schema, compression="snappy",
                coerce_timestamps="us", allow_truncated_timestamps=False,
            )  # fmt: skip
            self._files += 1
            self._file_rows = 0
        self._writer.write_table(conformed)
        self._file_rows += conformed.num_rows
        self.rows += conformed.num_rows

    def _close(self) -> int:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        (self._staging / "_SUCCESS").touch()
        return self.rows

    def commit(self) -> int:
        """Commit every staged row in one Delta commit; return the new table version."""
        self.version = self._store._publish(
            self._close, self._path, self._root, self._staging, self._token, self._schema, [],
            self._mode, None, self._user_metadata, self._table_name,
        )  # fmt: skip
        return self.version

    def abort(self) -> None:
        """Delete everything staged; nothing is committed."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        _drop_staging(self._staging)

    def __enter__(self) -> ArrowTableWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.abort()


class WorkerStaging:
    """A staging folder for Parquet files written by Spark's Python workers; one Delta commit.

    Created by :meth:`DeltaRsStore.worker_staging`. Pass :attr:`folder`, :attr:`partitions` and
    :attr:`arrow_schema` to the tasks; each writes its files with :class:`StagedFileWriter` and
    returns what :meth:`StagedFileWriter.close` returned; :meth:`commit` takes those reports.
    :meth:`abort` (or an exception inside a ``with`` block) deletes everything staged.
    """

    def __init__(
        self, store: DeltaRsStore, path: str, root: Path, staging: Path, token: str,
        schema: StructType, partitions: list[str], mode: WriteMode,
        replace_where: Mapping[str, str | None] | None, user_metadata: str, table_name: str,
    ) -> None:  # fmt: skip
        from pyspark.sql.pandas.types import to_arrow_schema

        self._store, self._path, self._root, self._staging = store, path, root, staging
        self._token, self._schema, self._mode = token, schema, mode
        self._replace_where, self._user_metadata = replace_where, user_metadata
        self.table_name = table_name
        self.partitions = list(partitions)
        self.arrow_schema = to_arrow_schema(_without(schema, partitions))
        self.folder = str(staging)
        self.version: int | None = None
        staging.mkdir(parents=True, exist_ok=True)

    def commit(self, files: list[tuple[str, int]]) -> int:
        """Commit the reported ``(file, rows)`` in one Delta commit; return the new version.

        Raises:
            CommitError: a reported file is missing, or the files hold other row counts than
                reported, or the commit failed. Nothing was committed.
            DataError: rows outside the ``replace_where`` partition. Nothing was committed.
        """
        reported = {name for name, _ in files}
        if len(reported) != len(files):
            raise CommitError(
                f"The Spark tasks writing {self.table_name} reported the same file twice. "
                "Nothing was committed."
            )
        rows = sum(int(n) for _, n in files)

        def produce() -> int:
            (self._staging / "_SUCCESS").touch()
            return rows

        self.version = self._store._publish(
            produce, self._path, self._root, self._staging, self._token, self._schema,
            self.partitions, self._mode, self._replace_where, self._user_metadata,
            self.table_name, reported,
        )  # fmt: skip
        return self.version

    def abort(self) -> None:
        """Delete everything staged; nothing is committed."""
        _drop_staging(self._staging)

    def __enter__(self) -> WorkerStaging:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None or self.version is None:
            self.abort()


class StagedFileWriter:
    """Writes one Parquet file of a task into a :class:`WorkerStaging` folder (runs anywhere
    the folder is visible: a Spark Python worker, or the driver).

    Args:
        folder: :attr:`WorkerStaging.folder`.
        partition_values: partition column -> value (a string, or None) of every row written;
            the file goes to the Hive-style sub-folder of these values.
        schema: :attr:`WorkerStaging.arrow_schema` (the data columns, partition columns left out).
        table_name: for messages.

    Each :meth:`write` is checked against the contract (as :class:`ArrowTableWriter` does);
    small tables are gathered into row groups of about :data:`ROW_GROUP_BYTES`. The file is
    written under a hidden name and renamed when :meth:`close` succeeds, so a failed task
    leaves no file the commit could take.
    """

    ROW_GROUP_BYTES = 64 * 2**20

    def __init__(self, folder: str, partition_values: Mapping[str, str | None],
                 schema: pa.Schema, table_name: str) -> None:  # fmt: skip
        parts = [
            f"{c}={_HIVE_NULL if v is None else urllib.parse.quote(str(v), safe='')}"
            for c, v in partition_values.items()
        ]
        self.relative = "/".join([*parts, f"part-{uuid.uuid4().hex}.parquet"])
        self._final = Path(folder) / self.relative
        self._hidden = self._final.with_name("." + self._final.name + ".inprogress")
        self._schema, self._table_name = schema, table_name
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0
        self._writer: Any = None
        self.rows = 0

    def write(self, table: pa.Table | pa.RecordBatch) -> None:
        """Add ``table``'s rows (its columns named as the contract's data columns)."""
        import pyarrow as pa

        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        conformed = _conform_arrow(table, self._schema, self._table_name)
        if conformed.num_rows == 0:
            return
        self._pending.append(conformed)
        self._pending_bytes += conformed.nbytes
        self.rows += conformed.num_rows
        if self._pending_bytes >= self.ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._pending:
            return
        table = pa.concat_tables(self._pending)
        self._pending, self._pending_bytes = [], 0
        if self._writer is None:
            self._hidden.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(
                self._hidden, self._schema, compression="snappy",
                coerce_timestamps="us", allow_truncated_timestamps=False,
            )  # fmt: skip
        self._writer.write_table(table, row_group_size=table.num_rows)

    def close(self) -> tuple[str | None, int]:
        """Finish the file; return ``(its path relative to the folder, rows)`` for
        :meth:`WorkerStaging.commit` (``(None, 0)`` when no row was written: no file)."""
        self._flush()
        if self._writer is None:
            return None, 0
        self._writer.close()
        self._writer = None
        self._hidden.rename(self._final)
        return self.relative, self.rows

    def discard(self) -> None:
        """Drop what was written (on a failure inside the task)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._pending = []
        self._hidden.unlink(missing_ok=True)


def _check_replace_where_columns(
    replace_where: Mapping[str, str | None] | None, partitions: list[str], table_name: str
) -> None:
    if replace_where is not None:
        unknown = sorted(set(replace_where) - set(partitions))
        if unknown or not replace_where:
            raise ConfigError(
                f"replace_where on {table_name} must name partition columns {partitions}; "
                f"got {sorted(replace_where)}. Partition the table by the columns a job "
                "replaces (partition_by=...)."
            )


def _conform_arrow(table: pa.Table, schema: pa.Schema, table_name: str) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types, or SchemaError (see contract rules)."""
    import pyarrow as pa

    names = table.column_names
    want = schema.names
    if names != want:
        raise SchemaError(
            f"The Arrow table written to {table_name} has columns {names}; the contract's are "
            f"{want} (same names, same order)."
        )
    columns = []
    for field in schema:
        column = table.column(field.name)
        if not field.nullable and column.null_count:
            raise SchemaError(
                f"Column {field.name!r} of {table_name} is NOT NULL in the contract, but the "
                "Arrow table has null values there. Nothing was committed."
            )
        if column.type != field.type:
            naive_time = pa.types.is_timestamp(column.type) and pa.types.is_timestamp(field.type)
            if not (naive_time and column.type.unit == field.type.unit and column.type.tz is None):
                try:
                    column = column.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"Column {field.name!r} of the Arrow table written to {table_name} has "
                        f"type {column.type}, which does not convert without loss to "
                        f"{field.type} ({exc})."
                    ) from exc
            else:  # a naive timestamp is UTC wall-clock time (the lake's time zone)
                column = column.cast(field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)


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


def _check_writable(root: Path, table_name: str) -> None:
    """Create the table folder, or raise ConfigError naming the folder that refuses writes."""
    try:
        (root / STAGING_FOLDER).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"Cannot write {table_name}: {exc.strerror or exc} at {exc.filename or root!s}. The "
            "lake must be a writable directory (check --lake and its permissions)."
        ) from exc


def _owner_dead(folder: Path) -> bool:
    """True when ``folder`` was staged by a process of this host that no longer runs."""
    match = _OWNER.search(folder.name)
    if match is None or match.group(1) != _HOST:
        return False
    try:
        os.kill(int(match.group(2)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


def _remove_stale_staging(staging_root: Path) -> None:
    """Delete staging folders that killed runs left behind: their process (on this host) is
    gone, or they are older than STALE_STAGING_HOURS (the run's own drop removes the root
    once it is empty)."""
    if not staging_root.is_dir():
        return
    cutoff = time.time() - STALE_STAGING_HOURS * 3600
    for folder in staging_root.iterdir():
        try:
            if _owner_dead(folder) or folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
        except FileNotFoundError:  # another writer removed it
            continue


def _remove_empty_dirs(root: Path, files: list[Path]) -> None:
    """Remove the now-empty partition folders of ``files`` (up to, not including, ``root``)."""
    for directory in sorted({f.parent for f in files}, key=lambda d: -len(d.parts)):
        while directory != root and root in directory.parents:
            try:
                directory.rmdir()
            except OSError:  # not empty (other files live there), or gone
                break
            directory = directory.parent


def _stage_files(
    root: Path,
    staging: Path,
    token: str,
    partitions: list[str],
    data_schema: StructType,
    table_name: str,
    moved: list[Path],
    reported: set[str] | None = None,
) -> list[_StagedFile]:
    """Check every file Spark staged, move it to its Hive-style place, build add-action records.

    With ``reported`` (paths relative to ``staging``), only those files are taken (a file a
    failed task attempt left is not), and each of them must exist. Appends each moved file to
    ``moved`` as soon as it is moved (so a failure can delete it).
    """
    import pyarrow.parquet as pq

    found: list[tuple[Path, Path, dict[str, str | None]]] = []
    for directory, _, names in os.walk(staging):
        for name in names:
            file = Path(directory) / name
            if reported is not None and file.relative_to(staging).as_posix() not in reported:
                continue
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                relative = file.parent.relative_to(staging)
                found.append((file, relative, _partition_values(relative, partitions)))
    if reported is not None and len(found) != len(reported):
        missing = sorted(reported - {f.relative_to(staging).as_posix() for f, _, _ in found})
        raise CommitError(
            f"The Spark tasks writing {table_name} reported files that are not staged under "
            f"{staging} (or not Parquet files): {missing[:5]}. Nothing was committed."
        )
    expected = [(f.name, _spark_type_key(f.dataType)) for f in data_schema.fields]
    staged = []
    for index, (file, relative, values) in enumerate(sorted(found)):
        metadata = pq.read_metadata(file)
        arrow_schema = metadata.schema.to_arrow_schema()
        got = [(f.name, _arrow_type_key(f.type)) for f in arrow_schema]
        if got != expected:
            raise SchemaError(
                f"A Parquet file written for {table_name} has columns {got}, but the table's "
                f"data columns are {expected}. Nothing was committed."
            )
        if metadata.num_rows == 0:
            continue
        name = f"part-{index:05d}-{token}.snappy.parquet"
        if urllib.parse.quote(relative.as_posix(), safe="/=") != relative.as_posix():
            # Readers disagree on how an escaped folder name is encoded in the log (delta-rs
            # opens the encoded path literally): keep such rare values out of folder names.
            relative = Path("gpope-escaped")
        target = root / relative / name
        target.parent.mkdir(parents=True, exist_ok=True)
        file.rename(target)
        moved.append(target)
        stat = target.stat()
        staged.append(
            _StagedFile(
                path=(relative / name).as_posix(),
                size=stat.st_size,
                modification_time=int(stat.st_mtime * 1000),
                partition_values=values,
                num_records=metadata.num_rows,
                stats=_stats(metadata, arrow_schema),
            )
        )
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
    """Delta file statistics of flat columns: ``numRecords``, ``nullCount``, min and max values.

    Min/max come from the row-group statistics of the footer; a column gets them only when every
    row group has them and they are finite (floats) and short (strings up to 32 characters, so
    no truncated bound is ever recorded as exact).
    """
    import pyarrow as pa

    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    null_count: dict[str, int] = {}
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    for field in arrow_schema:
        if pa.types.is_nested(field.type) or field.name not in paths:
            continue
        column, total = paths[field.name], 0
        lows: list[Any] = []
        highs: list[Any] = []
        bounded = True
        for group in range(metadata.num_row_groups):
            column_stats = metadata.row_group(group).column(column).statistics
            if column_stats is None or not column_stats.has_null_count:
                break
            total += column_stats.null_count
            if column_stats.has_min_max:
                lows.append(column_stats.min)
                highs.append(column_stats.max)
            elif column_stats.null_count != metadata.row_group(group).num_rows:
                bounded = False
        else:
            null_count[field.name] = total
            if bounded and lows:
                low = _json_bound(min(lows), field.type)
                high = _json_bound(max(highs), field.type, upper=True)
                if low is not None and high is not None:
                    minimum[field.name], maximum[field.name] = low, high
    if minimum:
        stats["minValues"] = minimum
        stats["maxValues"] = maximum
    if null_count:
        stats["nullCount"] = null_count
    return json.dumps(stats, allow_nan=False)


def _json_bound(value: Any, dtype: pa.DataType, *, upper: bool = False) -> Any:
    """A footer min/max as the JSON value Delta statistics use, or None if it cannot be exact.

    Timestamps have millisecond precision in Delta statistics: an upper bound is rounded up.
    """
    import math

    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_timestamp(dtype):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        if upper and value.microsecond % 1000:
            value += dt.timedelta(microseconds=1000 - value.microsecond % 1000)
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if pa.types.is_date(dtype):
        return value.isoformat() if isinstance(value, dt.date) else None
    if pa.types.is_boolean(dtype):
        return bool(value)
    if pa.types.is_integer(dtype):
        return int(value)
    if pa.types.is_floating(dtype):
        number = float(value)
        return number if math.isfinite(number) else None
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        text = value.decode() if isinstance(value, bytes) else str(value)
        return text if len(text) <= 32 else None
    return None


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

"""Writers that stage Parquet files for one delta-rs commit: from the driver (Arrow tables) or
from Spark's Python workers (one file per task)."""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from gpope.errors import CommitError
from gpope.shell.lake.base import WriteSpec
from gpope.shell.lake.delta_rs.files import HIVE_NULL, conform_arrow, drop_staging, without

if TYPE_CHECKING:
    import pyarrow as pa


__all__ = ["ArrowTableWriter", "Publisher", "StagedFileWriter", "WorkerStaging"]


class Publisher(Protocol):
    """The store that checks and commits what a writer staged
    (:meth:`gpope.shell.lake.delta_rs.store.DeltaRsStore.publish`)."""

    def publish(self, produce: Any, path: str, root: Path, staging: Path, token: str,
                spec: WriteSpec, reported: set[str] | None = None) -> int: ...


class ArrowTableWriter:
    """Stages Arrow tables as Parquet files; :meth:`commit` makes them one Delta commit.

    Created by :meth:`DeltaRsStore.arrow_writer`. Each :meth:`write` is checked against the
    contract (exact column names, types equal or cast without loss, no null in a NOT NULL column)
    and appended to the current staged file (a new file every :data:`ROWS_PER_FILE` rows).
    :meth:`abort` (or an exception inside a ``with`` block) deletes everything staged.
    """

    ROWS_PER_FILE = 8_000_000

    def __init__(
        self, store: Publisher, path: str, root: Path, staging: Path, token: str, spec: WriteSpec,
    ) -> None:  # fmt: skip
        from pyspark.sql.pandas.types import to_arrow_schema

        self._store, self._path, self._root, self._staging = store, path, root, staging
        self._token, self._spec, self._table_name = token, spec, spec.table_name
        self._arrow_schema = to_arrow_schema(spec.schema)
        self._writer: Any = None
        self._file_rows = 0
        self._files = 0
        self.rows = 0
        self.version: int | None = None
        staging.mkdir(parents=True, exist_ok=True)

    def write(self, table: pa.Table) -> None:
        """Stage ``table`` (its columns named as the contract's; cast without loss)."""
        import pyarrow.parquet as pq

        conformed = conform_arrow(table, self._arrow_schema, self._table_name)
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
        self.version = self._store.publish(
            self._close, self._path, self._root, self._staging, self._token, self._spec
        )
        return self.version

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        drop_staging(self._staging)

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
        self, store: Publisher, path: str, root: Path, staging: Path, token: str, spec: WriteSpec,
    ) -> None:  # fmt: skip
        from pyspark.sql.pandas.types import to_arrow_schema

        self._store, self._path, self._root, self._staging = store, path, root, staging
        self._token, self._spec = token, spec
        self.table_name = spec.table_name
        self.partitions = list(spec.partition_by or [])
        self.arrow_schema = to_arrow_schema(without(spec.schema, self.partitions))
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

        self.version = self._store.publish(
            produce, self._path, self._root, self._staging, self._token, self._spec, reported
        )
        return self.version

    def abort(self) -> None:
        drop_staging(self._staging)

    def __enter__(self) -> WorkerStaging:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None or self.version is None:
            self.abort()


class StagedFileWriter:
    """Writes one Parquet file of a task into a :class:`WorkerStaging` folder, under the
    Hive-style sub-folder of ``partition_values`` (runs wherever the folder is visible).

    Each :meth:`write` is checked against the contract ``schema`` (the data columns); small
    tables are gathered into row groups of about :data:`ROW_GROUP_BYTES`. The file keeps a hidden
    name until :meth:`close` succeeds, so a failed task leaves no file the commit could take.
    """

    ROW_GROUP_BYTES = 64 * 2**20

    def __init__(self, folder: str, partition_values: Mapping[str, str | None],
                 schema: pa.Schema, table_name: str) -> None:  # fmt: skip
        parts = [
            f"{c}={HIVE_NULL if v is None else urllib.parse.quote(str(v), safe='')}"
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
        conformed = conform_arrow(table, self._schema, self._table_name)
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

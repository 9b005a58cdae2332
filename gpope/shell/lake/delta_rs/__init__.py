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
   workers write the Parquet files themselves (:class:`~gpope.shell.lake.delta_rs.writers.StagedFileWriter`, pyarrow, under a
   hidden name until the file is complete) into the staging folder of a
   :class:`~gpope.shell.lake.delta_rs.writers.WorkerStaging`
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
   the next write to the table once they are older than
   :data:`~gpope.shell.lake.delta_rs.files.STALE_STAGING_HOURS`.

Reads list the live files of a version with delta-rs, group them by partition values, read each
group with ``spark.read.parquet`` (local ``file:`` paths, glob characters escaped) under the
table's schema and add the partition columns back as literals, so reads never depend on the file
layout. This backend supports local lake roots only, whose path delta-rs can address
(:func:`check_local_root`).

Modules: :mod:`.table` (the log, JVM-free: the only code in gpope that opens ``deltalake``, with
:mod:`.commit`), :mod:`.files` (staging, footers, statistics), :mod:`.commit` (the transaction),
:mod:`.writers` (Arrow and worker writers), :mod:`.store` (Spark reads and writes).
"""

from __future__ import annotations

from gpope.shell.lake.delta_rs.files import STAGING_FOLDER, STALE_STAGING_HOURS
from gpope.shell.lake.delta_rs.store import DeltaRsStore
from gpope.shell.lake.delta_rs.table import DeltaRsTables, check_local_root, local_file_path
from gpope.shell.lake.delta_rs.writers import ArrowTableWriter, StagedFileWriter, WorkerStaging

__all__ = [
    "STAGING_FOLDER",
    "STALE_STAGING_HOURS",
    "ArrowTableWriter",
    "DeltaRsStore",
    "DeltaRsTables",
    "StagedFileWriter",
    "WorkerStaging",
    "check_local_root",
    "local_file_path",
]

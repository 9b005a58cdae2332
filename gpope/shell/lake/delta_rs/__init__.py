"""Delta tables without the Delta JARs: Spark writes Parquet, delta-rs commits it.

Write protocol (one call = one atomic Delta commit):

1. The DataFrame is conformed to the contract (:mod:`gpope.shell.lake.contract`).
2. Spark writes Parquet into a fresh staging folder ``<table>/_gpope_staging/<utc time>-<random>/``
   (given to Hadoop as a literal ``file:`` path, so any local path works); the rows written are
   observed on the write itself. Rows of a Python kernel (``gpope stats``) are written by the
   workers themselves (:class:`~.writers.WorkerStaging`), which report ``(file, rows)``.
3. The driver checks that the staged files hold exactly the rows reported, checks each footer
   against the table's data columns and derives Delta statistics (``numRecords``, ``nullCount``,
   min/max of flat columns).
4. The files move to their Hive-style places; a partition value that would need escaping in a
   folder name puts its file in ``<table>/gpope-escaped/``, so log paths only use
   ``[A-Za-z0-9._=/-]``.
5. The driver commits the adds in one transaction that refuses to land on a newer version than
   the one it read, retrying on a fresh snapshot, so an overwrite never drops a concurrent
   append it did not see.
6. On any failure before the commit the staged and moved files are deleted; staging folders of
   killed runs are removed by a later write once older than :data:`~.files.STALE_STAGING_HOURS`.

Reads group the live files of a version by partition values, read each group with
``spark.read.parquet`` under the table's schema and add the partition columns back as literals.
Local lake roots only (:func:`check_local_root`). :mod:`.table` and :mod:`.commit` are the only
code in gpope that opens ``deltalake``.
"""

from __future__ import annotations

from gpope.shell.lake.delta_rs.files import STAGING_FOLDER, STALE_STAGING_HOURS
from gpope.shell.lake.delta_rs.store import DeltaRsStore
from gpope.shell.lake.delta_rs.table import DeltaRsTables, check_local_root, local_file_path
from gpope.shell.lake.delta_rs.writers import ArrowTableWriter, StagedFileWriter, WorkerStaging

__all__ = ["STAGING_FOLDER", "STALE_STAGING_HOURS", "ArrowTableWriter", "DeltaRsStore",
           "DeltaRsTables", "StagedFileWriter", "WorkerStaging", "check_local_root",
           "local_file_path"]

"""The Delta table layer (docs/ARCHITECTURE.md sections 2 and 5): names, reads, atomic writes, history.

Use :class:`Lake` with a :class:`TableRef`, or the short forms taking a
:class:`~gpope.config.LakeSettings` (:func:`read_table`, :func:`write_table`,
:func:`read_shared_table`, :func:`write_shared_table`, :func:`table_location`,
:func:`shared_table_location`). Whether tables go through Spark's native ``delta`` format or
through Spark-written Parquet committed by delta-rs is decided inside :class:`Lake`, once: both
are a :class:`~gpope.shell.lake.store.TableStore`, registered in
:data:`gpope.shell.lake.store.STORES`.
"""

from __future__ import annotations

from gpope.shell.lake.base import HistoryEntry, PartitionValue, StorageMode, WriteMode
from gpope.shell.lake.layer import (
    Lake,
    read_shared_table,
    read_table,
    shared_table_location,
    table_location,
    write_shared_table,
    write_table,
)
from gpope.shell.lake.names import LAYERS, SHARED_TABLES, TableRef, table_path, uc_table_name

__all__ = ["LAYERS", "SHARED_TABLES", "HistoryEntry", "Lake", "PartitionValue", "StorageMode",
           "TableRef", "WriteMode", "read_shared_table", "read_table", "shared_table_location",
           "table_location", "table_path", "uc_table_name", "write_shared_table", "write_table"]

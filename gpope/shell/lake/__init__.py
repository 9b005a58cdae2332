"""The Delta table layer (docs/ARCHITECTURE.md sections 2 and 5): names, reads, atomic writes, history.

Use :class:`Lake` with a :class:`TableRef`, or the short forms taking a
:class:`~gpope.config.LakeSettings`; the store behind them (:mod:`gpope.shell.lake.store`) is
chosen inside :class:`Lake`, once.
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

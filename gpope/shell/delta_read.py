"""Read a delta-rs table into Arrow without the at-exit abort of threaded scans.

With deltalake 1.6 and pyarrow 25, ``DeltaTable.to_pyarrow_table()`` scans with Arrow's thread
pool, and about half of the processes that did so abort at interpreter exit ("terminate called
without an active exception", exit 134: a joinable ``std::thread`` destroyed during static
teardown; the same symptom as apache/arrow#34314 and delta-io/delta-rs#2184). ``gpope budget show``
exited 134 in 7 of 12 quiet runs on 2026-11-23. A scan on the calling thread leaves no such thread
(0 of 12 runs aborted). Every delta-rs read in gpope goes through :func:`read_table`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["read_table"]


def read_table(table: DeltaTable) -> pa.Table:
    """The whole table, at the version it was opened at, as Arrow (scanned on this thread)."""
    return table.to_pyarrow_dataset().to_table(use_threads=False)

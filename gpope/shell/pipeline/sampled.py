"""Getting trajectory statistics from the gold table to the driver: all at once, or as sampled.

* :func:`load_statistics`: all m rows of a spec as one dense
  :class:`~gpope.core.statistics.TrajectoryStats` (when ``m * row size`` fits the configured
  ``evaluation.in_memory_limit_mb``).
* :func:`spark_fetcher`: a fetch function for :func:`gpope.shell.pipeline.driver.run_gpope_streamed`.
  Each call joins a block of the sample plan ``(pos, traj_index)`` with the statistics table in
  Spark (the plan block is broadcast; nothing is written) and brings exactly the sampled rows to
  the driver as Arrow, put back in plan order. Memory is bounded by the block size, whatever m is.

The plan is secret (docs/ARCHITECTURE.md section 4): it exists only in the driver's and executors' memory for
the duration of the query and is never logged or written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from gpope.errors import DataError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from gpope.core.statistics import TrajectoryStats

__all__ = ["load_statistics", "row_bytes", "spark_fetcher", "stats_from_arrow"]

_COLUMNS = ("traj_index", "tau", "A", "b", "C")


def row_bytes(n: int) -> int:
    """Bytes of one statistics row held densely on the driver (A, C: n*n, b: n, plus ids)."""
    return 8 * (2 * n * n + n) + 16


def _flat(table: pa.Table, name: str, rows: int, width: int) -> np.ndarray:
    import pyarrow.compute as pc

    col = table.column(name).combine_chunks()
    values = pc.list_flatten(col).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    if values.size != rows * width:
        raise DataError(
            f"trajectory_stats.{name} must hold {width} values per row for this spec; got "
            f"{values.size} values in {rows} rows. Re-run `gpope stats` for this spec."
        )
    return values.reshape(rows, width)


def stats_from_arrow(table: pa.Table, n: int, *, normalization: str, ids: np.ndarray | None = None) -> TrajectoryStats:
    """Dense statistics from Arrow rows ``traj_index, tau, A, b, C`` (n features).

    With ``ids`` None the rows must hold every trajectory 0..m-1 once (any order); otherwise row r
    of the result is the row whose ``pos`` column equals r (plan order, repeats allowed).
    """
    from gpope.core.statistics import TrajectoryStats

    k = table.num_rows
    if ids is None:
        index = table.column("traj_index").to_numpy()
    else:
        pos = table.column("pos").to_numpy()
        order = np.argsort(pos, kind="stable")
        if k != len(ids) or not np.array_equal(pos[order], np.arange(len(ids))):
            raise DataError(
                f"{len(ids) - k} sampled trajectories have no statistics row; the statistics table "
                "changed during the run. Re-run `gpope stats`, then evaluate again."
            )
        table = table.take(order)
        index = np.arange(k)
    rows = {
        "traj_index": index,
        "tau": table.column("tau").to_numpy(),
        "A": _flat(table, "A", k, n * n),
        "b": _flat(table, "b", k, n),
        "C": _flat(table, "C", k, n * n),
    }
    return TrajectoryStats.from_rows(rows, normalization=normalization)


def load_statistics(stats: DataFrame, n: int, *, normalization: str) -> TrajectoryStats:
    """All rows of a spec's statistics (``stats`` already filtered to the spec) on the driver."""
    table = stats.select(*_COLUMNS).toArrow()
    if table.num_rows == 0:
        raise DataError("No trajectory statistics to load; run `gpope stats` first.")
    return stats_from_arrow(table, n, normalization=normalization)


def spark_fetcher(
    spark: SparkSession, stats: DataFrame, n: int, *, normalization: str
) -> Callable[[np.ndarray], TrajectoryStats]:
    """A fetch function: ids in plan order -> their statistics (Spark join, Arrow to driver)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    table = stats.select(*_COLUMNS)

    def fetch(ids: np.ndarray) -> TrajectoryStats:
        ids = np.asarray(ids, dtype=np.int64)
        plan = spark.createDataFrame(
            pa.table({"pos": pa.array(np.arange(len(ids), dtype=np.int64)), "traj_index": pa.array(ids)})
        )
        joined = F.broadcast(plan).join(table, on="traj_index", how="inner")
        arrow = joined.select("pos", "traj_index", "tau", "A", "b", "C").toArrow()
        return stats_from_arrow(arrow, n, normalization=normalization, ids=ids)

    return fetch

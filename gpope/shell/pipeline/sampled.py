"""Getting trajectory statistics from the gold table to the driver: all at once, or as sampled.

The layout (dense, sparse or streamed) is decided from public quantities only
(:func:`gpope.core.evaluation.plan_loading`). :func:`load_statistics` brings all m rows of a spec
as one :class:`~gpope.core.statistics.TrajectoryStats` (sparse rows built on the executors, only
nonzero float64 entries cross). :func:`streamed_fetcher` is the fetch function of the streamed
path: where the executors share the driver's disk the statistics are copied once into a dense
row file in a private temporary folder, elsewhere (:func:`spark_fetcher`) each block of the
sample plan is joined with the table in Spark. Either way the driver holds one block (and the
next, prefetched) and the rows are the stored float64 values: the same release as in memory.

The plan is secret (docs/ARCHITECTURE.md section 4): it lives only in memory for the query and is
never logged or written.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from gpope.errors import DataError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from gpope.core.statistics import TrajectoryStats

__all__ = ["collect_arrow", "load_group_statistics", "load_statistics", "spark_fetcher",
           "stats_from_arrow", "streamed_fetcher"]

_COLUMNS = ("traj_index", "tau", "A", "b", "C")
_SPARSE_SCHEMA = "traj_index long, tau long, b array<double>, nz_index array<int>, nz_value array<double>"
_SPARSE_CHUNK = 1024  # rows densified at once in a Python worker (bounds its memory)


def _flat(table: pa.Table | pa.RecordBatch, name: str, rows: int, width: int) -> np.ndarray:
    import pyarrow.compute as pc

    col = table.column(name)
    # per chunk, without combine_chunks(): one chunk's flattened values are used in place
    parts = [pc.list_flatten(c).to_numpy(zero_copy_only=False) for c in getattr(col, "chunks", [col])]
    values = (parts[0] if len(parts) == 1 else np.concatenate(parts or [np.empty(0)]))
    values = values.astype(np.float64, copy=False)
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


def _shares_driver_disk(session: SparkSession) -> bool:
    """True on a classic session with a local master: the executors write to this machine's
    disk (Spark Connect: the server's executors need not share it)."""
    from gpope.shell.spark import is_connect

    return not is_connect(session) and str(session.conf.get("spark.master", "")).startswith("local")


def collect_arrow(df: DataFrame) -> pa.Table:
    """All rows of ``df`` as one Arrow table on the driver, without the cap of the driver JVM's
    task results (``spark.driver.maxResultSize``): with a local master the executors write
    Parquet into a temporary folder the driver reads; elsewhere ``toArrow()``, with the cluster's
    driver sized for it (``conf/databricks.yaml``)."""
    import pyarrow.parquet as pq

    if not _shares_driver_disk(df.sparkSession):
        return df.toArrow()
    with tempfile.TemporaryDirectory(prefix="gpope-collect-") as tmp:
        folder = f"{tmp}/rows"
        df.write.mode("overwrite").parquet(folder)
        return pq.read_table(folder)  # chunked like toArrow()'s table; every reader here takes chunks


def load_statistics(stats: DataFrame, n: int, *, normalization: str,
                    layout: str = "dense") -> TrajectoryStats:
    """All rows of a spec's statistics (``stats`` already filtered to the spec) on the driver,
    in the ``layout`` "dense" or "sparse" (see :func:`gpope.core.evaluation.plan_loading`)."""
    table = _collect(stats, n, layout)
    if table.num_rows == 0:
        raise DataError("No trajectory statistics to load; run `gpope stats` first.")
    return _from_arrow(table, n, normalization, layout)


def _collect(stats: DataFrame, n: int, layout: str) -> pa.Table:
    if layout == "sparse":
        return collect_arrow(stats.select(*_COLUMNS).mapInArrow(
            functools.partial(_sparse_batches, n=n), _SPARSE_SCHEMA))
    return collect_arrow(stats.select(*_COLUMNS))


def _from_arrow(table: pa.Table, n: int, normalization: str, layout: str) -> TrajectoryStats:
    build = _sparse_from_arrow if layout == "sparse" else stats_from_arrow
    return build(table, n, normalization=normalization)


def load_group_statistics(stats: DataFrame, n: int, groups: np.ndarray, *, normalization: str,
                          layout: str = "dense") -> Iterator[TrajectoryStats]:
    """The statistics of each disjoint group 0..K-1 in turn (``groups[traj_index]`` is the group
    of each trajectory), from ONE load of all rows through :func:`load_statistics`' memory-safe
    route (:func:`collect_arrow`, ``layout`` "dense" or "sparse"); each group's trajectories in
    ``traj_index`` order. Peak memory: the loaded rows plus one group's statistics."""
    import pyarrow as pa

    table = _collect(stats, n, layout)
    index = table.column("traj_index").to_numpy().astype(np.int64)
    if table.num_rows != len(groups) or not np.array_equal(np.sort(index), np.arange(len(groups))):
        raise DataError(
            f"The statistics hold {table.num_rows} rows, the groups {len(groups)} trajectories; "
            "the statistics changed during the run. Re-run `gpope stats`, then evaluate again."
        )
    of_row = np.asarray(groups, dtype=np.int64)[index]
    for g in range(int(np.max(groups)) + 1):
        rows = np.flatnonzero(of_row == g)
        part = table.take(pa.array(rows))
        ids = np.sort(index[rows])  # the group's trajectories, renumbered 0..size-1 in order
        local = np.searchsorted(ids, index[rows])
        part = part.set_column(part.schema.get_field_index("traj_index"), "traj_index",
                               pa.array(local, type=pa.int64()))
        yield _from_arrow(part, n, normalization, layout)


def _sparse_batches(batches: Iterator[pa.RecordBatch], n: int) -> Iterator[pa.RecordBatch]:
    """Executor side of the sparse load: each row's nonzero entries of [vec A, vec C]."""
    import pyarrow as pa

    for batch in batches:
        for lo in range(0, batch.num_rows, _SPARSE_CHUNK):
            part = pa.Table.from_batches([batch.slice(lo, _SPARSE_CHUNK)])
            k = part.num_rows
            ac = np.concatenate([_flat(part, "A", k, n * n), _flat(part, "C", k, n * n)], axis=1)
            mask = ac != 0
            offsets = pa.array(np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int32))
            yield pa.RecordBatch.from_arrays(
                [part.column("traj_index").combine_chunks().cast(pa.int64()),
                 part.column("tau").combine_chunks().cast(pa.int64()),  # stored as int
                 part.column("b").combine_chunks().cast(pa.list_(pa.float64())),
                 pa.ListArray.from_arrays(offsets, pa.array(np.nonzero(mask)[1].astype(np.int32))),
                 pa.ListArray.from_arrays(offsets, pa.array(ac[mask]))],
                names=["traj_index", "tau", "b", "nz_index", "nz_value"])


def _sparse_from_arrow(table: pa.Table, n: int, *, normalization: str) -> TrajectoryStats:
    """Sparse statistics from the executors' rows ``traj_index, tau, b, nz_index, nz_value``,
    one Arrow record batch at a time (no full-size copy of the entries besides the result)."""
    import pyarrow.compute as pc

    from gpope.core.statistics import TrajectoryStats

    def chunks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for batch in table.select(["nz_index", "nz_value"]).to_batches():
            yield (pc.list_flatten(batch.column(0)).to_numpy(zero_copy_only=False),
                   pc.list_flatten(batch.column(1)).to_numpy(zero_copy_only=False))

    return TrajectoryStats.from_sparse_chunks(
        traj_index=table.column("traj_index").to_numpy(), tau=table.column("tau").to_numpy(),
        b=_flat(table, "b", table.num_rows, n),
        lengths=pc.list_value_length(table.column("nz_index")).to_numpy(zero_copy_only=False),
        chunks=chunks(), normalization=normalization)


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


@contextlib.contextmanager
def streamed_fetcher(spark: SparkSession, stats: DataFrame, n: int, *, m: int,
                     normalization: str) -> Iterator[Callable[[np.ndarray], TrajectoryStats]]:
    """The streamed path's fetch function (ids in plan order -> their statistics), for the run:
    a row file in a private temporary folder (removed when the ``with`` block ends) where the
    executors share the driver's disk and it has room, else :func:`spark_fetcher`. The choice
    reads public quantities (m, n) and the machine, never the data."""
    folder = tempfile.gettempdir()
    need = 8 * m * (2 * n * n + n)
    if not _shares_driver_disk(stats.sparkSession) or shutil.disk_usage(folder).free < 2 * need:
        yield spark_fetcher(spark, stats, n, normalization=normalization)
        return
    with tempfile.TemporaryDirectory(prefix="gpope-stream-", dir=folder) as tmp:
        yield _row_file_fetcher(stats, n, m=m, folder=Path(tmp), normalization=normalization)


def _row_file_fetcher(stats: DataFrame, n: int, *, m: int, folder: Path,
                      normalization: str) -> Callable[[np.ndarray], TrajectoryStats]:
    """Copy the statistics into ``folder`` (``ac``: m x n x 2n, ``b``: m x n, float64, row
    ``traj_index``) and return a fetch function reading from it. Each Parquet batch is written
    through a mapping opened and closed for it, each fetch reads through another, so the
    process holds one batch or one block, not the file.

    Raises:
        DataError: the rows are not exactly the trajectories 0..m-1, or hold non-finite values.
    """
    import pyarrow.parquet as pq

    from gpope.core.statistics import TrajectoryStats

    parquet = folder / "rows"
    stats.select(*_COLUMNS).write.parquet(str(parquet))
    ac_file, b_file = folder / "ac.f64", folder / "b.f64"
    for path, width in ((ac_file, 2 * n * n), (b_file, n)):
        with open(path, "wb") as f:
            f.truncate(8 * m * width)
    tau = np.zeros(m, dtype=np.int64)
    seen = np.zeros(m, dtype=bool)
    # one file and one row group at a time, no read-ahead: memory holds one batch of rows
    batches = (batch for path in sorted(parquet.glob("*.parquet"))
               for batch in pq.ParquetFile(path).iter_batches(batch_size=_SPARSE_CHUNK,
                                                              columns=list(_COLUMNS)))
    for batch in batches:
        k = batch.num_rows
        if k == 0:
            continue
        index = batch.column("traj_index").to_numpy(zero_copy_only=False).astype(np.int64)
        if index.min() < 0 or index.max() >= m or seen[index].any() or len(np.unique(index)) < k:
            raise DataError(
                f"The statistics rows are not the trajectories 0..{m - 1} once each; the "
                "statistics changed during the run. Re-run `gpope stats`, then evaluate again.")
        seen[index] = True
        ac = np.empty((k, n, 2 * n))
        ac[:, :, :n] = _flat(batch, "A", k, n * n).reshape(k, n, n)
        ac[:, :, n:] = _flat(batch, "C", k, n * n).reshape(k, n, n)
        b = _flat(batch, "b", k, n)
        if not (np.isfinite(ac).all() and np.isfinite(b).all()):
            raise DataError("The statistics hold non-finite values; re-run `gpope stats`.")
        tau[index] = batch.column("tau").to_numpy(zero_copy_only=False)
        for path, rows, shape in ((ac_file, ac, (m, n, 2 * n)), (b_file, b, (m, n))):
            mapped = np.memmap(path, dtype=np.float64, mode="r+", shape=shape)
            mapped[index] = rows
            del mapped
    shutil.rmtree(parquet)
    if not seen.all():
        raise DataError(
            f"{int(m - seen.sum())} trajectories have no statistics row; the statistics changed "
            "during the run. Re-run `gpope stats`, then evaluate again.")

    def fetch(ids: np.ndarray) -> TrajectoryStats:
        ids = np.asarray(ids, dtype=np.int64)
        ac_map = np.memmap(ac_file, dtype=np.float64, mode="r", shape=(m, n, 2 * n))
        b_map = np.memmap(b_file, dtype=np.float64, mode="r", shape=(m, n))
        try:  # fancy indexing copies: nothing of the mapping outlives the call
            ac, b = np.asarray(ac_map[ids]), np.asarray(b_map[ids])
        finally:
            del ac_map, b_map
        return TrajectoryStats(representation="dense", tau=tau[ids], b=b, ac=ac,
                               normalization=normalization)

    return fetch

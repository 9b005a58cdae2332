"""The SSP release's data step as a Spark aggregate over ``trajectory_stats``.

:func:`spark_group_sums` computes, distributed, the K group sums of the jointly clipped
per-trajectory vectors ``[vec A_i, b_i, vec C_i]`` (:mod:`gpope.core.ssp`): each partition's Arrow
batches are clipped, grouped by the keyed hash and summed with numpy (``mapInArrow``); only the
partial sums reach the driver. Noise is added once, on the driver
(:func:`gpope.core.ssp.release_noisy_statistics`). The rows come as a DataFrame (native storage),
or with delta-rs as the version's Parquet files (:func:`statistics_files`) read by the Python
workers with pyarrow. The result equals :func:`gpope.core.ssp.clipped_group_sums` of the same
rows (to rounding, 1e-12). :func:`public_clip` gives the default clip from PUBLIC data only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from gpope.errors import ConfigError, DataError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["StatisticsFiles", "public_clip", "public_residual_bound", "spark_group_sums",
           "spark_moment_sum", "statistics_files"]


def _group_kernel(clip: float, key: int, groups: int):  # -> Callable
    """(traj_index (k,), vectors (k, 2n^2+n)) -> (groups, 2n^2+n) clipped group sums."""
    def kernel(idx: np.ndarray, vec: np.ndarray) -> np.ndarray:
        from gpope.core.ssp import assign_groups, clip_statistics, group_sums

        return group_sums(clip_statistics(vec, clip), assign_groups(idx, key, groups), groups)

    return kernel


def _moment_kernel(n: int, clip: float, theta: np.ndarray, bound: float):  # -> Callable
    """(traj_index, vectors) -> (1, n(n+1)/2) sum of clipped residual second moments."""
    theta = np.asarray(theta, dtype=np.float64).copy()

    def kernel(idx: np.ndarray, vec: np.ndarray) -> np.ndarray:
        from gpope.core.ssp import clipped_moment_sum

        return clipped_moment_sum(vec, theta, n=n, clip=clip, bound=bound)[None, :]

    return kernel


def _block_sums(blocks: Iterator[pa.RecordBatch], n: int, kernel, rows: int,
                width: int) -> Iterator[pa.RecordBatch]:
    """The one partial-sum batch of ``kernel`` over Arrow ``blocks`` of statistics rows
    (columns traj_index, A, b, C): ``rows`` rows ``group, sums, rows``; nothing without rows."""
    import pyarrow as pa

    from gpope.core.ssp import statistics_vectors
    from gpope.shell.pipeline.sampled import _flat

    acc = np.zeros((rows, width))
    seen = 0
    for batch in blocks:
        k = batch.num_rows
        if k == 0:
            continue
        vec = statistics_vectors(_flat(batch, "A", k, n * n), _flat(batch, "b", k, n),
                                 _flat(batch, "C", k, n * n))
        acc += kernel(batch.column("traj_index").to_numpy(), vec)
        seen += k
    if seen == 0:
        return
    offsets = pa.array(np.arange(0, (rows + 1) * width, width, dtype=np.int32))
    sums = pa.ListArray.from_arrays(offsets, pa.array(acc.reshape(-1), type=pa.float64()))
    yield pa.RecordBatch.from_arrays(
        [pa.array(np.arange(rows, dtype=np.int32)), sums, pa.array(np.full(rows, seen, np.int64))],
        names=["group", "sums", "rows"],
    )


_COLUMNS = ["traj_index", "A", "b", "C"]


def _file_tasks(paths: tuple[str, ...], max_bytes: int) -> list[list[str]]:
    """The files split into tasks as Spark's own file scan splits them (every task costs a
    Python worker round trip): about ``max_bytes`` per task, at least one file each, largest
    files first into the lightest task."""
    sizes = {p: os.path.getsize(p) for p in paths}
    count = max(1, min(len(paths), -(-sum(sizes.values()) // max(max_bytes, 1))))
    tasks: list[list[str]] = [[] for _ in range(count)]
    load = [0] * count
    for p in sorted(paths, key=lambda q: -sizes[q]):
        i = load.index(min(load))
        tasks[i].append(p)
        load[i] += sizes[p]
    return tasks


def _file_partial_sums(tasks: list[list[str]], batch_rows: int, n: int, kernel, rows: int,
                       width: int):  # -> Callable
    """mapInArrow function over ``spark.range(len(tasks))``: task r reads its files
    (``tasks[r]``) with pyarrow, ``batch_rows`` rows at a time (memory bounded like Spark's own
    Arrow batches), and yields one partial sum of ``kernel`` as :func:`_block_sums` does."""
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def blocks() -> Iterator[pa.RecordBatch]:
            import pyarrow.parquet as pq

            for ids in batches:
                for path in (p for i in ids.column(0).to_numpy() for p in tasks[int(i)]):
                    try:
                        reader = pq.ParquetFile(path)
                    except (OSError, ValueError) as exc:
                        raise DataError(
                            f"Cannot read the statistics file {path} ({exc}): the table changed "
                            "or was vacuumed during the run. Evaluate again."
                        ) from exc
                    missing = sorted(set(_COLUMNS) - set(reader.schema_arrow.names))
                    if missing:
                        raise DataError(
                            f"The statistics file {path} has no column(s) {missing}. Re-run "
                            "`gpope stats` for this spec."
                        )
                    yield from reader.iter_batches(batch_size=batch_rows, columns=_COLUMNS,
                                                   use_threads=False)

        yield from _block_sums(blocks(), n, kernel, rows, width)

    return run


@dataclass(frozen=True)
class StatisticsFiles:
    """One spec's ``trajectory_stats`` rows as the live Parquet files of one pinned table version
    (delta-rs storage), read by the Python workers of a few Spark tasks with pyarrow, so the wide
    ``A`` and ``C`` lists never pass through the JVM; only the partial sums reach the driver."""

    spark: SparkSession
    paths: tuple[str, ...]


def statistics_files(spark: SparkSession, config: GpopeConfig, *, dataset: str, spec_id: str,
                     version: int | None = None) -> StatisticsFiles | None:
    """One spec's statistics (as of ``version``) as files for :func:`spark_group_sums`; None
    with the native storage or an unpartitioned table (the caller passes the DataFrame).

    Raises:
        TableNotFoundError: stats never ran for the dataset.
    """
    from gpope.shell import lake

    target = lake.Lake.from_settings(spark, config.lake)
    try:
        paths = target.data_files(lake.TableRef("gold", "trajectory_stats", dataset),
                                  version=version, partition={"spec_id": spec_id})
    except ConfigError:  # not partitioned by spec_id (a hand-made table): read the DataFrame
        return None
    return None if paths is None else StatisticsFiles(spark=spark, paths=tuple(paths))


def _bytes(text: str) -> int:
    """A Spark byte size (``134217728``, ``128m``, ``1g``...) in bytes."""
    text = str(text).strip().lower().removesuffix("b")
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def _aggregate(stats: DataFrame | StatisticsFiles, n: int, kernel, rows: int, width: int,
               expected_rows: int | None) -> np.ndarray:
    """(rows, width) total of ``kernel`` over all statistics rows (distributed partial sums)."""
    import pyarrow as pa

    schema = "group int, sums array<double>, rows long"
    if isinstance(stats, StatisticsFiles):
        spark = stats.spark
        batch_rows = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch") or 10_000)
        max_bytes = _bytes(spark.conf.get("spark.sql.files.maxPartitionBytes") or "128m")
        tasks = _file_tasks(stats.paths, max_bytes) if stats.paths else []
        fn = _file_partial_sums(tasks, max(batch_rows, 1), n, kernel, rows, width)
        partials = (
            spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(fn, schema).toArrow()
            if tasks else pa.table({"group": pa.array([], pa.int32())})
        )
    else:
        partials = (
            stats.select(*_COLUMNS).mapInArrow(
                functools.partial(_block_sums, n=n, kernel=kernel, rows=rows, width=width),
                schema).toArrow()
        )
    out = np.zeros((rows, width))
    if partials.num_rows:
        import pyarrow.compute as pc

        g = partials.column("group").to_numpy()
        flat = pc.list_flatten(partials.column("sums").combine_chunks()).to_numpy(zero_copy_only=False)
        np.add.at(out, g, flat.reshape(-1, width))
        seen = int(partials.column("rows").to_numpy()[g == 0].sum())
    else:
        seen = 0
    if expected_rows is not None and seen != expected_rows:
        raise DataError(
            f"The SSP aggregate summed {seen} statistics rows but m = {expected_rows}; the table "
            "changed during the run. Re-run `gpope stats`, then evaluate again."
        )
    return out


def spark_group_sums(stats: DataFrame | StatisticsFiles, *, n: int, clip: float, key: int = 0, groups: int = 1,
                     expected_rows: int | None = None) -> np.ndarray:
    """(groups, 2n^2+n) sums of the jointly clipped statistics rows of ``stats`` (one spec).

    ``stats`` is a DataFrame or the files of :func:`statistics_files`; ``key`` is the secret
    group key (never logged); ``expected_rows`` (m), when given, must equal the rows summed.

    Raises:
        DataError: malformed arrays, or a row count different from ``expected_rows``.
    """
    return _aggregate(stats, n, _group_kernel(float(clip), int(key), int(groups)), int(groups),
                      2 * n * n + n, expected_rows)


def spark_moment_sum(stats: DataFrame | StatisticsFiles, *, n: int, clip: float, theta: np.ndarray, bound: float,
                     expected_rows: int | None = None) -> np.ndarray:
    """(n(n+1)/2,) sum of the second moments of the residuals ``b_i - A_i theta`` of the clipped
    rows, each residual clipped to ``bound`` (equals :func:`gpope.core.ssp.clipped_moment_sum`)."""
    return _aggregate(stats, n, _moment_kernel(n, float(clip), theta, float(bound)), 1,
                      n * (n + 1) // 2, expected_rows)[0]


def public_residual_bound(spec: EvaluationSpec, theta: np.ndarray, *, clip: float,
                          n_trajectories: int, quantile: float, max_length: int | None = None) -> float:
    """The clip bound of the residuals ``b_i - A_i theta`` in the moments release: the
    ``quantile`` of their norms on the PUBLIC cohort of the spec's simulator, never above the
    bound every clipped row satisfies (:func:`gpope.core.ssp.residual_bound`); that bound when
    the spec has no simulator. ``theta`` is public (the first release's estimate)."""
    from gpope.core.ssp import residual_bound, residuals

    worst = residual_bound(theta, clip)
    if spec.domain is None or n_trajectories <= 0:
        return worst
    vec = _public_vectors(spec, n_trajectories, max_length)
    from gpope.core.ssp import clip_statistics

    norms = np.linalg.norm(residuals(clip_statistics(vec, clip), theta, spec.n_features), axis=1)
    q = float(np.quantile(norms, quantile))
    return min(worst, q) if q > 0 else worst


def _public_vectors(spec: EvaluationSpec, n_trajectories: int, max_length: int | None) -> np.ndarray:
    """(k, 2n^2+n) statistics vectors of the spec's public cohort (cached by the public module)."""
    from gpope.core.envs.cohort import public_cohort_transitions
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    tr = public_cohort_transitions(spec.domain, n_trajectories, max_length)
    rows = statistics_of_transitions(tr, spec).to_rows()
    return statistics_vectors(rows["A"], rows["b"], rows["C"])


def public_clip(spec: EvaluationSpec, *, n_trajectories: int, quantile: float,
                max_length: int | None = None) -> float:
    """The default SSP clip bound: the ``quantile`` of per-trajectory ``||[A_i, b_i, C_i]||`` on a
    PUBLIC cohort simulated from the spec's domain (no private row is read).

    Raises:
        ConfigError: the spec has no domain (no public simulator) or the public cohort is disabled:
            the clip must then be given (``--ssp-clip`` or ``evaluation.ssp_clip``).
    """
    if spec.domain is None or n_trajectories <= 0:
        default = ("; or drop --estimator and the solver flags: the tuning-free private default "
                   "chooses its clip privately inside the run's budget (docs/OWN_DATA.md)"
                   if spec.evaluation is None else "")
        raise ConfigError(
            f"Spec {spec.name!r} has no public simulator (no 'domain'), so the SSP clip bound cannot "
            "be derived from public data; give it with --ssp-clip or evaluation.ssp_clip "
            f"(a public bound on the L2 norm of one trajectory's [A_i, b_i, C_i]){default}."
        )
    norms = np.linalg.norm(_public_vectors(spec, n_trajectories, max_length), axis=1)
    clip = float(np.quantile(norms, quantile))
    if not clip > 0:
        raise DataError(f"The public cohort of spec {spec.name!r} gives statistics of norm 0; give --ssp-clip.")
    return clip

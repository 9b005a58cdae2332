"""Stage 3 of the pipeline: silver ``transitions`` -> gold ``trajectory_stats`` for one spec.

:func:`statistics_frame` hash-partitions the transitions by trajectory, sorts each partition by
``(traj_index, t)`` and computes, per Arrow batch of whole trajectories (``mapInArrow``), the
core's per-trajectory statistics with the spec's features, ratios and scales; the result does not
depend on how Spark ordered or batched the rows and equals the core's (to rounding, 1e-12).

:func:`run_stats` replaces the spec's ``spec_id`` partition of the dataset's ``trajectory_stats``
in one atomic commit. With the delta-rs storage the Python workers write the rows as Parquet
straight into the table's staging folder (:meth:`gpope.shell.lake.Lake.worker_staging`), so the
wide ``A``/``C`` lists never go back into the JVM; with the native storage Spark's Delta writer
writes the same rows.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.bounds import CLAMP_REASONS
from gpope.core.trajectories.batch import missing_prob, statistics_and_counts
from gpope.errors import CommitError, DataError
from gpope.shell.pipeline.transitions_arrow import (
    _INPUT_COLUMNS,
    _list_column,
    transitions_from_arrow,
    transitions_to_arrow,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["StatsReport", "read_statistics", "run_stats", "statistics_frame",
           "statistics_version", "trajectory_count", "transitions_from_arrow",
           "transitions_to_arrow"]



@dataclass(frozen=True)
class StatsReport:
    """What one stats run wrote. ``n_transitions``, ``n_trajectories`` (m) and ``clamped``
    (transitions clamped to the spec's public bounds, per reason; all are kept) are noise-free
    counts of private data: private diagnostics for operators only."""

    dataset: str
    spec_id: str
    spec_name: str
    table: str
    n_transitions: int
    n_trajectories: int
    n_features: int
    seconds: float
    clamped: dict[str, int] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``; the noise-free counts under ``operator_only``."""
        from gpope.shell.operator import OPERATOR_ONLY, operator_only

        private = ("clamped", "n_transitions", "n_trajectories")
        out = {k: v for k, v in self.__dict__.items() if k not in private}
        out[OPERATOR_ONLY] = operator_only({"n_trajectories": self.n_trajectories,
                                            "n_transitions": self.n_transitions,
                                            "clamped": dict(self.clamped)})
        return out

    def summary(self) -> str:
        """One line, then the noise-free counts under the operator-only heading."""
        from gpope.shell.operator import HEADING

        clamped = (", ".join(f"{k} {v}" for k, v in self.clamped.items())
                   if any(self.clamped.values()) else "none")
        return (
            f"trajectory_stats for {self.dataset} / spec {self.spec_name} ({self.spec_id}): "
            f"n = {self.n_features}, in {self.seconds:.1f} s -> {self.table}\n{HEADING}\n"
            f"  {self.n_trajectories} trajectories (the exact m; released only as the noisy count "
            f"m~), {self.n_transitions} transitions; clamped to the spec's public bounds: {clamped}"
        )


def _statistics_batch(table: pa.Table, spec: EvaluationSpec, *,
                      with_counts: bool = False) -> pa.RecordBatch:
    """One ``trajectory_stats`` row per trajectory of ``table`` (whole trajectories, any ids).

    With ``with_counts``, one more column per clamp reason (:data:`_CLAMPED`): the batch's clamp
    count on its first row, 0 on the others (their sum over all batches is the stage's count).
    """
    import pyarrow as pa

    ids, dense = np.unique(table.column("traj_index").to_numpy(), return_inverse=True)
    table = table.set_column(
        table.schema.get_field_index("traj_index"), "traj_index", pa.array(dense.astype(np.int64))
    )
    transitions = transitions_from_arrow(table, n_trajectories=len(ids),
                                         missing_prob=missing_prob(spec))
    stats, counts, terms = statistics_and_counts(transitions, spec, with_terms=True)
    rows = stats.to_rows()
    columns = {
        "spec_id": pa.array([spec.spec_id] * len(ids), type=pa.string()),
        "traj_index": pa.array(ids.astype(np.int64), type=pa.int64()),
        "tau": pa.array(rows["tau"].astype(np.int32), type=pa.int32()),
        "A": _list_column(rows["A"]),
        "b": _list_column(rows["b"]),
        "C": _list_column(rows["C"]),
    }
    terms_column = _list_column(np.zeros((len(ids), 3)) if terms is None else terms)
    # the spec has no public bounds for the terms: null terms
    columns["policy_terms"] = (terms_column if terms is not None
                               else pa.nulls(len(ids), type=terms_column.type))
    if with_counts:
        for reason, column in _CLAMPED.items():
            first = np.zeros(len(ids), dtype=np.int64)
            first[:1] = counts[reason]
            columns[column] = pa.array(first, type=pa.int64())
    return pa.RecordBatch.from_pydict(columns)


#: clamp reason -> the extra column of :func:`_statistics_kernel` ``with_counts`` that carries it
_CLAMPED = {reason: f"_clamped_{reason}" for reason in CLAMP_REASONS}


def _statistics_kernel(spec: EvaluationSpec, *, with_counts: bool = False) -> Any:
    """mapInArrow function over a partition sorted by ``traj_index`` (each trajectory in one
    partition): statistics of every whole trajectory of each Arrow batch, in one vectorised call;
    a trajectory cut by a batch boundary is carried over to the next batch, so memory stays
    bounded by the batch size (plus one trajectory) whatever the partition's size. With
    ``with_counts``, the clamp counts ride along in extra columns (see :func:`_statistics_batch`)."""

    def kernel(batches: Any) -> Any:
        import pyarrow as pa

        pending: pa.Table | None = None
        for batch in batches:
            table = pa.Table.from_batches([batch])
            if pending is not None:
                table = pa.concat_tables([pending, table])
            if table.num_rows == 0:
                continue
            ids = table.column("traj_index").to_numpy()
            cut = int(np.searchsorted(ids, ids[-1], side="left"))  # start of the last trajectory
            pending = table.slice(cut)
            if cut:
                yield _statistics_batch(table.slice(0, cut), spec, with_counts=with_counts)
        if pending is not None and pending.num_rows:
            yield _statistics_batch(pending, spec, with_counts=with_counts)

    return kernel


def _statistics_file_kernel(spec: EvaluationSpec, folder: str, partition_values: dict[str, Any],
                            schema: pa.Schema, table_name: str) -> Any:
    """mapInArrow function like :func:`_statistics_kernel` ``with_counts``, but the statistics
    rows are written by the Python worker itself into a Delta staging folder
    (:func:`gpope.shell.lake.local.staged_file_writer`, pyarrow): the task returns one row,
    ``file, rows`` and the clamp counts of its partition."""
    statistics = _statistics_kernel(spec, with_counts=True)
    columns = list(schema.names)

    def kernel(batches: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        from gpope.shell.lake.local import staged_file_writer

        writer = staged_file_writer(folder, partition_values, schema, table_name)
        counts = dict.fromkeys(_CLAMPED, 0)
        try:
            for batch in statistics(batches):
                for reason, column in _CLAMPED.items():
                    counts[reason] += int(pc.sum(batch.column(column)).as_py() or 0)
                writer.write(pa.Table.from_batches([batch]).select(columns))
            name, rows = writer.close()
        except BaseException:
            writer.discard()
            raise
        yield pa.RecordBatch.from_pydict({
            "file": pa.array([name], type=pa.string()),
            "rows": pa.array([rows], type=pa.int64()),
            **{c: pa.array([counts[r]], type=pa.int64()) for r, c in _CLAMPED.items()},
        })  # fmt: skip

    return kernel


def clamp_counts(transitions: DataFrame, spec: EvaluationSpec) -> dict[str, int]:
    """Transitions whose importance ratio / raw reward the spec's public bounds clamp, per reason,
    from a pass of the statistics kernel. Noise-free counts of private data: report them only as
    private diagnostics."""
    from pyspark.sql import functions as F

    if spec.importance_weight_bound is None and spec.reward_bounds is None:
        return dict.fromkeys(CLAMP_REASONS, 0)
    frame = statistics_frame(transitions, spec, with_counts=True)
    row = frame.agg(*[F.sum(c).alias(r) for r, c in _CLAMPED.items()]).collect()[0]
    return {r: int(row[r] or 0) for r in CLAMP_REASONS}


def statistics_frame(transitions: DataFrame, spec: EvaluationSpec, *,
                     with_counts: bool = False) -> DataFrame:
    """Lazy DataFrame of ``trajectory_stats`` rows (schema TRAJECTORY_STATS) for ``spec``.

    One row per trajectory: ``spec_id, traj_index, tau, A (n*n, row-major), b (n), C (n*n)``.
    With ``with_counts``, also one long column per clamp reason (``_clamped_<reason>``) whose
    sum is the number of transitions clamped for that reason (the same pass computes both).
    """
    from pyspark.sql.types import LongType, StructField, StructType

    from gpope.shell.schemas import TRAJECTORY_STATS

    schema = TRAJECTORY_STATS
    if with_counts:
        schema = StructType(
            [*TRAJECTORY_STATS.fields]
            + [StructField(c, LongType(), False) for c in _CLAMPED.values()]
        )
    # hash-partition by trajectory, sort inside each partition, then one vectorised kernel call
    # per Arrow batch (a per-trajectory groupBy().applyInArrow costs one Python call and one
    # Arrow round trip per patient)
    return _sorted_by_trajectory(transitions).mapInArrow(
        _statistics_kernel(spec, with_counts=with_counts), schema=schema
    )


def _sorted_by_trajectory(transitions: DataFrame) -> DataFrame:
    """The input columns hash-partitioned by trajectory, sorted by ``(traj_index, t)`` inside
    each partition (``spark.sql.shuffle.partitions`` partitions)."""
    partitions = int(transitions.sparkSession.conf.get("spark.sql.shuffle.partitions") or 8)
    return (
        transitions.select(*_INPUT_COLUMNS)
        .repartition(partitions, "traj_index")
        .sortWithinPartitions("traj_index", "t")
    )


def _write_from_workers(transitions: DataFrame, spec: EvaluationSpec,
                        staging: Any) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """The statistics written by the Python workers into ``staging`` (a
    :meth:`gpope.shell.lake.Lake.worker_staging`), not yet committed; returns (the files
    with their rows, for ``staging.commit``, and the clamp counts of the same pass)."""
    from gpope.shell.lake.base import spark_write_cause

    kernel = _statistics_file_kernel(
        spec, staging.folder, {"spec_id": spec.spec_id}, staging.arrow_schema,
        staging.table_name,
    )  # fmt: skip
    try:
        report = ", ".join(["file string", "rows long", *(f"{c} long" for c in _CLAMPED.values())])
        reports = _sorted_by_trajectory(transitions).mapInArrow(kernel, report).collect()
    except Exception as exc:
        cause = spark_write_cause(exc, staging.table_name)
        raise CommitError(
            f"Spark could not compute or write the statistics of {staging.table_name} ({cause}). "
            "Nothing was committed."
        ) from exc
    clamped = {r: sum(int(row[c]) for row in reports) for r, c in _CLAMPED.items()}
    files = [(row["file"], int(row["rows"])) for row in reports if row["file"] is not None]
    return files, clamped


def run_stats(
    spark: SparkSession, config: GpopeConfig, *, dataset: str, spec: EvaluationSpec
) -> StatsReport:
    """Compute the spec's statistics from the dataset's silver transitions and commit them.

    Replaces the ``spec_id`` partition of ``<lake>/gold/<dataset>/trajectory_stats`` in one
    atomic commit (other specs' partitions are kept), then records in a ``stats`` manifest the
    silver transitions version it was computed from (evaluate refuses statistics a later ingest
    replaced: :mod:`~gpope.shell.pipeline.stats_source`).

    Raises:
        TableNotFoundError: the silver transitions are missing (run ``gpope ingest`` first).
        DataError: the dataset has no transitions.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from gpope.shell import interrupts, lake
    from gpope.shell.lake.manifest import read_pinned
    from gpope.shell.pipeline.propensities import statistics_spec
    from gpope.shell.pipeline.stats_source import record_source
    from gpope.shell.schemas import TRAJECTORY_STATS

    start = time.perf_counter()
    spec = statistics_spec(spark, config, dataset, spec)  # no propensities: the pair fit's
    target = lake.Lake.from_settings(spark, config.lake)
    # the last complete ingest (transitions and rejected_events of one manifest)
    transitions, source = read_pinned(target, lake.TableRef("silver", "transitions", dataset))
    n_transitions = transitions.count()
    if n_transitions == 0:
        raise DataError(
            f"Dataset {dataset!r} has no transitions; run `gpope ingest --dataset {dataset}` on "
            "non-empty bronze tables first."
        )
    ref = lake.TableRef("gold", "trajectory_stats", dataset)
    replaced = {"spec_id": spec.spec_id}
    staging = target.worker_staging(ref, mode="replace_where", replace_where=replaced,
                                    partition_by=["spec_id"])  # fmt: skip
    if staging is not None:  # delta-rs storage: the Python workers write the Parquet files
        with staging:
            files, clamped = _write_from_workers(transitions, spec, staging)
            with interrupts.deferred():  # the commit and its source record, never split
                version = staging.commit(files)
                record_source(spark, config, dataset=dataset, spec=spec, stats_version=version,
                              transitions_version=source)
    else:  # native Delta (Databricks): Spark's Delta writer
        # the clamp counts come out of the same pass as the statistics (observed while writing)
        observation = Observation(f"gpope_stats_clamped_{uuid.uuid4().hex[:8]}")
        frame = (
            statistics_frame(transitions, spec, with_counts=True)
            .observe(observation, *[F.sum(c).alias(r) for r, c in _CLAMPED.items()])
            .select(*[f.name for f in TRAJECTORY_STATS.fields])
        )
        version = target.write(frame, ref, mode="replace_where", replace_where=replaced,
                               partition_by=["spec_id"])  # fmt: skip
        interrupts.record(f"{ref}@v{version} (spec {spec.name})")  # visible before its manifest
        observed = observation.get
        if all(r in observed for r in _CLAMPED):
            clamped = {r: int(observed[r] or 0) for r in _CLAMPED}
        else:  # Spark Connect may return no observed metrics for some plans: count separately
            clamped = clamp_counts(transitions, spec)
        record_source(spark, config, dataset=dataset, spec=spec, stats_version=version,
                      transitions_version=source)
    written = read_statistics(
        spark, config, dataset=dataset, spec_id=spec.spec_id, version=version
    )
    m = written.agg(F.count(F.lit(1)).alias("m")).collect()[0]["m"]
    return StatsReport(
        dataset=dataset,
        spec_id=spec.spec_id,
        spec_name=spec.name,
        table=lake.table_location(config.lake, "gold", dataset, "trajectory_stats"),
        n_transitions=int(n_transitions),
        n_trajectories=int(m),
        n_features=spec.n_features,
        seconds=time.perf_counter() - start,
        clamped=clamped,
    )


def statistics_version(spark: SparkSession, config: GpopeConfig, *, dataset: str) -> int:
    """The current version of the dataset's trajectory_stats table, to pin every later read to.

    Raises:
        TableNotFoundError: stats never ran for the dataset.
    """
    from gpope.shell import lake

    target = lake.Lake.from_settings(spark, config.lake)
    return target.version(lake.TableRef("gold", "trajectory_stats", dataset))


def read_statistics(
    spark: SparkSession,
    config: GpopeConfig,
    *,
    dataset: str,
    spec_id: str,
    version: int | None = None,
) -> DataFrame:
    """The statistics rows of one spec (lazy), as of ``version`` (None: the latest).

    Raises:
        TableNotFoundError: stats never ran for the dataset.
    """
    from pyspark.sql import functions as F

    from gpope.shell import lake

    table = lake.read_table(
        spark, config.lake, "gold", dataset, "trajectory_stats", version=version
    )
    return table.where(F.col("spec_id") == spec_id)


def trajectory_count(
    spark: SparkSession,
    config: GpopeConfig,
    *,
    dataset: str,
    spec: EvaluationSpec,
    version: int | None = None,
) -> int:
    """m, the number of trajectories with statistics for ``spec``, at the ``version`` the
    statistics are read from (one snapshot).

    Raises:
        DataError: no statistics for this spec (run ``gpope stats`` first).
    """
    m = read_statistics(
        spark, config, dataset=dataset, spec_id=spec.spec_id, version=version
    ).count()
    if m == 0:
        raise DataError(
            f"No trajectory statistics for spec {spec.name!r} ({spec.spec_id}) in dataset "
            f"{dataset!r}; run `gpope stats --dataset {dataset} --spec <the spec file>` first."
        )
    return int(m)

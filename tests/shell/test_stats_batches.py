"""Clamp counts of the stats stage do not depend on how the engine batches the transitions.

Found through Spark Connect, whose server partitions the silver rows differently: a batch holding
trajectories 0..29 and 35..39 only was taken for a malformed cohort.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from gpope.core.envs import mountaincar
from gpope.core.spec import EvaluationSpec
from gpope.core.trajectories.batch import bounded
from gpope.shell.pipeline.stats import clamp_counts, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

SPEC = {
    "name": "mc_batches",
    "domain": "mountaincar",
    "gamma": 0.95,
    "normalization": "transition",
    "length_scale": 100,
    "feature_map": {"kind": "fourier", "order": 1, "low": [-1.2, -0.07], "high": [0.6, 0.07]},
    "target_policy": {"kind": "uniform", "n_actions": 3},
    "reference_states": {"bottom": [-0.5, 0.0]},
    "importance_weight_bound": 0.5,  # clamps the ratios above 0.5: a count to compare
    "reward_bounds": [-1.0, 0.0],
}


def _cohort(spark, patients: int, seed: int, max_steps: int):
    """(spec, transitions, Spark frame) of ``patients`` mountain car episodes."""
    spec = EvaluationSpec.from_mapping(SPEC, where="test")
    behaviour = mountaincar.learned_policy("epsilon_greedy", epsilon=0.1)
    transitions = mountaincar.generate(patients, np.random.default_rng(seed), behaviour,
                                       max_steps=max_steps)
    return spec, transitions, spark.createDataFrame(transitions_to_arrow(transitions),
                                                    schema=TRANSITIONS)


@contextmanager
def _arrow_batches(spark, rows: int) -> Iterator[None]:
    """Spark's Arrow batches hold at most ``rows`` rows inside the block."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    previous = spark.conf.get(key)
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.set(key, previous)



def _assert_rows_equal(got, want, m: int) -> None:
    """``got`` (Arrow rows traj_index, tau, A, b, C in any order) holds exactly the core's rows
    ``want`` for trajectories 0..m-1, to 1e-12."""
    import pyarrow.compute as pc

    order = np.argsort(got.column("traj_index").to_numpy())
    assert got.column("traj_index").to_numpy()[order].tolist() == list(range(m))
    assert got.column("tau").to_numpy()[order].tolist() == want["tau"].tolist()
    for name in ("A", "b", "C"):
        values = pc.list_flatten(got.column(name).combine_chunks()).to_numpy()
        np.testing.assert_allclose(values.reshape(m, -1)[order], want[name], rtol=0, atol=1e-12)


def test_clamp_counts_over_partitions_with_gaps_equal_the_core_counts(spark):
    spec, transitions, df = _cohort(spark, 12, seed=3, max_steps=30)
    _, _, want = bounded(transitions, spec)
    assert want["importance_weight_above_bound"] > 0
    # three partitions, each with non-contiguous trajectories (0, 3, 6, ...), one batch each
    gappy = df.repartition(3, (df.traj_index % 3)).sortWithinPartitions("traj_index", "t")
    assert clamp_counts(gappy, spec) == want


def test_statistics_with_trajectories_cut_by_arrow_batches_equal_the_core(spark):
    """Tiny Arrow batches (37 rows) cut most trajectories; the kernel carries them over."""

    from gpope.core.statistics import statistics_from_transitions
    from gpope.shell.pipeline.stats import statistics_frame

    spec, transitions, df = _cohort(spark, 15, seed=4, max_steps=60)
    rho, _, _ = bounded(transitions, spec)
    want = statistics_from_transitions(
        transitions, spec.feature_map, rho, gamma=spec.gamma, normalization=spec.normalization,
        length_scale=spec.length_scale, representation="dense",
    ).to_rows()
    shuffled = df.orderBy((df.traj_index * 7919 + df.t * 104729) % 1009)  # no stored order
    with _arrow_batches(spark, 37):
        got = statistics_frame(shuffled, spec).toArrow()
    _assert_rows_equal(got, want, 15)


def test_clamp_counts_riding_along_the_statistics_pass_equal_the_core_counts(spark):
    """run_stats takes the clamp counts from the statistics pass itself (no second pass)."""
    from pyspark.sql import functions as F

    from gpope.shell.pipeline.stats import _CLAMPED, statistics_frame

    spec, transitions, df = _cohort(spark, 12, seed=5, max_steps=30)
    _, _, want = bounded(transitions, spec)
    assert want["importance_weight_above_bound"] > 0
    with _arrow_batches(spark, 23):  # many batches per partition: each carries its own count
        row = statistics_frame(df, spec, with_counts=True).agg(
            *[F.sum(c).alias(r) for r, c in _CLAMPED.items()], F.count(F.lit(1)).alias("m")
        ).collect()[0]
    assert {r: row[r] for r in _CLAMPED} == want
    assert row["m"] == 12


def test_statistics_the_python_workers_write_equal_the_core_with_their_clamp_counts(spark, tmp_path):
    """run_stats on the delta-rs storage: the Python workers write the gold Parquet files
    themselves (tiny Arrow batches cut trajectories; two tasks); a second engine reads the core's
    statistics in the spec's Hive folder, and the clamp counts are the core's."""
    from pathlib import Path

    from deltalake import DeltaTable

    from gpope.config import load_config
    from gpope.core.statistics import statistics_from_transitions
    from gpope.shell import lake
    from gpope.shell.pipeline.stats import run_stats

    spec, transitions, df = _cohort(spark, 15, seed=6, max_steps=40)
    rho, _, counts = bounded(transitions, spec)
    assert counts["importance_weight_above_bound"] > 0
    want = statistics_from_transitions(
        transitions, spec.feature_map, rho, gamma=spec.gamma, normalization=spec.normalization,
        length_scale=spec.length_scale, representation="dense",
    ).to_rows()
    config = load_config(None, lake={"root": str(tmp_path / "lake")})
    shuffled = df.orderBy((df.traj_index * 7919 + df.t * 104729) % 1009)  # no stored order
    lake.write_table(shuffled, config.lake, "silver", "mc", "transitions", mode="overwrite")
    with _arrow_batches(spark, 37):
        report = run_stats(spark, config, dataset="mc", spec=spec)
    assert report.clamped == counts and report.n_trajectories == 15
    path = lake.table_location(config.lake, "gold", "mc", "trajectory_stats")
    table = DeltaTable(path)
    assert {Path(p).parent.name for p in table.file_uris()} == {f"spec_id={spec.spec_id}"}
    got = table.to_pyarrow_table()
    assert set(got.column("spec_id").to_pylist()) == {spec.spec_id}
    _assert_rows_equal(got, want, 15)
    assert not (Path(path) / "_gpope_staging").exists()

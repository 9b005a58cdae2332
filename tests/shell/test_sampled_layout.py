"""The in-memory loader's layouts: sparse rows (built on the executors) hold exactly the dense ones."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from gpope.core.statistics import trajectory_statistics
from gpope.shell.pipeline.sampled import (
    collect_arrow,
    load_statistics,
)

pytestmark = pytest.mark.spark


def _tabular_rows(m: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Storage rows of one-hot (tabular) statistics: A_i, C_i mostly zero."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 6, m)
    traj = np.repeat(np.arange(m), lengths)
    t = len(traj)
    eye = np.eye(n)
    stats = trajectory_statistics(
        eye[rng.integers(0, n, t)], eye[rng.integers(0, n, t)], rng.normal(size=t),
        rng.uniform(0.5, 1.5, t), traj, m, gamma=0.9, terminal=rng.random(t) < 0.1,
        normalization="transition", length_scale=5.0, representation="dense")
    return stats.to_rows()


def test_sparse_load_equals_dense(spark):
    m, n = 60, 40
    rows = _tabular_rows(m, n, 3)
    perm = np.random.default_rng(4).permutation(m)  # table order differs from traj_index
    table = pa.table({
        "traj_index": rows["traj_index"][perm], "tau": rows["tau"][perm],
        "A": list(rows["A"][perm]), "b": list(rows["b"][perm]), "C": list(rows["C"][perm]),
    })
    # the gold table's column types (tau is an int there)
    df = spark.createDataFrame(table.to_pandas(), schema="traj_index long, tau int, "
                               "A array<double>, b array<double>, C array<double>").repartition(3)
    dense = load_statistics(df, n, normalization="transition", layout="dense")
    sparse = load_statistics(df, n, normalization="transition", layout="sparse")
    assert (dense.representation, sparse.representation) == ("dense", "sparse")
    for a, b in zip(sparse.dense(), dense.dense(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(sparse.tau, dense.tau)


def test_collect_arrow_equals_to_arrow_and_keeps_empty_tables(spark):
    # On a local master collect_arrow goes through executor-written Parquet (no task-result cap);
    assert spark.conf.get("spark.master").startswith("local")  # so that is the path tested here
    # it must hold exactly the rows toArrow() brings, list columns included.
    df = spark.range(0, 500, numPartitions=4).selectExpr(
        "id as traj_index", "array(cast(id as double), id * 0.5) as b")
    got, want = collect_arrow(df), df.toArrow()
    key = [("traj_index", "ascending")]
    assert got.schema.equals(want.schema)
    assert got.sort_by(key).equals(want.sort_by(key))
    assert collect_arrow(df.where("traj_index < 0")).num_rows == 0

"""Benchmark: the SSP release's Spark aggregate vs an in-memory numpy sum, same data, same run.

1e5 per-trajectory statistics rows (``--quick``: 2e4) with n = 9 features (mountain car's order-2
Fourier basis: 2n^2 + n = 171 doubles per row) are written to a temporary lake as the gold
``trajectory_stats`` Delta table (not timed). Then, timed (best of ``--repeat``):

* **spark**: :func:`gpope.shell.pipeline.ssp.spark_group_sums`: read the Delta table, flatten,
  jointly clip, group and sum on Arrow batches in the executors (``mapInArrow``), reduce the
  partial sums on the driver;
* **numpy (reference)**: the same rows already in memory as one (m, 171) array: the core's
  :func:`gpope.core.ssp.clipped_group_sums` (clip + group + sum), and a bare ``vec.sum(axis=0)``.

Prints both times and the ratio (target: Spark within 3x of the in-memory numpy computation), and
checks that both give the same sums (1e-12).

Usage: python benchmarks/ssp_aggregate.py [--quick] [--rows M] [--master local[*]] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2e4 rows instead of 1e5")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--features", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    m = args.rows or (20_000 if args.quick else 100_000)
    n = args.features

    import pyarrow as pa

    from gpope.config import SparkSettings, load_config
    from gpope.core.ssp import clipped_group_sums, statistics_vectors
    from gpope.shell import lake
    from gpope.shell.pipeline.ssp import spark_group_sums
    from gpope.shell.pipeline.stats import _list_column
    from gpope.shell.schemas import TRAJECTORY_STATS
    from gpope.shell.spark import get_spark

    rng = np.random.default_rng(0)
    A = rng.normal(size=(m, n * n)) * 0.05
    b = rng.normal(size=(m, n)) * 0.05
    C = rng.normal(size=(m, n * n)) * 0.05
    vec = statistics_vectors(A, b, C)
    clip = float(np.quantile(np.linalg.norm(vec, axis=1), 0.9))
    table = pa.table({
        "spec_id": pa.array(["bench"] * m), "traj_index": pa.array(np.arange(m, dtype=np.int64)),
        "tau": pa.array(np.full(m, 100, dtype=np.int32)), "A": _list_column(A), "b": _list_column(b),
        "C": _list_column(C),
    })
    spark = get_spark(SparkSettings(master=args.master, shuffle_partitions=8, driver_memory="4g"))
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, lake={"root": f"{tmp}/lake"})
        df = spark.createDataFrame(table, schema=TRAJECTORY_STATS)
        lake.write_table(df, config.lake, "gold", "bench", "trajectory_stats", mode="overwrite")
        stats = lake.read_table(spark, config.lake, "gold", "bench", "trajectory_stats")
        spark_group_sums(stats, n=n, clip=clip, key=1, groups=10)  # warm-up (JVM, workers)
        spark_s, core_s, bare_s = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            got = spark_group_sums(stats, n=n, clip=clip, key=1, groups=10, expected_rows=m)
            spark_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            want = clipped_group_sums([(np.arange(m), vec)], n=n, clip=clip, key=1, groups=10)
            core_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            vec.sum(axis=0)
            bare_s.append(time.perf_counter() - t0)
    equal = bool(np.allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max()))
    spark.stop()
    s, c, r = min(spark_s), min(core_s), min(bare_s)
    result = {"rows": m, "features": n, "doubles_per_row": 2 * n * n + n, "master": args.master,
              "spark_seconds": s, "numpy_clip_group_sum_seconds": c, "numpy_bare_sum_seconds": r,
              "ratio_spark_over_numpy": s / c, "sums_equal_1e-12": equal}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"SSP aggregate of {m} trajectories (n = {n}, {2 * n * n + n} doubles/row, master {args.master}), best of {args.repeat}:\n"
            f"  numpy in memory (clip + group + sum): {c:.3f} s   (bare vec.sum: {r:.3f} s)\n"
            f"  Spark mapInArrow over Delta:          {s:.3f} s\n"
            f"  ratio (Spark / numpy):                {s / c:.2f}x  (target <= 3x); sums equal: {equal}"
        )
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: the SSP release's Spark aggregate vs an in-memory numpy sum, same data, same run.

1e5 per-trajectory statistics rows (``--quick``: 2e4) with n = 9 features (mountain car's order-2
Fourier basis: 2n^2 + n = 171 doubles per row) are written to a temporary lake as the gold
``trajectory_stats`` Delta table (not timed). Then, timed (best of ``--repeat``):

* **spark**: :func:`gpope.shell.pipeline.ssp.spark_group_sums` as ``gpope evaluate`` runs it
  with the delta-rs storage: the table version's files (:func:`gpope.shell.pipeline.ssp.statistics_files`,
  a few Spark tasks whose Python workers read the files with pyarrow), flatten, jointly clip, group
  and sum in the workers (``mapInArrow``), reduce the partial sums on the driver;
* **spark, DataFrame input** (reported, not the target): the same aggregate over the DataFrame
  of the Delta table (Spark's JVM Parquet reader, Arrow batches to the workers): the native Delta
  storage's path on a cluster;
* **numpy (reference)**: the same rows already in memory as one (m, 171) array: the core's
  :func:`gpope.core.ssp.clipped_group_sums` (clip + group + sum), and a bare ``vec.sum(axis=0)``.

Prints both times and the ratio (target: Spark within 3x of the in-memory numpy computation), and
checks that both give the same sums (1e-12).

Usage: python benchmarks/ssp_aggregate.py [--quick] [--rows M] [--master local[*]] [--json]

Also prints the load average at the start and the end (the machine is shared; say it with the
numbers).
"""

from __future__ import annotations

import argparse
import json
import os
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
    from gpope.shell.pipeline.ssp import spark_group_sums, statistics_files
    from gpope.shell.pipeline.stats import _list_column, read_statistics
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
        # partitioned by spec_id and read back for one spec, as `gpope stats` / `evaluate` do
        lake.write_table(df, config.lake, "gold", "bench", "trajectory_stats", mode="overwrite",
                         partition_by=["spec_id"])
        stats = read_statistics(spark, config, dataset="bench", spec_id="bench")
        files = statistics_files(spark, config, dataset="bench", spec_id="bench")
        if files is None:
            raise SystemExit("the lake uses the native Delta storage: no file path to measure")
        spark_group_sums(files, n=n, clip=clip, key=1, groups=10)  # warm-up (JVM, workers)
        spark_group_sums(stats, n=n, clip=clip, key=1, groups=10)
        load_start = os.getloadavg()
        spark_s, frame_s, core_s, bare_s = [], [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            got = spark_group_sums(files, n=n, clip=clip, key=1, groups=10, expected_rows=m)
            spark_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got_frame = spark_group_sums(stats, n=n, clip=clip, key=1, groups=10, expected_rows=m)
            frame_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            want = clipped_group_sums([(np.arange(m), vec)], n=n, clip=clip, key=1, groups=10)
            core_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            vec.sum(axis=0)
            bare_s.append(time.perf_counter() - t0)
        load_end = os.getloadavg()
    equal = all(bool(np.allclose(g, want, rtol=1e-12, atol=1e-12 * np.abs(want).max()))
                for g in (got, got_frame))
    spark.stop()
    s, f, c, r = min(spark_s), min(frame_s), min(core_s), min(bare_s)
    result = {"rows": m, "features": n, "doubles_per_row": 2 * n * n + n, "master": args.master,
              "files": len(files.paths), "spark_seconds": s, "spark_dataframe_seconds": f,
              "numpy_clip_group_sum_seconds": c, "numpy_bare_sum_seconds": r,
              "ratio_spark_over_numpy": s / c, "ratio_spark_dataframe_over_numpy": f / c,
              "sums_equal_1e-12": equal, "load_average_start": list(load_start),
              "load_average_end": list(load_end)}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"SSP aggregate of {m} trajectories (n = {n}, {2 * n * n + n} doubles/row, master {args.master}), best of {args.repeat}:\n"
            f"  numpy in memory (clip + group + sum): {c:.3f} s   (bare vec.sum: {r:.3f} s)\n"
            f"  Spark, the table's files in workers:  {s:.3f} s   ({len(files.paths)} files)\n"
            f"  Spark, DataFrame input (JVM reader):  {f:.3f} s   ({f / c:.2f}x)\n"
            f"  ratio (Spark / numpy):                {s / c:.2f}x  (target <= 3x); sums equal: {equal}\n"
            f"  load average (1, 5, 15 min) start {load_start}, end {load_end}"
        )
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark: transitions per second of the Spark stats stage vs the core's numpy kernel.

Same data, same run: a mountain-car-shaped off-policy cohort (~1e6 transitions; ``--quick``: 1e5)
is written to a temporary lake as the silver ``transitions`` Delta table (not timed). Then:

* **spark**: :func:`gpope.shell.pipeline.stats.run_stats`: read silver Delta, group by trajectory,
  compute the statistics with the core kernel on Arrow batches, commit the gold Delta table;
* **core**: the same statistics from the same transitions in memory
  (:func:`gpope.core.trajectories.batch.statistics_of_transitions`: importance ratios + dense stats).

Prints both rates and their ratio (target: Spark within 3x of the in-memory kernel).

Usage: python benchmarks/stats_job.py [--quick] [--transitions T] [--master local[*]] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from typing import Any

import numpy as np


def synthetic_cohort(n_transitions: int, length: int, seed: int) -> Any:
    """Off-policy transitions with mountain-car states, 3 actions and logged propensities."""
    from gpope.core.trajectories.transitions import Transitions

    rng = np.random.default_rng(seed)
    m = max(1, n_transitions // length)
    T = m * length
    low, high = np.array([-1.2, -0.07]), np.array([0.6, 0.07])
    states = low + (high - low) * rng.random((T + m, 2))
    idx = np.arange(T) + np.repeat(np.arange(m), length)
    probs = rng.dirichlet(np.ones(3), size=T)
    action = (probs.cumsum(axis=1) < rng.random((T, 1))).sum(axis=1).clip(0, 2)
    t = np.tile(np.arange(length), m)
    return Transitions(
        traj_index=np.repeat(np.arange(m, dtype=np.int64), length), t=t, state=states[idx],
        action=action.astype(np.int64), reward=-np.ones(T), next_state=states[idx + 1],
        terminal=np.zeros(T, dtype=bool), truncated=t == length - 1,
        behavior_prob=probs[np.arange(T), action], n_trajectories=m,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e5 transitions instead of 1e6")
    parser.add_argument("--transitions", type=int, default=None)
    parser.add_argument("--length", type=int, default=200, help="transitions per trajectory")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n_target = args.transitions or (100_000 if args.quick else 1_000_000)

    from gpope.config import SparkSettings, load_config
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.shell import lake
    from gpope.shell.pipeline.jobargs import load_spec, resolve_path
    from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
    from gpope.shell.schemas import TRANSITIONS
    from gpope.shell.spark import get_spark

    spec = load_spec(resolve_path("conf/specs/mountaincar.yaml"))
    transitions = synthetic_cohort(n_target, args.length, seed=0)
    T = transitions.n_transitions
    spark = get_spark(SparkSettings(master=args.master, shuffle_partitions=8, driver_memory="4g"))
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(None, lake={"root": f"{tmp}/lake"})
        df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
        lake.write_table(df, config.lake, "silver", "bench", "transitions", mode="overwrite")

        start = time.perf_counter()
        statistics_of_transitions(transitions, spec)
        core_s = time.perf_counter() - start

        start = time.perf_counter()
        report = run_stats(spark, config, dataset="bench", spec=spec)
        spark_s = time.perf_counter() - start
    result = {
        "transitions": T,
        "trajectories": transitions.n_trajectories,
        "features": spec.n_features,
        "master": args.master,
        "core_seconds": core_s,
        "spark_seconds": spark_s,
        "core_transitions_per_s": T / core_s,
        "spark_transitions_per_s": T / spark_s,
        "ratio_core_over_spark_rate": spark_s / core_s,
        "written_rows": report.n_trajectories,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"stats stage on {T} transitions ({transitions.n_trajectories} trajectories, "
            f"n = {spec.n_features}, master {args.master}):\n"
            f"  core numpy kernel (in memory): {T / core_s:>12,.0f} transitions/s ({core_s:.2f} s)\n"
            f"  Spark job (Delta -> Delta):    {T / spark_s:>12,.0f} transitions/s ({spark_s:.2f} s)\n"
            f"  ratio (Spark time / core time): {spark_s / core_s:.2f}x  (target <= 3x)"
        )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

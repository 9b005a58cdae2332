"""Benchmark: the whole pipeline (simulate -> ingest -> stats -> evaluate) on a chain cohort.

Every stage runs through the product's own function on a temporary lake (Spark + Delta, as
``gpope simulate/ingest/stats/evaluate`` do), and next to it, in the same run and on the same
data, a single Arrow/numpy pass that does the stage's essential work without Spark:

* **simulate**: the numpy generator and event tables (:func:`~gpope.shell.pipeline.simulate.
  simulate_tables`) plus one ``pyarrow.parquet`` write of the three tables;
* **ingest**: the bronze Delta tables read with deltalake into Arrow, sorted by
  ``(patient_id, time)`` and reduced to per-patient step counts and reward sums (one pass);
* **stats**: the silver transitions read with deltalake and the core's statistics kernel in memory
  (:func:`~gpope.shell.pipeline.stats.statistics_of_transitions`);
* **evaluate**: the gold statistics read with deltalake and the core solver in memory
  (:func:`~gpope.core.gpope.run_gpope`, same sigma and settings as the pipeline run).

Reports per stage: seconds, rows per second, the ratio of the Spark stage's time to its
single-pass reference (target <= 3x), and the peak resident memory of the whole process tree
(Python driver + JVM), sampled every 0.2 s. Targets (issue 13): 1e6 patients end to end within
30 minutes and 8 GB on 2 cores. The load average at the start and the end is printed: the machine
may be shared.

Usage: python benchmarks/pipeline_scale.py [--quick] [--patients N] [--master local[2]] [--json]
[--markdown] [--from-json FILE]  (``--from-json`` renders a saved ``--json`` result)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


class PeakMemory:
    """Peak RSS (bytes) of this process and all its descendants, sampled in a thread."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _tree_rss(root: int) -> int:
        parents: dict[int, int] = {}
        rss: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            parents[int(entry)] = int(fields.get("PPid", "0").strip() or 0)
            rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
        tree, frontier = {root}, [root]
        children: dict[int, list[int]] = {}
        for pid, ppid in parents.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in tree:
                    tree.add(child)
                    frontier.append(child)
        return sum(rss.get(pid, 0) for pid in tree)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._tree_rss(os.getpid()))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _progress(stage: str, values: dict[str, Any]) -> None:
    """One line per finished stage on stderr, so a run cut short still reports what it measured."""
    print(f"[{time.strftime('%H:%M:%S')}] {stage}: {values} load {os.getloadavg()[0]:.1f}",
          file=sys.stderr, flush=True)


def _ingest_reference(root: str, dataset: str) -> int:
    """One Arrow pass over the bronze tables: sort by patient and time, per-patient reductions."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    tables = {}
    for name in ("observations", "treatments", "outcomes"):
        t = DeltaTable(f"{root}/bronze/{dataset}/{name}").to_pyarrow_table()
        tables[name] = t.sort_by([("patient_id", "ascending"), ("time", "ascending")])
    steps = tables["treatments"].group_by("patient_id").aggregate([("time", "count")])
    rewards = tables["outcomes"].group_by("patient_id").aggregate([("reward", "sum")])
    last = tables["observations"].group_by(["patient_id", "variable"]).aggregate([("value", "max")])
    joined = steps.join(rewards, "patient_id").join(last, "patient_id")
    return int(pc.sum(joined.column("time_count")).as_py() or 0)


def _stats_reference(root: str, dataset: str, spec: Any) -> int:
    from deltalake import DeltaTable

    from gpope.shell.pipeline.stats import statistics_of_transitions, transitions_from_arrow

    table = DeltaTable(f"{root}/silver/{dataset}/transitions").to_pyarrow_table()
    m = int(np.max(table.column("traj_index").to_numpy())) + 1
    transitions = transitions_from_arrow(table, n_trajectories=m)
    statistics_of_transitions(transitions, spec)
    return transitions.n_transitions


def _evaluate_reference(root: str, dataset: str, spec: Any, options: Any, report: Any) -> int:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from gpope.config import load_config
    from gpope.core.gpope import run_gpope
    from gpope.shell.pipeline.evaluate import _solver_config
    from gpope.shell.pipeline.sampled import stats_from_arrow

    table = DeltaTable(f"{root}/gold/{dataset}/trajectory_stats").to_pyarrow_table()
    table = table.filter(pc.equal(table.column("spec_id"), spec.spec_id))
    stats = stats_from_arrow(table, spec.n_features, normalization=spec.normalization)
    # the solver settings the pipeline run resolved (CLI > spec evaluation: block > conf)
    options, _ = options.resolve(m=stats.m, spec=spec,
                                 settings=load_config(None, lake={"root": root}).evaluation)
    solver = _solver_config(options, sigma=report.sigma, batch_rate=report.batch_rate,
                            trace_every=options.iterations, delta=options.delta)
    run_gpope(stats, solver, options.seed)
    return options.iterations


def run(patients: int, master: str, iterations: int) -> dict[str, Any]:
    """The pipeline and its references on ``patients`` chain patients; returns the measurements."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from gpope.config import SparkSettings, load_config
    from gpope.shell.pipeline.evaluate import EvaluateOptions, run_evaluate
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.jobargs import load_spec, resolve_path
    from gpope.shell.pipeline.simulate import run_simulate, simulate_tables
    from gpope.shell.pipeline.stats import run_stats
    from gpope.shell.spark import get_spark

    spec = load_spec(resolve_path("conf/specs/chain.yaml"))
    load_start = os.getloadavg()
    stages: dict[str, dict[str, Any]] = {}
    with PeakMemory() as memory, tempfile.TemporaryDirectory(prefix="gpope-scale-") as tmp:
        root = f"{tmp}/lake"
        config = load_config(None, lake={"root": root})
        spark = get_spark(SparkSettings(master=master, shuffle_partitions=8, driver_memory="4g"))
        total_start = time.perf_counter()

        sim, sim_s = _timed(lambda: run_simulate(spark, config, "scale", domain="chain",
                                                 patients=patients, seed=1))

        def simulate_reference() -> int:
            _, tables = simulate_tables("chain", patients, 1)
            for name, columns in tables.items():
                pq.write_table(pa.table(dict(columns)), f"{tmp}/ref-{name}.parquet")
            return sum(len(c["patient_id"]) for c in tables.values())

        rows, sim_ref_s = _timed(simulate_reference)
        stages["simulate"] = {"rows": rows, "spark_s": sim_s, "reference_s": sim_ref_s}
        _progress("simulate", stages["simulate"])

        ing, ing_s = _timed(lambda: run_ingest(spark, config, "scale", domain="chain"))
        _, ing_ref_s = _timed(lambda: _ingest_reference(root, "scale"))
        stages["ingest"] = {"rows": sum(ing.rows_in.values()), "spark_s": ing_s,
                            "reference_s": ing_ref_s}
        _progress("ingest", stages["ingest"])

        st, st_s = _timed(lambda: run_stats(spark, config, dataset="scale", spec=spec))
        _, st_ref_s = _timed(lambda: _stats_reference(root, "scale", spec))
        stages["stats"] = {"rows": st.n_transitions, "spark_s": st_s, "reference_s": st_ref_s}
        _progress("stats", stages["stats"])

        options = EvaluateOptions.from_settings(
            config.evaluation, epsilon=1.0, delta=1e-6, seed=7, iterations=iterations,
            statistics_share=0.0, public_trajectories=0,
        )
        ev, ev_s = _timed(lambda: run_evaluate(spark, config, dataset="scale", spec=spec,
                                               options=options,
                                               tracking_uri=f"sqlite:///{tmp}/mlflow.db"))
        _progress("evaluate (Spark part)", {"spark_s": ev_s})
        _, ev_ref_s = _timed(lambda: _evaluate_reference(root, "scale", spec, options, ev))
        stages["evaluate"] = {"rows": iterations, "spark_s": ev_s, "reference_s": ev_ref_s}
        _progress("evaluate", stages["evaluate"])
        total_s = time.perf_counter() - total_start
        spark.stop()
    for stage in stages.values():
        stage["spark_rows_per_s"] = stage["rows"] / stage["spark_s"]
        stage["reference_rows_per_s"] = stage["rows"] / stage["reference_s"]
        stage["ratio"] = stage["spark_s"] / stage["reference_s"]
    return {
        "patients": patients,
        "transitions": sim.n_transitions,
        "master": master,
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "stages": stages,
        "end_to_end_s": sum(stage["spark_s"] for stage in stages.values()),
        "wall_with_references_s": total_s,
        "peak_rss_gb": memory.peak / 2**30,
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as the docs/BENCHMARKS.md table (numbers printed as measured, never edited)."""
    lines = [
        f"{result['patients']:,} chain patients ({result['transitions']:,} transitions), master "
        f"`{result['master']}`, {result['cpus']} CPUs; load average "
        f"{result['load_average_start'][0]:.1f} at the start, {result['load_average_end'][0]:.1f} "
        "at the end.",
        "",
        "| stage | rows | Spark + Delta s | rows/s | single pass s | rows/s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in result["stages"].items():
        label = f"evaluate (N = {s['rows']})" if name == "evaluate" else name
        lines.append(
            f"| {label} | {s['rows']:,} | {s['spark_s']:.1f} | {s['spark_rows_per_s']:,.0f} | "
            f"{s['reference_s']:.1f} | {s['reference_rows_per_s']:,.0f} | {s['ratio']:.1f}x |"
        )
    lines += [
        "",
        f"End to end (the four Spark stages): {result['end_to_end_s'] / 60:.1f} min; peak RSS of "
        f"the process tree (Python driver + JVM + Python workers) {result['peak_rss_gb']:.2f} GB.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1e4 patients (default 1e5)")
    parser.add_argument("--patients", type=int, default=None)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--iterations", type=int, default=20000, help="evaluate's N")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="print the docs table")
    parser.add_argument("--from-json", metavar="FILE",
                        help="render a result saved with --json instead of running")
    args = parser.parse_args(argv)
    patients = args.patients or (10_000 if args.quick else 100_000)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        result = run(patients, args.master, args.iterations)
    if args.markdown:
        print(markdown(result))
        return 0
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"pipeline on {result['patients']:,} chain patients ({result['transitions']:,} "
          f"transitions), master {result['master']}, {result['cpus']} CPUs; load average "
          f"{result['load_average_start'][0]:.1f} at start, {result['load_average_end'][0]:.1f} at end")
    print(f"  {'stage':<9} {'rows':>12} {'Spark s':>9} {'rows/s':>12} {'1-pass s':>9} "
          f"{'rows/s':>12} {'ratio':>7}")
    for name, s in result["stages"].items():
        print(f"  {name:<9} {s['rows']:>12,} {s['spark_s']:>9.1f} {s['spark_rows_per_s']:>12,.0f} "
              f"{s['reference_s']:>9.1f} {s['reference_rows_per_s']:>12,.0f} {s['ratio']:>6.1f}x")
    print(f"  end to end (Spark stages): {result['end_to_end_s'] / 60:.1f} min; peak RSS of the "
          f"process tree {result['peak_rss_gb']:.2f} GB (targets at 1e6: 30 min, 8 GB; ratio <= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

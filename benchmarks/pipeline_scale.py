"""Benchmark: the whole pipeline (simulate -> ingest -> stats -> evaluate) on a chain cohort.

Every stage runs through the product's own function on a temporary lake (Spark + Delta, as
``gpope simulate/ingest/stats/evaluate`` do), and next to it, in the same run and on the same
data, a single Arrow/numpy pass that does the stage's essential work without Spark:

* **simulate**: the same cohort (the same generator, parts and Arrow tables,
  :func:`~gpope.shell.pipeline.simulate.iter_simulated_tables`) written with ``pyarrow.parquet``
  only (the stage stages the same Arrow tables and commits them with delta-rs: no Spark job);
* **ingest**: the same rules in one DuckDB process (``ingest_reference.py``: validation with
  reasons, duplicates and conflicts, overflow quarantine, cuts, forward-filled states, rewards,
  ``traj_index``), writing the transitions and the rejected rows to Parquet; the run checks that
  it found the same counts per (table, reason), transitions, trajectories and terminal steps;
* **stats**: the silver transitions read with deltalake, sorted, and the stage's own kernel
  (``_statistics_batch``) over consecutive trajectory ranges, written to Parquet, plus the clamp
  counts;
* **evaluate**: the gold statistics read with deltalake batch by batch into the sparse layout
  (the stage's ``_sparse_batches``) and the core solver (:func:`~gpope.core.gpope.solver.run_gpope`)
  with the settings the pipeline run resolved.

Reports per stage: seconds, rows per second, the ratio of the Spark stage's time to its
single-pass reference (target <= 3x), the peak resident memory of the whole process tree (Python
driver + JVM + Python workers) while the stage ran, and of the driver process alone while its
reference ran (the idle JVM is not the reference's), sampled every 0.2 s. Targets (issue 13): 1e6 patients end to end within
30 minutes and 8 GB on 2 cores. The load average at the start and the end is printed: the machine
may be shared.

Usage: python benchmarks/pipeline_scale.py [--quick] [--patients N] [--master local[2]] [--json]
[--markdown] [--from-json FILE] [--stages simulate,ingest,stats,evaluate] [--workdir DIR]
[--keep-lake DIR] [--skip-reference STAGES] [--driver-memory 4g] [--per-process]
[--evaluate-driver-memory 2g]
(``--from-json`` renders a saved ``--json`` result; ``--keep-lake`` keeps the lake and reuses
the outputs of stages not listed in ``--stages``, so one stage can be re-measured alone)
"""

from __future__ import annotations

import argparse
import contextlib
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
        self.phase_tree = 0  # since the last :meth:`phase`: whole tree, and this process alone
        self.phase_driver = 0
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

    @staticmethod
    def _own_rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def _sample(self) -> None:
        tree, own = self._tree_rss(os.getpid()), self._own_rss()
        self.peak = max(self.peak, tree)
        self.phase_tree = max(self.phase_tree, tree)
        self.phase_driver = max(self.phase_driver, own)

    def phase(self) -> dict[str, float]:
        """Peaks (GB) since the previous call, then start a new phase."""
        self._sample()
        out = {"tree_gb": self.phase_tree / 2**30, "driver_gb": self.phase_driver / 2**30}
        self.phase_tree = self.phase_driver = 0
        return out

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


STAGES = ("simulate", "ingest", "stats", "evaluate")


def _timed(fn: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _progress(stage: str, values: dict[str, Any]) -> None:
    """One line per finished stage on stderr, so a run cut short still reports what it measured."""
    print(f"[{time.strftime('%H:%M:%S')}] {stage}: {values} load {os.getloadavg()[0]:.1f}",
          file=sys.stderr, flush=True)


def _simulate_reference(patients: int, out: str) -> int:
    """The same cohort (same generator, same parts, same Arrow tables) written with pyarrow only."""
    import pyarrow.parquet as pq

    from gpope.shell.pipeline.simulate import iter_simulated_tables, tables_to_arrow

    writers: dict[str, Any] = {}
    rows = 0
    for _, tables in iter_simulated_tables("chain", patients, 1):
        for name, table in tables_to_arrow(tables).items():
            if name not in writers:
                writers[name] = pq.ParquetWriter(f"{out}/ref-{name}.parquet", table.schema)
            writers[name].write_table(table)
            rows += table.num_rows
    for writer in writers.values():
        writer.close()
    return rows


def _ingest_reference(root: str, dataset: str, out: str) -> int:
    """The same silver tables from the same bronze rows in DuckDB (see ingest_reference.py)."""
    from ingest_reference import ingest_duckdb

    from gpope.shell.pipeline.simulate import dataset_settings_for_domain

    return ingest_duckdb(root, dataset, dataset_settings_for_domain("chain"), out)


def _dataset(path: str) -> Any:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_dataset()


def _stats_reference(root: str, dataset: str, spec: Any, out: str) -> int:
    """The stage's kernel without Spark: the silver transitions read with deltalake, sorted by
    ``(traj_index, t)``, statistics of consecutive trajectory ranges (the same ``_statistics_batch``
    the stage runs per Arrow batch, the clamp counts riding along), written to one Parquet file."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from gpope.shell.pipeline.stats import _CLAMPED, _INPUT_COLUMNS, _statistics_batch

    table = _dataset(f"{root}/silver/{dataset}/transitions").to_table(columns=list(_INPUT_COLUMNS))
    table = table.take(pc.sort_indices(table, [("traj_index", "ascending"), ("t", "ascending")]))
    ids = table.column("traj_index").to_numpy()
    writer = None
    step = 10_000  # trajectories per kernel call (memory: about 0.26 GB of dense rows each)
    for lo in range(0, int(ids[-1]) + 1, step):
        a, b = np.searchsorted(ids, [lo, lo + step])
        batch = _statistics_batch(table.slice(a, b - a), spec, with_counts=True)
        batch = batch.select([c for c in batch.schema.names if c not in _CLAMPED.values()])
        if writer is None:
            writer = pq.ParquetWriter(f"{out}/ref-trajectory_stats.parquet", batch.schema)
        writer.write_batch(batch)
    if writer is not None:
        writer.close()
    return table.num_rows


def _evaluate_reference(root: str, dataset: str, spec: Any, options: Any, report: Any) -> int:
    """The gold statistics read with deltalake batch by batch into the sparse layout (the same
    ``_sparse_batches`` the stage runs on its executors), then the core solver with the
    settings the pipeline run resolved."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from gpope.config import load_config
    from gpope.core.evaluation.settings import resolve_settings
    from gpope.core.gpope.solver import run_gpope
    from gpope.shell.evaluate.execute import solver_config
    from gpope.shell.pipeline.sampled import _COLUMNS, _sparse_batches, _sparse_from_arrow

    data = _dataset(f"{root}/gold/{dataset}/trajectory_stats")
    # small batches and no read-ahead: a dense row is 8 (2 n^2 + n) bytes (26 KB for the chain),
    # so pyarrow's defaults (131,072-row batches, 16 batches x 4 files ahead) would hold tens of
    # GB of dense rows at 1e6 trajectories before _sparse_batches shrinks them
    batches = data.to_batches(columns=list(_COLUMNS), filter=pc.field("spec_id") == spec.spec_id,
                              batch_size=4096, batch_readahead=1, fragment_readahead=1)
    table = pa.Table.from_batches(list(_sparse_batches(batches, n=spec.n_features)))
    stats = _sparse_from_arrow(table, spec.n_features, normalization=spec.normalization)
    # the solver settings the pipeline run resolved (CLI > spec evaluation: block > conf)
    options, _ = resolve_settings(load_config(None, lake={"root": root}).evaluation, spec,
                                  options, m=stats.m)
    solver = solver_config(options, sigma=report.sigma, batch_rate=report.batch_rate,
                            trace_every=options.iterations, delta=options.delta)
    run_gpope(stats, solver, options.seed)
    return options.iterations


_OUTPUTS = {  # what each stage leaves in the lake (for --keep-lake)
    "simulate": ("bronze", "treatments"),
    "ingest": ("silver", "transitions"),
    "stats": ("gold", "trajectory_stats"),
}


def stages_to_run(stages_wanted: tuple[str, ...], done: set[str]) -> list[str]:
    """The stages to run, in pipeline order: the wanted ones, plus every earlier stage whose
    output is not in the lake (``done``) although a wanted stage needs it; a stage not wanted
    whose output is there is reused (not measured)."""
    unknown = sorted(set(stages_wanted) - set(STAGES))
    if unknown:
        raise SystemExit(f"--stages: unknown stage(s) {unknown}; choose from {', '.join(STAGES)}")
    last = max(STAGES.index(s) for s in stages_wanted)
    return [s for s in STAGES[: last + 1] if s in stages_wanted or s not in done]


def _kept_lake(keep: str, patients: int) -> tuple[Path, dict[str, Any]]:
    """The kept lake's folder and its record (patients, transitions); refuses another cohort."""
    folder = Path(keep).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    record_file = folder / "pipeline_scale.json"
    record = json.loads(record_file.read_text()) if record_file.is_file() else {}
    if record and record.get("patients") != patients:
        raise SystemExit(
            f"--keep-lake {keep} holds a lake of {record.get('patients')} patients, not "
            f"{patients}: pass that --patients, or another folder."
        )
    return folder, record


def run(patients: int, master: str, iterations: int, *, workdir: str | None = None,
        stages_wanted: tuple[str, ...] = STAGES, keep_lake: str | None = None,
        driver_memory: str = "4g", skip_reference: tuple[str, ...] = ()) -> dict[str, Any]:
    """The pipeline and its references on ``patients`` chain patients; returns the measurements.

    Each stage's line goes to stderr as soon as it is measured (with its peak memory), so a run
    cut short keeps what it finished. Without ``keep_lake`` the lake is temporary and simulate
    plus ``stages_wanted`` run. With ``keep_lake`` (a folder) the lake is ``<folder>/lake`` and
    is kept; a stage runs when it is wanted, or when its output is missing and a wanted stage
    needs it (:func:`stages_to_run`); each stage that runs is measured with its reference, as
    without the option. The stages in ``skip_reference`` run without their reference (e.g. to
    build a kept lake quickly).
    """
    from gpope.config import SparkSettings, load_config
    from gpope.core.evaluation.settings import SettingsLayer
    from gpope.shell import lake
    from gpope.shell.evaluate.run import run_evaluate
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.jobargs import load_spec, resolve_path
    from gpope.shell.pipeline.simulate import run_simulate
    from gpope.shell.pipeline.stats import run_stats
    from gpope.shell.spark import get_spark

    spec = load_spec(resolve_path("conf/specs/chain.yaml"))
    load_start = os.getloadavg()
    stages: dict[str, dict[str, Any]] = {}
    record: dict[str, Any] = {}
    if keep_lake is not None:
        kept, record = _kept_lake(keep_lake, patients)
        folder: Any = contextlib.nullcontext(str(kept))
    else:
        folder = tempfile.TemporaryDirectory(prefix="gpope-scale-", dir=workdir)
    n_transitions = int(record.get("transitions", 0))
    with PeakMemory() as memory, folder as tmp:
        root = f"{tmp}/lake"
        config = load_config(None, lake={"root": root})
        done = {s for s, (layer, table) in _OUTPUTS.items()
                if keep_lake is not None and s in record.get("done", [])
                and Path(lake.table_location(config.lake, layer, "scale", table)).is_dir()}
        reused: list[str] = []
        if keep_lake is None:
            todo = ["simulate", *[s for s in STAGES[1:] if s in stages_wanted]]
        else:
            todo = stages_to_run(stages_wanted, done)
            reused = [s for s in STAGES if s in done and s not in todo]
            print(f"--keep-lake {tmp}: reusing {reused or 'nothing'}, running {todo}",
                  file=sys.stderr, flush=True)

        def mark(stage: str, *, finished: bool) -> None:
            """Record in the kept lake which outputs are complete: before a stage runs, it and
            every later stage are not (a kill leaves them marked missing); after, it is."""
            if keep_lake is None:
                return
            later = set(STAGES[STAGES.index(stage):])
            kept_done = [s for s in record.get("done", []) if s not in later]
            record.update(patients=patients, transitions=n_transitions,
                          done=[*kept_done, stage] if finished else kept_done)
            Path(tmp, "pipeline_scale.json").write_text(json.dumps(record, indent=2))

        spark = get_spark(SparkSettings(master=master, shuffle_partitions=8,
                                        driver_memory=driver_memory))
        total_start = time.perf_counter()

        def measure(stage: str, rows: Any, spark_fn: Any, reference_fn: Any) -> Any:
            memory.phase()
            out, spark_s = _timed(spark_fn)
            spark_memory = memory.phase()
            stages[stage] = {
                "rows": rows(out) if callable(rows) else rows, "spark_s": spark_s,
                "spark_peak_tree_gb": spark_memory["tree_gb"],
                "load_average": os.getloadavg()[0],
            }  # fmt: skip
            _progress(f"{stage} (stage)", stages[stage])  # kept even if the reference fails
            if stage in skip_reference:
                stages[stage]["reference_error"] = "not run (--skip-reference)"
                memory.phase()
                return out
            try:
                ref_rows, reference_s = _timed(reference_fn)
            except Exception as exc:  # a failed reference must not lose the stage's numbers
                stages[stage]["reference_error"] = f"{type(exc).__name__}: {exc}"[:300]
                memory.phase()
            else:
                stages[stage].update({
                    "reference_s": reference_s, "reference_rows": ref_rows,
                    "reference_peak_driver_gb": memory.phase()["driver_gb"],
                    "reference_load_average": os.getloadavg()[0],
                })  # fmt: skip
            _progress(stage, stages[stage])
            return out

        if "simulate" in todo:
            mark("simulate", finished=False)
            sim = measure("simulate", lambda r: sum(r.rows.values()),
                          lambda: run_simulate(spark, config, "scale", domain="chain",
                                               patients=patients, seed=1),
                          lambda: _simulate_reference(patients, tmp))  # fmt: skip
            n_transitions = sim.n_transitions
            mark("simulate", finished=True)
        if "ingest" in todo:
            mark("ingest", finished=False)
            ref: dict[str, Any] = {}
            ing = measure("ingest", lambda r: sum(r.rows_in.values()),
                          lambda: run_ingest(spark, config, "scale", domain="chain"),
                          lambda: ref.setdefault("r", _ingest_reference(root, "scale", tmp))[
                              "rows_in"])  # fmt: skip
            counts = {(t, None): n for t, n in ing.rows_used.items() if n}
            counts.update({(t, r): n for t, rs in ing.rejected.items() for r, n in rs.items()})
            stages["ingest"]["reference_agrees"] = "r" in ref and bool(
                ref["r"]["counts"] == counts and ref["r"]["transitions"] == ing.n_transitions
                and ref["r"]["trajectories"] == ing.n_trajectories
                and ref["r"]["terminal"] == ing.n_terminal
            )  # same counts per (table, reason), transitions, trajectories, terminal steps
            mark("ingest", finished=True)
        if "stats" in todo:
            mark("stats", finished=False)
            measure("stats", lambda r: r.n_transitions,
                    lambda: run_stats(spark, config, dataset="scale", spec=spec),
                    lambda: _stats_reference(root, "scale", spec, tmp))  # fmt: skip
            mark("stats", finished=True)
        if "evaluate" in todo:
            # one plain GPOPE run, what the reference computes: no statistics release and no
            # disjoint-groups interval (a spec's default rule would otherwise apply at this m)
            options = SettingsLayer.of(
                epsilon=1.0, delta=min(1e-6, 0.1 / patients), seed=7, iterations=iterations,
                statistics_share=0.0, public_trajectories=0, interval_groups=0,
            )
            report: dict[str, Any] = {}

            def evaluate() -> Any:
                report["ev"] = run_evaluate(spark, config, dataset="scale", spec=spec,
                                            options=options,
                                            tracking_uri=f"sqlite:///{tmp}/mlflow.db")
                return report["ev"]

            measure("evaluate", iterations, evaluate,
                    lambda: _evaluate_reference(root, "scale", spec, options, report["ev"]))
        total_s = time.perf_counter() - total_start
        spark.stop()
    for stage in stages.values():
        stage["spark_rows_per_s"] = stage["rows"] / stage["spark_s"]
        if "reference_s" in stage:
            stage["reference_rows_per_s"] = stage["rows"] / stage["reference_s"]
            stage["ratio"] = stage["spark_s"] / stage["reference_s"]
    return {
        "patients": patients,
        "transitions": n_transitions,
        "master": master,
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "stages": stages,
        "reused_stages": reused,  # --keep-lake: outputs taken from the kept lake, not measured
        "end_to_end_s": sum(stage["spark_s"] for stage in stages.values()),
        "wall_with_references_s": total_s,
        "peak_rss_gb": memory.peak / 2**30,
    }


def run_per_process(patients: int, master: str, iterations: int, *, workdir: str | None = None,
                    stages_wanted: tuple[str, ...] = STAGES, keep_lake: str | None = None,
                    driver_memory: str = "4g", evaluate_driver_memory: str | None = None,
                    skip_reference: tuple[str, ...] = ()) -> dict[str, Any]:
    """As :func:`run`, but each stage (and its reference) in its own child process with its own
    Spark session, as the jobs run in production (one ``gpope`` command, one ``jobs/`` entry point,
    one Databricks task per stage). A stage's peak memory is then its own process tree's (a JVM
    that only ran that stage), not the residue of the stages before it in one long-lived JVM.

    The stages share a kept lake (``keep_lake``, else a temporary folder); each child is this
    script with ``--keep-lake DIR --stages STAGE --json``. A stage's time is as in :func:`run`
    (``spark_s``); ``process_s`` is the child's wall time without its reference (imports, Spark
    start and stop, the stage), and ``end_to_end_s`` sums ``process_s``: the honest end to end.
    ``evaluate_driver_memory`` (default ``driver_memory``) sizes the evaluate stage's JVM: its Spark
    work is two scans of the gold table (a count and the sparse rows written to Parquet), which
    need far less heap than ingest's shuffles, while the statistics it loads live in Python.
    """
    import subprocess

    load_start = os.getloadavg()
    with contextlib.ExitStack() as stack:
        if keep_lake is None:
            keep_lake = stack.enter_context(
                tempfile.TemporaryDirectory(prefix="gpope-scale-", dir=workdir))
        kept, record = _kept_lake(keep_lake, patients)
        done = set(record.get("done", []))
        todo = stages_to_run(stages_wanted, done)
        reused = [s for s in STAGES if s in done and s not in todo]
        print(f"per-process stages in {kept}: reusing {reused or 'nothing'}, running {todo}",
              file=sys.stderr, flush=True)
        stages: dict[str, dict[str, Any]] = {}
        peak = 0.0
        for stage in todo:
            argv = [sys.executable, __file__, "--patients", str(patients), "--master", master,
                    "--iterations", str(iterations), "--keep-lake", str(kept), "--stages", stage,
                    "--driver-memory", (evaluate_driver_memory or driver_memory)
                    if stage == "evaluate" else driver_memory, "--json"]
            if stage in skip_reference:
                argv += ["--skip-reference", stage]
            start = time.perf_counter()
            child = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
            wall = time.perf_counter() - start
            if child.returncode != 0:
                raise SystemExit(f"stage {stage}: its process exited {child.returncode} "
                                 f"(its stderr is above); measured so far: {stages}")
            result = json.loads(child.stdout)
            measured = result["stages"][stage]
            measured["process_s"] = wall - measured.get("reference_s", 0.0)
            measured["process_wall_with_reference_s"] = wall
            stages[stage] = measured
            peak = max(peak, result["peak_rss_gb"])
            _progress(f"{stage} (process)", measured)
        transitions = _kept_lake(str(kept), patients)[1].get("transitions", 0)
    return {
        "patients": patients,
        "transitions": transitions,
        "master": master,
        "cpus": os.cpu_count(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "stages": stages,
        "reused_stages": reused,
        "per_process": True,
        "driver_memory": driver_memory,
        "evaluate_driver_memory": evaluate_driver_memory or driver_memory,
        "end_to_end_s": sum(stage["process_s"] for stage in stages.values()),
        "end_to_end_spark_s": sum(stage["spark_s"] for stage in stages.values()),
        # the pipeline's peak: the largest stage process tree while its stage ran (its
        # reference runs after it in the same process, beside the then idle JVM)
        "peak_rss_gb": max((stage["spark_peak_tree_gb"] for stage in stages.values()), default=0.0),
        "peak_rss_with_references_gb": peak,
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as the docs/BENCHMARKS.md table (numbers printed as measured, never edited)."""
    lines = [
        f"{result['patients']:,} chain patients ({result['transitions']:,} transitions), master "
        f"`{result['master']}`, {result['cpus']} CPUs; load average "
        f"{result['load_average_start'][0]:.1f} at the start, {result['load_average_end'][0]:.1f} "
        "at the end.",
        "",
        "| stage | rows | Spark + Delta s | rows/s | single pass s | rows/s | ratio | peak GB "
        "(stage: driver + JVM + workers) | peak GB (single pass: driver) | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in result["stages"].items():
        label = f"evaluate (N = {s['rows']})" if name == "evaluate" else name
        if "ratio" not in s:
            lines.append(
                f"| {label} | {s['rows']:,} | {s['spark_s']:.1f} | {s['spark_rows_per_s']:,.0f} | "
                f"failed ({s.get('reference_error', 'not run')}) | - | - | "
                f"{s.get('spark_peak_tree_gb', float('nan')):.2f} | - | "
                f"{s.get('load_average', float('nan')):.1f} |"
            )
            continue
        lines.append(
            f"| {label} | {s['rows']:,} | {s['spark_s']:.1f} | {s['spark_rows_per_s']:,.0f} | "
            f"{s['reference_s']:.1f} | {s['reference_rows_per_s']:,.0f} | {s['ratio']:.1f}x | "
            f"{s.get('spark_peak_tree_gb', float('nan')):.2f} | "
            f"{s.get('reference_peak_driver_gb', float('nan')):.2f} | "
            f"{s.get('load_average', float('nan')):.1f} |"
        )
    if result.get("per_process"):
        ending = (f"End to end (the {len(result['stages'])} stages measured, each in its own "
                  f"process: Python start, Spark start and stop, the stage): "
                  f"{result['end_to_end_s'] / 60:.1f} min ({result['end_to_end_spark_s'] / 60:.1f}"
                  f" min inside the stages); largest peak RSS of one stage's process tree "
                  f"(Python driver + JVM + Python workers) while the stage ran "
                  f"{result['peak_rss_gb']:.2f} GB ({result['peak_rss_with_references_gb']:.2f} "
                  "GB with the references, each beside its stage's idle JVM).")
    else:
        ending = (f"End to end (the {len(result['stages'])} Spark stages measured): "
                  f"{result['end_to_end_s'] / 60:.1f} min; peak RSS of the process tree "
                  f"(Python driver + JVM + Python workers) {result['peak_rss_gb']:.2f} GB.")
    lines += ["", ending]
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
    parser.add_argument("--stages", default=",".join(STAGES),
                        help="stages to run after simulate (comma-separated; default all)")
    parser.add_argument("--workdir", default=None, help="where the temporary lake goes")
    parser.add_argument("--keep-lake", metavar="DIR", default=None,
                        help="keep the lake in DIR/lake and reuse it: a stage runs if it is in "
                             "--stages, or if its output is missing and a stage in --stages "
                             "needs it (e.g. --stages stats re-measures stats alone, with its "
                             "reference, on the kept silver tables)")
    parser.add_argument("--skip-reference", default="", metavar="STAGES",
                        help="stages to run without their single-pass reference (comma-separated)")
    parser.add_argument("--per-process", action="store_true",
                        help="run each stage (with its reference) in its own process and Spark "
                             "session, as the jobs run in production; the stages share a kept "
                             "lake (--keep-lake, else a temporary folder)")
    parser.add_argument("--driver-memory", default="4g",
                        help="Spark driver memory (default 4g, the setting of every result "
                             "in docs/BENCHMARKS.md)")
    parser.add_argument("--evaluate-driver-memory", default=None,
                        help="with --per-process: the evaluate stage's Spark driver memory "
                             "(default: --driver-memory)")
    args = parser.parse_args(argv)
    if args.evaluate_driver_memory and not args.per_process:
        parser.error("--evaluate-driver-memory needs --per-process (one JVM per stage)")
    patients = args.patients or (10_000 if args.quick else 100_000)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text())
    else:
        result = (run_per_process if args.per_process else run)(
                     patients, args.master, args.iterations, workdir=args.workdir,
                     stages_wanted=tuple(args.stages.split(",")), keep_lake=args.keep_lake,
                     driver_memory=args.driver_memory,
                     **({"evaluate_driver_memory": args.evaluate_driver_memory}
                        if args.per_process else {}),
                     skip_reference=tuple(s for s in args.skip_reference.split(",") if s))
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
        if "ratio" not in s:
            print(f"  {name:<9} {s['rows']:>12,} {s['spark_s']:>9.1f} "
                  f"{s['spark_rows_per_s']:>12,.0f}  reference failed: {s.get('reference_error')}")
            continue
        print(f"  {name:<9} {s['rows']:>12,} {s['spark_s']:>9.1f} {s['spark_rows_per_s']:>12,.0f} "
              f"{s['reference_s']:>9.1f} {s['reference_rows_per_s']:>12,.0f} {s['ratio']:>6.1f}x")
    print(f"  end to end (Spark stages): {result['end_to_end_s'] / 60:.1f} min; peak RSS of the "
          f"process tree {result['peak_rss_gb']:.2f} GB (targets at 1e6: 30 min, 8 GB; ratio <= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

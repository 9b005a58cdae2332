"""Run every benchmark in this folder, one after another (``make bench``).

Each benchmark prints its own table of measured rates next to a reference measured in the same
run, and the ratio. By default each runs its ``--quick`` setting (a few minutes in total);
``--full`` runs the documented sizes (the chain reproduction alone is about half an hour).

Usage::

    python benchmarks/run_all.py [--full] [--only driver,generate]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: benchmark script -> what it measures (printed as a heading).
BENCHMARKS: dict[str, str] = {
    "generate": "simulators: chain and mountain-car trajectories/s (and statistics)",
    "driver": "GPOPE driver iterations/s vs the read floor; batched trials/s",
    "accounting_pld": "adaptive PLD grid: accuracy and time vs a fine grid",
    "stats_job": "Spark stats stage vs the in-memory numpy kernel (transitions/s)",
    "ssp_aggregate": "SSP noisy-statistics Spark aggregate vs an in-memory numpy sum",
    "pipeline_scale": "whole pipeline per stage (Spark + Delta) vs single Arrow/numpy passes; peak RSS",
    "chain_reproduction": "wall time of the chain reproduction (all methods, 100 trials)",
}


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks; returns non-zero if any of them failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="documented sizes instead of --quick")
    parser.add_argument("--only", default=None,
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
    names = list(BENCHMARKS) if args.only is None else [s.strip() for s in args.only.split(",")]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(BENCHMARKS)}")
    failed = []
    for name in names:
        cmd = [sys.executable, str(HERE / f"{name}.py")]
        if not args.full:
            cmd.append("--quick")
        print(f"\n=== {name}: {BENCHMARKS[name]}\n$ {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        status = subprocess.call(cmd)
        print(f"=== {name}: exit {status} after {time.perf_counter() - t0:.1f} s", flush=True)
        if status != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

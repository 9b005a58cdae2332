"""Wall time of the chain reproduction (paper settings: m up to 5e5, 100 trials, all methods).

Runs exactly what ``gpope experiment chain`` runs (tuning on public data included) and prints the
time of each phase. ``--quick`` runs the smoke-test preset instead. ``--docs`` copies the figures to
``docs/figures`` (how the figures in docs/RESULTS.md are produced).

Usage::

    python benchmarks/chain_reproduction.py [--quick] [--out DIR] [--trials R] [--docs]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # tiny BLAS calls: threads only add overhead

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from gpope.shell.experiments import make_settings, run_experiment


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; prints a JSON line with the timings."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke-test preset")
    p.add_argument("--out", default=None, help="output directory (default out/chain[_quick])")
    p.add_argument("--trials", type=int, default=None, help="override the number of trials")
    p.add_argument("--data-blocks", type=int, default=None, help="override the data blocks")
    p.add_argument("--docs", action="store_true", help="copy figures to docs/figures")
    p.add_argument("--no-mlflow", action="store_true", help="skip MLflow logging")
    args = p.parse_args(argv)
    settings = make_settings("chain", quick=args.quick, trials=args.trials,
                             data_blocks=args.data_blocks)
    out = Path(args.out or ("out/chain_quick" if args.quick else "out/chain"))
    t0 = time.perf_counter()
    summary = run_experiment("chain", settings, out, track=not args.no_mlflow,
                             log=lambda s: print(s, file=sys.stderr, flush=True))
    wall = time.perf_counter() - t0
    if args.docs:
        dest = Path("docs/figures")
        dest.mkdir(parents=True, exist_ok=True)
        for fig in summary["figures"]:
            shutil.copy(fig, dest / Path(fig).name)
    report = {"benchmark": "chain_reproduction", "quick": args.quick, "wall_seconds": wall,
              "phases": summary["seconds"], "trials": settings.trials,
              "sizes": list(settings.sizes), "cpus": os.cpu_count(),
              "load_average": os.getloadavg()}
    print(json.dumps(report))
    (out / "benchmark.json").write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

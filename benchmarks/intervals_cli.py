"""Evidence: interval coverage of both estimators through the CLI on a simulated chain cohort.

Runs, in one process (the CLI's ``main``; one Spark session), on a fresh lake:
``gpope simulate --domain chain --patients P``, ``gpope ingest``, ``gpope stats --spec
conf/specs/chain.yaml``, ``gpope budget set`` (a budget large enough for all runs), then ``R`` runs
of ``gpope evaluate --epsilon E --delta D --estimator X --json`` for each estimator. Each run
releases values at the spec's 3 reference states with a 95% interval; the script compares them
with the chain's exact values (closed form, :func:`gpope.core.envs.chain.exact_values`) and prints
coverage, mean width and median absolute error per estimator.

Targets (issue 11): at P = 5e4, eps = 1, 12 runs x 3 states: coverage >= 80%, mean width <= 0.5,
median absolute error <= 0.1, for both estimators.

Usage: nice -n 10 python benchmarks/intervals_cli.py [--patients 50000] [--runs 12] [--epsilon 1]
       [--estimators gpope,ssp] [--gpope-args "--iterations 20000 ..."] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _cli(argv: list[str]) -> dict:
    from gpope.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        status = main(argv)
    if status != 0:
        raise SystemExit(f"gpope {' '.join(argv)} exited {status}")
    text = buf.getvalue()
    return json.loads(text) if "--json" in argv else {"text": text}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patients", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--estimators", default="ssp,gpope")
    parser.add_argument("--gpope-args", default="", help="extra flags for the gpope runs")
    parser.add_argument("--seed", type=int, default=1, help="seed of the simulated cohort only")
    parser.add_argument("--lake", default=None, help="lake root (default: a temporary directory)")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--conf", default=None, help="gpope configuration file (e.g. a smaller "
                        "spark.driver_memory on a crowded machine)")
    parser.add_argument("--reuse-lake", action="store_true",
                        help="the --lake already holds the cohort and its statistics (from an "
                        "earlier run of this script): skip simulate, ingest and stats")
    args = parser.parse_args(argv)

    from gpope.core.envs import chain as chain_env
    from gpope.shell.pipeline.jobargs import load_spec

    spec_path = str(ROOT / "conf/specs/chain.yaml")
    spec = load_spec(spec_path)
    exact_all = chain_env.exact_values(chain_env.ChainConfig())
    exact = np.array([exact_all[int(s[0])] for s in spec.reference_array()])
    tmp = tempfile.TemporaryDirectory()
    lake = args.lake or f"{tmp.name}/lake"
    common = ["--lake", lake, *(["--conf", args.conf] if args.conf else [])]
    t0 = time.perf_counter()
    if not args.reuse_lake:
        _cli(["simulate", "--domain", "chain", "--patients", str(args.patients), "--dataset",
              "chainci", "--seed", str(args.seed), "--no-progress", *common])
        _cli(["ingest", "--dataset", "chainci", "--domain", "chain", *common])
        _cli(["stats", "--dataset", "chainci", "--spec", spec_path, *common])
    # room for these runs on top of whatever an earlier (reused) run spent
    n_runs = args.runs * len(args.estimators.split(",")) + (100 if args.reuse_lake else 0)
    _cli(["budget", "set", "--dataset", "chainci", "--epsilon", str(args.epsilon * n_runs * 1.01),
          "--delta", str(min(0.5, args.delta * n_runs * 1.01)),
          *(["--force"] if args.reuse_lake else []), *common])  # a simulated benchmark cohort
    print(f"cohort of {args.patients} patients ready in {time.perf_counter() - t0:.0f} s", flush=True)
    results: dict[str, dict] = {}

    def save(partial: bool) -> None:
        if args.json:
            Path(args.json).write_text(json.dumps({
                "patients": args.patients, "epsilon": args.epsilon, "delta": args.delta,
                "exact": exact.tolist(), "states": list(spec.reference_names), "partial": partial,
                "gpope_args": args.gpope_args, "results": results,
                "seconds": time.perf_counter() - t0}, indent=2))

    for est in args.estimators.split(","):
        rows = []
        for r in range(args.runs):
            t1 = time.perf_counter()
            extra = shlex.split(args.gpope_args) if est == "gpope" else []
            rep = _cli(["evaluate", "--dataset", "chainci", "--spec", spec_path, "--epsilon",
                        str(args.epsilon), "--delta", str(args.delta), "--estimator", est,
                        *extra, "--json", *common])
            iv = rep["intervals"]
            v, lo, hi = (np.array(iv[k]) for k in ("value", "lower", "upper"))
            rows.append({"value": v.tolist(), "lower": lo.tolist(), "upper": hi.tolist(),
                         "lower_bound": iv["lower_bound"], "seconds": time.perf_counter() - t1,
                         "interval_groups": rep.get("settings", {}).get("interval_groups"),
                         "ssp_clip_quantile": rep.get("settings", {}).get("ssp_clip_quantile"),
                         "finished_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                         "load_average": list(os.getloadavg())})
            print(f"{est} run {r + 1}/{args.runs}: values {np.round(v, 3)} exact {np.round(exact, 3)} "
                  f"intervals {[f'[{a:.3f}, {b:.3f}]' for a, b in zip(lo, hi, strict=True)]} "
                  f"({time.perf_counter() - t1:.0f} s)", flush=True)
            results[est] = _summary(rows, exact)
            save(partial=True)  # a bounded run keeps what it finished
        results[est] = _summary(rows, exact)
        s = results[est]
        print(f"== {est}: coverage {s['coverage']:.3f} of {s['intervals']} intervals (target >= 0.8), "
              f"one-sided {s['lower_bound_coverage']:.3f}, mean width {s['mean_width']:.3f} (<= 0.5), "
              f"median |error| {s['median_abs_error']:.4f} (<= 0.1)", flush=True)
    save(partial=False)
    return 0


def _summary(rows: list[dict], exact: np.ndarray) -> dict:
    v, lo, hi, lb = (np.array([x[k] for x in rows]) for k in ("value", "lower", "upper", "lower_bound"))
    return {"intervals": int(v.size),
            "coverage": float(np.mean((lo <= exact) & (exact <= hi))),
            "lower_bound_coverage": float(np.mean(lb <= exact)),
            "mean_width": float(np.mean(hi - lo)),
            "median_abs_error": float(np.median(np.abs(v - exact))),
            "runs": rows}


if __name__ == "__main__":
    sys.exit(main())

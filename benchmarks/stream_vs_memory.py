"""Benchmark: the same release streamed from Spark and held in driver memory.

One cohort of a simulated domain goes through the product's commands (``gpope simulate``,
``ingest``, ``stats``, ``budget set``) on a fresh lake; then ``gpope evaluate`` releases on it
three times with the shipped spec (``conf/specs/<domain>.yaml``): on the default path
(``--stream auto``), forced in memory (``--stream memory``) and forced streamed
(``--stream stream``). Each evaluate is a separate command (its own JVM), timed end to end,
with a timeout. The layout the default path takes is the product's own rule
(:func:`gpope.core.evaluation.plan_loading` with the same public inputs: m, n, the map's
``max_active``, the cohort's episode cap, ``in_memory_limit_mb``). Prints per path the seconds
and the ratio streamed / in-memory.

Usage: python benchmarks/stream_vs_memory.py --domain chain --patients 100000 [--epsilon 1]
[--workdir DIR] [--timeout 3600] [--paths auto,memory,stream] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPOPE = str(Path(sys.executable).with_name("gpope"))


def _run(args: list[str], *, lake: Path, timeout: float) -> tuple[float, int, str]:
    """(seconds, exit code, last stdout line) of one gpope command; code -1 on timeout."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MLFLOW_TRACKING_URI=f"sqlite:///{lake}.db")
    start = time.perf_counter()
    try:
        done = subprocess.run([GPOPE, *args, "--lake", str(lake)], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - start, -1, f"timeout after {timeout:.0f} s"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return time.perf_counter() - start, done.returncode, lines[-1] if lines else ""


def default_layout(domain: str, patients: int, max_length: int) -> str:
    """The layout the default path takes: the product's rule on the same public inputs."""
    from gpope import api
    from gpope.config import load_config
    from gpope.core.evaluation import plan_loading
    from gpope.core.evaluation.loading import is_one_hot, max_active, sparse_row_bytes

    spec = api.load_spec(str(ROOT / "conf" / "specs" / f"{domain}.yaml"))
    p = max_active(spec.feature_map)
    sparse = None if p is None else sparse_row_bytes(spec.n_features, active=p,
                                                     max_length=max_length)
    limit = load_config().evaluation.in_memory_limit_mb
    return plan_loading(m=patients, n=spec.n_features, path="auto", limit_mb=int(limit),
                        one_hot=is_one_hot(spec.feature_map), sparse_bytes=sparse)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="chain")
    ap.add_argument("--patients", type=int, default=100_000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--paths", default="auto,memory,stream")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="gpope-stream-bench-"))
    lake, name = work / "lake", f"{a.domain}_{a.patients}"
    spec = str(ROOT / "conf" / "specs" / f"{a.domain}.yaml")
    setup = {
        "simulate": ["simulate", "--domain", a.domain, "--patients", str(a.patients),
                     "--dataset", name, "--seed", str(a.seed), "--no-progress"],
        "ingest": ["ingest", "--dataset", name],
        "stats": ["stats", "--dataset", name, "--spec", spec],
        "budget": ["budget", "set", "--dataset", name, "--epsilon", "1000", "--delta", "0.5"],
    }
    out: dict = {"domain": a.domain, "patients": a.patients, "epsilon": a.epsilon, "stages": {}}
    for stage, args in setup.items():
        secs, code, last = _run(args, lake=lake, timeout=a.timeout)
        out["stages"][stage] = round(secs, 1)
        print(f"{stage:<8} {secs:8.1f} s  {last}", file=sys.stderr, flush=True)
        if code != 0:
            sys.exit(f"{stage} failed ({code}): {last}")
    from gpope.shell.pipeline.simulate import dataset_settings_for_domain

    cap = dataset_settings_for_domain(a.domain).max_length
    out["default_layout"] = default_layout(a.domain, a.patients, cap)
    out["evaluate"] = {}
    for path in a.paths.split(","):
        secs, code, last = _run(["evaluate", "--dataset", name, "--spec", spec, "--epsilon",
                                 str(a.epsilon), "--delta", "1e-6", "--stream", path],
                                lake=lake, timeout=a.timeout)
        out["evaluate"][path] = {"seconds": round(secs, 1), "exit": code, "last": last}
        print(f"evaluate --stream {path:<6} {secs:8.1f} s  exit {code}  {last}", file=sys.stderr,
              flush=True)
    ev = out["evaluate"]
    if "stream" in ev and "memory" in ev:
        out["streamed_over_memory"] = round(ev["stream"]["seconds"] / ev["memory"]["seconds"], 2)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{a.domain} at {a.patients} patients: default layout {out['default_layout']}; "
              + ", ".join(f"{p} {v['seconds']} s" for p, v in ev.items())
              + (f"; streamed / in-memory {out['streamed_over_memory']}x"
                 if "streamed_over_memory" in out else ""))


if __name__ == "__main__":
    main()

"""Benchmark: the same release streamed from Spark and held in driver memory.

One cohort of a simulated domain goes through the product's commands (``gpope simulate``,
``ingest``, ``stats``, ``budget set``) on a fresh lake; then ``gpope evaluate`` releases on it
three times with the shipped spec (``conf/specs/<domain>.yaml``) and one fixed ``--seed`` (the
same noise and sample plan): on the default path (``--stream auto``), forced in memory
(``--stream memory``) and forced streamed (``--stream stream``). Each evaluate is a separate
command (its own JVM), timed end to end, with a timeout and its peak resident memory (the
gpope Python process's, which holds the in-memory statistics, and the sampled peak of the
command's processes together, the Spark JVM's included). The layout the default path
takes is the product's own rule (:func:`gpope.core.evaluation.plan_loading` with the same public
inputs: m, n, the map's ``max_active``, the cohort's episode cap, ``in_memory_limit_mb``); the
path each run took is read from its report. Prints per path the seconds, the peak memory, the
largest difference of its released theta from the in-memory run's (the layouts store the same
statistics, so the releases agree), and the ratio streamed / in-memory.

Usage: python benchmarks/stream_vs_memory.py --domain chain --patients 100000 [--epsilon 1]
[--workdir DIR [--reuse]] [--limit-mb MB] [--timeout 3600] [--paths auto,memory,stream] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPOPE = str(Path(sys.executable).with_name("gpope"))


def _tree(root: int) -> list[int]:
    """``root`` and its live descendants (from /proc)."""
    parent: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parent.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parent.get(pid, []))
    return out


def _kb(pid: int, field: str) -> int:
    """A /proc/<pid>/status memory field in kB (0 once the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) ``pid`` has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _run(args: list[str], *, lake: Path, timeout: float) -> dict:
    """One gpope command: seconds, exit code (-1 on timeout), stdout, the last output line and
    peak memory: ``peak_mb`` the gpope Python process's (its VmHWM, where the in-memory
    statistics live), ``tree_peak_mb`` the largest sum of the command's processes' resident
    sizes (Python and the Spark JVM), sampled every 0.5 s; ``cpu_seconds`` the CPU time of its
    processes (the last sample of each: on shared cores a steadier measure than wall time)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", MLFLOW_TRACKING_URI=f"sqlite:///{lake}.db")
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([GPOPE, *args, "--lake", str(lake)], stdout=out, stderr=err,
                                text=True, env=env, cwd=ROOT)
        hwm = tree = 0
        cpu: dict[int, float] = {}
        while proc.poll() is None:
            if time.perf_counter() - start > timeout:
                for pid in reversed(_tree(proc.pid)):
                    with contextlib.suppress(OSError):
                        os.kill(pid, 9)
                proc.wait()
                return {"seconds": round(time.perf_counter() - start, 1), "exit": -1,
                        "peak_mb": round(hwm / 1024), "tree_peak_mb": round(tree / 1024),
                        "cpu_seconds": round(sum(cpu.values()), 1), "stdout": "",
                        "last": f"timeout after {timeout:.0f} s"}
            hwm = max(hwm, _kb(proc.pid, "VmHWM"))
            pids = _tree(proc.pid)
            tree = max(tree, sum(_kb(pid, "VmRSS") for pid in pids))
            for pid in pids:
                cpu[pid] = max(cpu.get(pid, 0.0), _cpu(pid))
            time.sleep(0.5)
        secs = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    lines = (stdout or stderr).strip().splitlines()
    return {"seconds": round(secs, 1), "exit": proc.returncode, "peak_mb": round(hwm / 1024),
            "tree_peak_mb": round(tree / 1024), "cpu_seconds": round(sum(cpu.values()), 1),
            "stdout": stdout,
            "last": lines[-1] if lines else ""}


def default_layout(domain: str, patients: int, max_length: int, limit_mb: int | None) -> str:
    """The layout the default path takes: the product's rule on the same public inputs."""
    from gpope import api
    from gpope.config import load_config
    from gpope.core.evaluation import plan_loading
    from gpope.core.evaluation.loading import (
        is_one_hot,
        max_active,
        pair_support,
        sparse_row_bytes,
    )

    spec = api.load_spec(str(ROOT / "conf" / "specs" / f"{domain}.yaml"))
    p = max_active(spec.feature_map)
    sparse = None if p is None else sparse_row_bytes(
        spec.n_features, active=p, max_length=max_length, pairs=pair_support(spec.feature_map))
    limit = limit_mb or load_config().evaluation.in_memory_limit_mb
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
    ap.add_argument("--limit-mb", type=int, default=None,
                    help="evaluation.in_memory_limit_mb for the evaluates (default: the conf's); "
                         "a smaller limit makes the default path stream a smaller cohort")
    ap.add_argument("--reuse", action="store_true",
                    help="the workdir's lake already holds the cohort: skip the setup")
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
    for stage, args in ({} if a.reuse else setup).items():
        r = _run(args, lake=lake, timeout=a.timeout)
        out["stages"][stage] = {k: r[k] for k in ("seconds", "cpu_seconds", "peak_mb",
                                                  "tree_peak_mb")}
        print(f"{stage:<8} {r['seconds']:8.1f} s  {r['peak_mb']} / {r['tree_peak_mb']} MB  "
              f"{r['last']}",
              file=sys.stderr, flush=True)
        if r["exit"] != 0:
            sys.exit(f"{stage} failed ({r['exit']}): {r['last']}")
    from gpope.shell.pipeline.simulate import dataset_settings_for_domain

    cap = dataset_settings_for_domain(a.domain).max_length
    out["default_layout"] = default_layout(a.domain, a.patients, cap, a.limit_mb)
    conf: list[str] = []
    if a.limit_mb:
        (work / "conf.yaml").write_text(f"evaluation:\n  in_memory_limit_mb: {a.limit_mb}\n")
        conf = ["--conf", str(work / "conf.yaml")]
        out["in_memory_limit_mb"] = a.limit_mb
    out["evaluate"] = {}
    thetas = {}
    for path in a.paths.split(","):
        r = _run(["evaluate", "--dataset", name, "--spec", spec, "--epsilon", str(a.epsilon),
                  "--delta", "1e-6", "--stream", path, "--seed", str(a.seed), "--json", *conf],
                 lake=lake, timeout=a.timeout)
        report = json.loads(r["stdout"]) if r["exit"] == 0 else {}
        thetas[path] = report.get("theta")
        out["evaluate"][path] = {"seconds": r["seconds"], "cpu_seconds": r["cpu_seconds"],
                                 "peak_mb": r["peak_mb"],
                                 "tree_peak_mb": r["tree_peak_mb"], "exit": r["exit"],
                                 "path_taken": report.get("path"),
                                 "inner_seconds": report.get("seconds"),
                                 "last": "" if report else r["last"]}
        print(f"evaluate --stream {path:<6} {r['seconds']:8.1f} s ({r['cpu_seconds']} s CPU)  "
              f"{r['peak_mb']} / "
              f"{r['tree_peak_mb']} MB  exit "
              f"{r['exit']}  {report.get('path', r['last'])}", file=sys.stderr, flush=True)
    ref = thetas.get("memory")
    for path, theta in thetas.items():
        if ref is not None and theta is not None:
            out["evaluate"][path]["theta_max_abs_diff_from_memory"] = max(
                abs(x - y) for x, y in zip(theta, ref, strict=True))
    ev = out["evaluate"]
    if "stream" in ev and "memory" in ev:
        out["streamed_over_memory"] = round(ev["stream"]["seconds"] / ev["memory"]["seconds"], 2)
        out["streamed_over_memory_cpu"] = round(
            ev["stream"]["cpu_seconds"] / max(ev["memory"]["cpu_seconds"], 0.1), 2)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{a.domain} at {a.patients} patients: default layout {out['default_layout']}; "
              + ", ".join(f"{p} {v['seconds']} s ({v['peak_mb']} MB)" for p, v in ev.items())
              + (f"; streamed / in-memory {out['streamed_over_memory']}x"
                 if "streamed_over_memory" in out else ""))


if __name__ == "__main__":
    main()

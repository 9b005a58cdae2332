"""Benchmark of the adaptive PLD grid (prints a table; not a test).

For the settings of reference/ACCOUNTING.md's PLD table (Poisson q = 1/m, delta = 1e-5): epsilon
and time of dp-accounting's default grid (1e-4), of gpope's adaptive grid, and of a fine grid
(1e-5; 1e-6 is known to run out of memory at N = 1e6), with the ratios to the fine grid; then the
time of ``calibrate_sigma(accountant="pld", sampling="poisson")`` at m = N = 1e5 and 1e6.

Resource bound (issue 12, defect 4; target: <= 2 GB and <= 10 s for m, N up to 1e6, any q):
``calibrate(accountant="pld")`` at m = N = 1e6, q = 1e-5 (and the issue's m = 1e5, N = 1e6,
q = 1e-5, epsilon 0.1 reproduction, which used to allocate 24 GB), each in a fresh subprocess
whose address space is capped at 4 GiB (so a regression cannot take the machine down), printing
wall time, CPU time and peak RSS, next to the RDP calibration of the same event (reference).
The on-disk cache is off for these runs.

Fine-grid check (issue 26 item 3: within 2 % of the fine-grid sigma, <= 10 s, <= 2 GB):
``calibrate`` at m = 1e5, N = 1e6, q = 1e-5, epsilon 0.1, delta 1e-5 in a fresh capped process,
then dp-accounting's own ``PLDAccountant`` at grid 1e-5 at the returned sigma (must certify the
target) and at sigma / 1.02 (must miss it): the returned sigma is then within 2 % of the
fine-grid root. Wall time, CPU time and peak memory are also given as ratios to ONE
dp-accounting evaluation at grid 1e-5 measured in the same run (load moves both alike).

    python benchmarks/accounting_pld.py            # full run (minutes)
    python benchmarks/accounting_pld.py --quick    # one small setting + the resource bound
    python benchmarks/accounting_pld.py --fine-check   # the fine-grid check only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dp_accounting
from dp_accounting.pld import PLDAccountant

from gpope.core.accounting import calibrate_sigma, gpope_dp_event, pld_epsilon_adaptive

DELTA = 1e-5
FULL = [(100_000, 100_000, 0.8), (100_000, 1_000_000, 0.65), (300_000, 3_000_000, 1.0)]
QUICK = [(10_000, 10_000, 0.7)]


def _grid_epsilon(m: int, n: int, sigma: float, interval: float) -> tuple[float, float]:
    start = time.perf_counter()
    acc = PLDAccountant(
        neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=interval,
    )
    acc.compose(gpope_dp_event(m=m, iterations=n, sigma=sigma, sampling="poisson",
                               batch_rate=1.0 / m))
    return acc.get_epsilon(DELTA), time.perf_counter() - start


RESOURCE = [  # (m, N, q, epsilon, delta)
    (1_000_000, 1_000_000, 1e-5, 1.0, 1e-6),
    (1_000_000, 1_000_000, 1e-5, 0.1, 1e-6),
    (100_000, 1_000_000, 1e-5, 0.1, 1e-5),
]

_PEAK = """
def _peak_mb():
    # VmHWM starts afresh at exec; ru_maxrss would keep the forking parent's size
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""

_CHILD = _PEAK + textwrap.dedent("""
    import json, resource, sys, time
    cap = 4 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from gpope.core.accounting import calibrate
    m, n, q, eps, delta, acc = json.loads(sys.argv[1])
    w0, c0 = time.perf_counter(), time.process_time()
    cal = calibrate(m=m, iterations=n, epsilon=eps, delta=delta, accountant=acc,
                    sampling="poisson", batch_rate=q)
    print(json.dumps({"sigma": cal.sigma, "epsilon": cal.epsilon, "by": cal.certified_by,
                      "wall": time.perf_counter() - w0, "cpu": time.process_time() - c0,
                      "rss_mb": _peak_mb()}))
""")


def _resource_run(m: int, n: int, q: float, eps: float, delta: float, acc: str) -> dict:
    env = {**os.environ, "GPOPE_CACHE_DIR": "off", "OPENBLAS_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([m, n, q, eps, delta, acc])],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def resource_table() -> None:
    """Print the PLD calibration's time and peak memory at m = N = 1e6 (resource bound)."""
    print("calibrate(accountant='pld', sampling='poisson'): fresh process, 4 GiB address cap, "
          "no cache")
    print(f"{'m':>8} {'N':>8} {'q':>6} {'eps':>4} {'delta':>6} | {'PLD sigma (by)':>18} "
          f"{'wall':>6} {'cpu':>6} {'peak RSS':>9} | {'RDP sigma':>9} {'wall':>6} | "
          f"{'sigma PLD/RDP':>13}")
    for m, n, q, eps, delta in RESOURCE:
        pld = _resource_run(m, n, q, eps, delta, "pld")
        rdp = _resource_run(m, n, q, eps, delta, "rdp")
        if "error" in pld or "error" in rdp:
            print(f"{m:>8} {n:>8} {q:>6g} {eps:>4} {delta:>6g} | FAILED: "
                  f"{pld.get('error') or rdp.get('error')}")
            continue
        print(f"{m:>8.0e} {n:>8.0e} {q:>6g} {eps:>4} {delta:>6g} | "
              f"{pld['sigma']:>11.4f} ({pld['by']}) {pld['wall']:>5.1f}s {pld['cpu']:>5.1f}s "
              f"{pld['rss_mb']:>6.0f} MB | {rdp['sigma']:>9.4f} {rdp['wall']:>5.1f}s | "
              f"{pld['sigma'] / rdp['sigma']:>13.3f}", flush=True)
    print(f"(load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")


_DP_CHILD = _PEAK + textwrap.dedent("""
    import json, resource, sys, time
    cap = 4 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    m, n, q, sigma, delta, interval = json.loads(sys.argv[1])
    w0, c0 = time.perf_counter(), time.process_time()
    acc = PLDAccountant(neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                        value_discretization_interval=interval)
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), n))
    eps = acc.get_epsilon(delta)
    print(json.dumps({"epsilon": eps, "wall": time.perf_counter() - w0,
                      "cpu": time.process_time() - c0,
                      "rss_mb": _peak_mb()}))
""")


def _dp_run(m: int, n: int, q: float, sigma: float, delta: float, interval: float) -> dict:
    """dp-accounting's PLDAccountant at one grid, in a fresh capped process (wall, cpu, RSS)."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", _DP_CHILD,
                          json.dumps([m, n, q, sigma, delta, interval])],
                         env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def fine_check(fine: float = 1e-5) -> dict:
    """The issue's calibration against dp-accounting's PLD at the fine grid (prints, returns).

    Three fresh processes, each capped at 4 GiB: gpope's calibration, then dp-accounting's
    PLDAccountant at grid ``fine`` at the returned sigma (must certify the target) and at
    sigma / 1.02 (must miss it). Times and peak memory are reported as ratios to ONE
    dp-accounting evaluation measured in the same run, so load moves both alike.
    """
    m, n, q, eps, delta = 100_000, 1_000_000, 1e-5, 0.1, 1e-5
    ours = _resource_run(m, n, q, eps, delta, "pld")
    if "error" in ours:
        print(f"fine-grid check FAILED: {ours['error']}")
        return ours
    at = _dp_run(m, n, q, ours["sigma"], delta, fine)
    below = _dp_run(m, n, q, ours["sigma"] / 1.02, delta, fine)
    if "error" in at or "error" in below:
        print(f"dp-accounting FAILED: {at.get('error') or below.get('error')}")
        return {**ours, "dp_error": at.get("error") or below.get("error")}
    result = {**ours, "dp_eps_at_sigma": at["epsilon"],
              "dp_eps_at_sigma_over_1.02": below["epsilon"],
              "within_2pct": at["epsilon"] <= eps < below["epsilon"],
              "dp_one_eval_wall": at["wall"], "dp_one_eval_cpu": at["cpu"],
              "dp_one_eval_rss_mb": at["rss_mb"],
              "wall_ratio": ours["wall"] / at["wall"], "cpu_ratio": ours["cpu"] / at["cpu"],
              "rss_ratio": ours["rss_mb"] / at["rss_mb"]}
    print(f"calibrate(pld) m=1e5 N=1e6 q=1e-5 eps 0.1: sigma {ours['sigma']:.4f} "
          f"({ours['by']}), wall {ours['wall']:.1f} s, cpu {ours['cpu']:.1f} s, peak RSS "
          f"{ours['rss_mb']:.0f} MB")
    print(f"  dp-accounting PLD at grid {fine:g}: eps(sigma) = {at['epsilon']:.5f}, "
          f"eps(sigma/1.02) = {below['epsilon']:.5f} -> within 2 % of the fine-grid sigma: "
          f"{result['within_2pct']}")
    print(f"  one dp-accounting evaluation at grid {fine:g}: wall {at['wall']:.1f} s, cpu "
          f"{at['cpu']:.1f} s, peak RSS {at['rss_mb']:.0f} MB")
    print(f"  calibration / one dp-accounting evaluation: wall {result['wall_ratio']:.2f}, cpu "
          f"{result['cpu_ratio']:.2f}, peak RSS {result['rss_ratio']:.2f}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small setting only")
    parser.add_argument("--fine", type=float, default=1e-5, help="fine reference grid")
    parser.add_argument("--resource-only", action="store_true",
                        help="only the resource-bound table (m = N = 1e6)")
    parser.add_argument("--fine-check", action="store_true",
                        help="only the fine-grid check of the calibration (issue 26 item 3)")
    args = parser.parse_args()
    if args.fine_check:
        result = fine_check(args.fine)
        out = Path(__file__).resolve().parents[1] / "docs" / "results" / "accounting_pld_fine.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        return
    if args.resource_only:
        resource_table()
        return
    settings = QUICK if args.quick else FULL
    print(f"PLD epsilon, Poisson q = 1/m, delta = {DELTA:g}")
    print(f"{'m':>8} {'N':>9} {'sigma':>6} | {'default 1e-4':>20} | {'adaptive (grid)':>30} | "
          f"{f'fine {args.fine:g}':>20} | {'default/fine':>12} {'adaptive/fine':>13}")
    for m, n, sigma in settings:
        e_def, t_def = _grid_epsilon(m, n, sigma, 1e-4)
        start = time.perf_counter()
        est = pld_epsilon_adaptive(batch_rate=1.0 / m, iterations=n, sigma=sigma, delta=DELTA)
        t_ad = time.perf_counter() - start
        try:
            e_fine, t_fine = _grid_epsilon(m, n, sigma, args.fine)
            fine = f"{e_fine:.4f} ({t_fine:5.1f} s)"
            ratios = f"{e_def / e_fine:12.2f} {est.epsilon / e_fine:13.2f}"
        except MemoryError:
            fine, ratios = "out of memory", ""
        print(f"{m:>8} {n:>9} {sigma:>6} | {e_def:.4f} ({t_def:5.1f} s)      | "
              f"{est.epsilon:.4f} ({t_ad:5.1f} s, {est.interval:.3g}) {'':>3}| {fine:>20} | "
              f"{ratios}")
    print()
    print("calibrate_sigma(accountant='pld', sampling='poisson', q = 1/m), delta 1e-5")
    cal = [(10_000, 10_000, 0.1)] if args.quick else [
        (100_000, 100_000, 0.1), (100_000, 100_000, 1.0), (1_000_000, 1_000_000, 0.1)]
    for m, n, eps in cal:
        start = time.perf_counter()
        sigma = calibrate_sigma(m=m, iterations=n, epsilon=eps, delta=DELTA, accountant="pld",
                                sampling="poisson", batch_rate=1.0 / m)
        print(f"  m={m:>8} N={n:>8} epsilon={eps:<4}: sigma = {sigma:.4f} "
              f"({time.perf_counter() - start:.1f} s)")
    print()
    resource_table()


if __name__ == "__main__":
    main()

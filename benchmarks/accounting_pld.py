"""Benchmark of the adaptive PLD grid (prints a table; not a test).

For the settings of reference/ACCOUNTING.md's PLD table (Poisson q = 1/m, delta = 1e-5): epsilon
and time of dp-accounting's default grid (1e-4), of gpope's adaptive grid, and of a fine grid
(1e-5; 1e-6 is known to run out of memory at N = 1e6), with the ratios to the fine grid; then the
time of ``calibrate_sigma(accountant="pld", sampling="poisson")`` at m = N = 1e5 and 1e6.

    python benchmarks/accounting_pld.py            # full run (minutes)
    python benchmarks/accounting_pld.py --quick    # one small setting (seconds)
"""

from __future__ import annotations

import argparse
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one small setting only")
    parser.add_argument("--fine", type=float, default=1e-5, help="fine reference grid")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()

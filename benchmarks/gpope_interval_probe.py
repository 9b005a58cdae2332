"""Probe (issue 11, part 2): can a GPOPE run's own iterates give its interval? Two within-run
methods, measured against the spread of GPOPE over independent runs on ONE data set.

* ``batch-means``: R runs (independent noise and batches) at the spec's operating point; per run,
  the tail iterates (traced every N/400 steps) in K = 10 contiguous batches, standard error of the
  tail average = sd(batch means) / sqrt(K) (the batch-means estimator of SGD inference, Chen, Lee,
  Tong and Zhang 2020, Ann. Statist. 48(1)); compared with the sd of the released values across
  the R runs (which it must match to give a valid interval for the privacy + batch noise).
* ``replicates``: K independent chains of N / K steps each at the same sigma (the same N noisy
  steps, so the same privacy cost), released value = their mean, interval from their spread;
  ``outer`` repetitions show the mean and the spread of that estimate.

Domains: ``chain`` (conf/specs/chain.yaml, one simulated data set of m patients) and ``hiv``
(conf/specs/hiv_demo.yaml, m patients drawn from the pool cached by
``benchmarks/intervals_coverage.py --domain hiv``). Fixed seeds: a measurement, NOT private.

Usage: nice -n 10 python benchmarks/gpope_interval_probe.py batch-means chain --m 10000 --eps 1 --runs 8
       nice -n 10 python benchmarks/gpope_interval_probe.py replicates hiv --m 2000 --eps 1 --k 10 --outer 4
"""

from __future__ import annotations

import argparse
import glob
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _problem(domain: str, m: int, pool_dir: str):
    """(spec, TrajectoryStats, values at the data's own LSTD fixed point, delta)."""
    from gpope.core import ssp
    from gpope.core.statistics import TrajectoryStats, statistics_from_transitions
    from gpope.shell.pipeline.jobargs import load_spec

    if domain == "hiv":
        pool = np.concatenate([np.load(f) for f in sorted(glob.glob(f"{pool_dir}/pool_*.npy"))])
        spec = load_spec(ROOT / "conf/specs/hiv_demo.yaml")
        n = spec.n_features
        vec = pool[np.random.default_rng(1).integers(0, len(pool), m)]
        A, b, C = ssp.split_vector(vec, n)
        Da, Db, _ = ssp.split_vector(vec.mean(0), n)
        return spec, TrajectoryStats.from_dense(A, b, C), spec.reference_values(np.linalg.solve(Da, Db)), 0.9e-5
    from gpope.core.envs import chain as ch

    spec = load_spec(ROOT / "conf/specs/chain.yaml")
    cfg = ch.ChainConfig()
    tr = ch.generate(m, np.random.default_rng(5), cfg)
    st = statistics_from_transitions(tr, ch.feature_map(cfg), np.ones(tr.n_transitions),
                                     gamma=cfg.gamma, length_scale=200.0, representation="tabular")
    P = st.population()
    return spec, st, spec.reference_values(np.linalg.lstsq(P[0], P[1], rcond=None)[0]), 0.9e-6


def _config(spec, m: int, eps: float, delta: float, iterations_divisor: int, trace: bool):
    from gpope.core.accounting import calibrate_sigma
    from gpope.core.gpope.operating import resolve_budget, resolve_step_offset
    from gpope.core.gpope.solver import GPOPEConfig

    s, _ = spec.evaluation.select(m, eps)
    N, q = resolve_budget(m=m, sampling="poisson", passes=s.get("passes"), batch_size=None,
                          iterations=s["iterations"], batch_rate=s.get("batch_rate"))
    # 0.9 eps: a gpope run's share when 0.1 goes to the noisy statistics (evaluate's default)
    sigma = calibrate_sigma(m=m, iterations=N, epsilon=0.9 * eps, delta=delta, accountant="auto",
                            sampling="poisson", batch_rate=q)
    Nk = N // iterations_divisor
    cfg = GPOPEConfig(
        iterations=Nk, step_size=s["step_size"], clip=s["clip"], noise_multiplier=sigma,
        delta=delta, sampling="poisson", batch_rate=q, step_schedule=s["step_schedule"],
        step_offset=resolve_step_offset(iterations=Nk, step_offset=None,
                                        step_offset_fraction=s.get("step_offset_fraction")),
        averaging="tail", tail_fraction=s["tail_fraction"],
        trace_every=max(1, N // 400) if trace else None)
    return cfg, N, q, sigma


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", choices=("batch-means", "replicates"))
    parser.add_argument("domain", choices=("chain", "hiv"))
    parser.add_argument("--m", type=int, default=10000)
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--outer", type=int, default=4)
    parser.add_argument("--pool-dir", default="/tmp/intervals/hivpool")
    args = parser.parse_args(argv)
    from gpope.core.gpope.solver import run_gpope_trials

    spec, st, fixed_point, delta = _problem(args.domain, args.m, args.pool_dir)
    t = time.perf_counter()
    if args.method == "batch-means":
        cfg, N, q, sigma = _config(spec, args.m, args.eps, delta, 1, trace=True)
        res = run_gpope_trials(st, cfg, 7, args.runs)
        vals = np.array([spec.reference_values(th) for th in res.theta_avg])
        print(f"{args.domain} m={args.m} eps={args.eps:g}: N {N}, q {q:g}, sigma {sigma:.4g}, "
              f"{cfg.step_schedule} steps; {time.perf_counter() - t:.0f} s")
        print("data's LSTD fixed point", fixed_point)
        print("mean over runs", vals.mean(0), "sd across runs", vals.std(0, ddof=1))
        avg_from = N - math.ceil(cfg.tail_fraction * N)
        sel = res.trace_steps > avg_from
        for r in range(args.runs):
            tt = np.array([spec.reference_values(th) for th in res.trace_theta[r][sel]])
            bm = np.array([b.mean(0) for b in np.array_split(tt, args.k)])
            print(f"run {r}: value {vals[r]}, batch-means se {bm.std(0, ddof=1) / math.sqrt(args.k)}")
        return 0
    cfg, N, q, sigma = _config(spec, args.m, args.eps, delta, args.k, trace=False)
    res = run_gpope_trials(st, cfg, 7, args.k * args.outer)
    vals = np.array([spec.reference_values(th) for th in res.theta_avg]).reshape(args.outer, args.k, -1)
    means = vals.mean(1)
    se = vals.std(1, ddof=1) / math.sqrt(args.k)
    print(f"{args.domain} m={args.m} eps={args.eps:g}: {args.k} chains of {cfg.iterations} steps; "
          f"{time.perf_counter() - t:.0f} s; data's LSTD fixed point {fixed_point}")
    print("mean of the K-chain estimates", means.mean(0), "their sd across repetitions",
          means.std(0, ddof=1), "mean within-repetition se", se.mean(0))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark of the GPOPE driver against its floor (docs/ARCHITECTURE.md section 8).

The floor is the time to read the sampled statistics once: fancy-index the per-trajectory blocks
[A_j | C_j] and b_j of the same sample plan, chunk by chunk, and sum them. The driver runs
Algorithm 1 (clip, noise, update) over the same number of steps.

Usage::

    python benchmarks/driver.py [--quick]

Prints a table: dense driver iterations/s for n in {16, 40, 128} next to the floor and the ratio;
a chain-like run (m = 1e5 trajectories, N = 1e5 steps, tabular compact statistics, n = 40);
trials/s for 100 trials batched; and the many-pass Poisson regime of the issue-10 operating point
(20 passes, N = 20,000 steps, several trials batched; compiled loop ``kernels.poisson_steps``)
against ITS floor: gathering and summing the sampled rows of the same Poisson plan once.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # tiny BLAS calls: threads only add overhead

import argparse
import time

import numpy as np

from gpope.core.gpope.solver import GPOPEConfig, run_gpope, run_gpope_trials
from gpope.core.statistics import TrajectoryStats, trajectory_statistics


def dense_stats(rng: np.random.Generator, m: int, n: int) -> TrajectoryStats:
    """Random dense statistics of the right scale (the values do not affect the cost)."""
    A = rng.normal(size=(m, n, n)) / n
    C = np.abs(rng.normal(size=(m, n, n))) / n
    return TrajectoryStats.from_dense(A, rng.normal(size=(m, n)), C)


def floor_seconds(stats: TrajectoryStats, idx: np.ndarray, chunk: int) -> float:
    """Time to gather and sum the sampled statistics of plan idx once, chunk by chunk."""
    t0 = time.perf_counter()
    total = 0.0
    for c0 in range(0, len(idx), chunk):
        sel = idx[c0 : c0 + chunk]
        total += float(stats._ac[sel].sum()) + float(stats._b[sel].sum())
    return time.perf_counter() - t0


def chain_transitions(m: int, rng: np.random.Generator, n_states: int = 40, p: float = 0.5):
    """Vectorised chain sample (the real simulator lives in gpope.core.envs.chain)."""
    last = n_states - 1
    start = rng.integers(0, last, size=m)
    k = last - start
    traj = np.repeat(np.arange(m), k)
    pos = np.repeat(start - (np.cumsum(k) - k), k) + np.arange(k.sum())
    dwell = rng.geometric(1 - p, size=len(pos))
    state = np.repeat(pos, dwell)
    nxt = state.copy()
    nxt[np.cumsum(dwell) - 1] += 1
    reward = ((nxt == last) & (nxt != state)).astype(float)
    return np.repeat(traj, dwell), state, nxt, reward, nxt == last


def chain_stats(m: int, rng: np.random.Generator) -> TrajectoryStats:
    """Tabular compact statistics of m chain trajectories, built without one-hot rows."""
    from gpope.core.features import TabularFeatures
    from gpope.core.statistics import statistics_from_transitions
    from gpope.core.trajectories.transitions import Transitions

    traj, s, sn, r, term = chain_transitions(m, rng)
    T = len(traj)
    tr = Transitions(
        traj_index=traj, t=np.zeros(T, dtype=np.int64), state=s[:, None].astype(float),
        action=np.zeros(T, dtype=np.int64), reward=r, next_state=sn[:, None].astype(float),
        terminal=term, truncated=np.zeros(T, bool), behavior_prob=np.ones(T), n_trajectories=m,
    )
    return statistics_from_transitions(tr, TabularFeatures(40), np.ones(T), gamma=0.99,
                                       length_scale=200.0, representation="compact")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations and trials")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    steps = 20_000 if args.quick else 100_000

    warm = dense_stats(rng, 4, 2)  # warm-up: imports the accountant once, outside the timings
    run_gpope(warm, GPOPEConfig(iterations=10, step_size=0.1, clip=1.0, noise_multiplier=1.0), 0)
    print(f"{'case':<34}{'iters/s':>12}{'floor it/s':>12}{'ratio':>8}")
    for n, m in ((16, 2000), (40, 2000), (128, 2000)):
        stats = dense_stats(rng, m, n)
        N = steps if n < 128 else steps // 2
        cfg = GPOPEConfig(iterations=N, step_size=0.01, clip=1.0, noise_multiplier=1.0)
        t0 = time.perf_counter()
        run_gpope(stats, cfg, 1)
        t_run = time.perf_counter() - t0
        chunk = max(1, min(4096, (32 * 2**20) // (2 * n * 8 + 2 * n * n * 8)))
        t_floor = floor_seconds(stats, np.random.default_rng(1).integers(0, m, N), chunk)
        print(f"{f'dense n={n} m={m} N={N}':<34}{N / t_run:>12.0f}{N / t_floor:>12.0f}"
              f"{t_run / t_floor:>8.1f}")
        del stats

    m_chain = 20_000 if args.quick else 100_000
    t0 = time.perf_counter()
    cs = chain_stats(m_chain, rng)
    t_build = time.perf_counter() - t0
    cfg = GPOPEConfig(iterations=steps, step_size=0.5, clip=1.0, noise_multiplier=1.0,
                      averaging="tail")
    t0 = time.perf_counter()
    run_gpope(cs, cfg, 2)
    t_run = time.perf_counter() - t0
    print(f"chain m={m_chain} N={steps} tabular compact (T={int(cs.tau.sum())}): build "
          f"{t_build:.1f} s, run {t_run:.1f} s ({steps / t_run:.0f} it/s)")

    R = 100
    N = 500 if args.quick else 2000
    for n in (16, 40):
        stats = dense_stats(rng, 2000, n)
        cfg = GPOPEConfig(iterations=N, step_size=0.01, clip=1.0, noise_multiplier=1.0)
        t0 = time.perf_counter()
        run_gpope_trials(stats, cfg, 3, R)
        t_run = time.perf_counter() - t0
        print(f"{R} trials batched, dense n={n}, N={N}: {t_run:.2f} s = "
              f"{R / t_run:.1f} trials/s ({R * N / t_run:.0f} trial-steps/s)")
    t0 = time.perf_counter()
    run_gpope_trials(cs, GPOPEConfig(iterations=N, step_size=0.5, clip=1.0,
                                     noise_multiplier=1.0), 3, R)
    t_run = time.perf_counter() - t0
    print(f"{R} trials batched, chain tabular m={m_chain}, N={N}: {t_run:.2f} s = "
          f"{R / t_run:.1f} trials/s ({R * N / t_run:.0f} trial-steps/s)")
    poisson_regime(rng, quick=args.quick)
    _ = trajectory_statistics  # re-exported for readers: the generic builder


def poisson_regime(rng: np.random.Generator, *, quick: bool) -> None:
    """Many-pass Poisson batches (q = passes / N) for R trials vs the gather floor of the plan."""
    from gpope.core.gpope.sample_plan import draw_plan, plan_chunk_steps

    R = 4
    N = 5_000 if quick else 20_000
    for n, m in ((16, 5000), (40, 5000)):
        stats = dense_stats(rng, m, n)
        q = 20.0 / N  # 20 passes
        cfg = GPOPEConfig(iterations=N, step_size=0.01, clip=1.0, noise_multiplier=1.0,
                          sampling="poisson", batch_rate=q, averaging="tail",
                          step_schedule="inverse", step_offset=0.1 * N)
        t0 = time.perf_counter()
        run_gpope_trials(stats, cfg, 5, R)
        t_run = time.perf_counter() - t0
        gen = np.random.default_rng(7)
        t0 = time.perf_counter()
        total = 0.0
        for chunk in draw_plan(gen, m=m, config=cfg, chunk=plan_chunk_steps(n, R, True), trials=R):
            total += float(stats._ac[chunk.ids].sum()) + float(stats._b[chunk.ids].sum())
        t_floor = time.perf_counter() - t0
        touched = 20 * m * R
        print(f"{f'poisson n={n} m={m} N={N} R={R}':<34}{N / t_run:>12.0f}{N / t_floor:>12.0f}"
              f"{t_run / t_floor:>8.1f}   ({touched / t_run:.0f} gradients/s)")


if __name__ == "__main__":
    main()

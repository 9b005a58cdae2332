"""Benchmark the vectorised simulators: chain and mountain car trajectory generation.

Usage::

    python benchmarks/generate.py            # 1e5 chain and 1e4 mountain-car trajectories
    python benchmarks/generate.py --quick    # 1e4 and 1e3
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpope.core.envs import chain, mountaincar


def _report(name: str, m: int, seconds: float, transitions: int) -> None:
    print(
        f"{name:<34} m={m:>7,d}  transitions={transitions:>10,d}  "
        f"{seconds:7.2f} s  {transitions / seconds:>12,.0f} transitions/s"
    )


def main(argv: list[str] | None = None) -> int:
    """Time each generator once (after a small warm-up) and print throughput."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="ten times fewer trajectories")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    m_chain, m_car = (10_000, 1_000) if args.quick else (100_000, 10_000)
    rng = np.random.default_rng(args.seed)

    chain.generate(100, rng)
    start = time.perf_counter()
    tr = chain.generate(m_chain, rng)
    _report("chain (40 states)", m_chain, time.perf_counter() - start, tr.n_transitions)

    policies = {
        "mountain car, greedy learned": mountaincar.learned_policy("greedy"),
        "mountain car, epsilon-greedy 0.1": mountaincar.learned_policy("epsilon_greedy", epsilon=0.1),
        "mountain car, uniform random": mountaincar.uniform_policy(),
    }
    for name, policy in policies.items():
        mountaincar.generate(10, rng, policy)
        start = time.perf_counter()
        tr = mountaincar.generate(m_car, rng, policy)
        _report(name, m_car, time.perf_counter() - start, tr.n_transitions)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

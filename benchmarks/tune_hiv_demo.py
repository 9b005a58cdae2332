"""Choose the public settings of ``gpope demo`` on PUBLIC simulated data only (never the demo's data).

Run (about 2 minutes on one core)::

    .venv/bin/python benchmarks/tune_hiv_demo.py [--seed 1] [--patients 2000] [--steps 40]

What it prints, all computed from the public HIV simulator with seed ``--seed`` (default 1; the
demo's own cohort uses OS entropy or ``--seed`` of ``gpope demo``, its MSPBE cohort the separate
``PUBLIC_SEED`` of :mod:`gpope.shell.pipeline.public`):

1. the range of the log10 observations of a public behaviour cohort (the spec's feature bounds are
   this range, widened and rounded);
2. the reference state ``target_day100``: the state after 20 decisions (100 days) of the target
   policy from the public start state (deterministic simulator: no data involved);
3. a grid of GPOPE settings (batch rate q, iterations N, clip h, step size eta; constant steps,
   tail averaging) at the demo's epsilon 1, delta 1e-5 on that cohort's statistics, scored by the
   median relative MSPBE (MSPBE / MSPBE(theta = 0)) of 3 seeded trials on the same public cohort.
   The winner is what ``DEMO_EVALUATION`` in :mod:`gpope.shell.pipeline.demo` holds.
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from gpope.core.envs import hiv
from gpope.core.gpope import GPOPEConfig, run_gpope_trials
from gpope.core.metrics import relative_mspbe
from gpope.shell.pipeline.demo import demo_spec
from gpope.shell.pipeline.public import public_transitions
from gpope.shell.pipeline.stats import statistics_of_transitions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="public tuning seed (default 1)")
    parser.add_argument("--patients", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    spec = demo_spec()
    cohort = public_transitions("hiv", args.patients, np.random.default_rng(args.seed),
                                max_length=args.steps)
    print("public observation range (log10):")
    print("  low ", np.round(cohort.state.min(axis=0), 2).tolist())
    print("  high", np.round(cohort.state.max(axis=0), 2).tolist())
    path = hiv.generate(1, np.random.default_rng(0), spec.target_policy, n_steps=21)
    print("target_day100 (target policy, 20 decisions from the start):",
          [round(float(v), 6) for v in path.state[20]])

    stats = statistics_of_transitions(cohort, spec)
    A, b, C = stats.population()
    lstd = np.linalg.solve(A, b)
    print("LSTD on the public cohort:", dict(zip(spec.reference_names,
                                                 spec.reference_values(lstd).round(-3), strict=True)))
    norms = np.linalg.norm(stats.gradients(np.arange(stats.m), lstd, np.zeros(stats.n)), axis=1)
    print("per-trajectory gradient norms at the LSTD solution, p50/p75/p90:",
          np.percentile(norms, [50, 75, 90]).round(6).tolist())
    results = []
    grid = itertools.product([(0.005, 20000), (0.01, 10000), (0.01, 20000), (0.02, 10000)],
                             [2e-4, 3e-4, 4e-4], [2.0, 4.0, 8.0])
    for (q, n_iter), clip, eta in grid:
        config = GPOPEConfig(iterations=n_iter, step_size=eta, clip=clip, epsilon=1.0, delta=1e-5,
                             accountant="pld", sampling="poisson", batch_rate=q,
                             averaging="tail", tail_fraction=0.5)
        theta = run_gpope_trials(stats, config, 123, 3).theta_avg
        score = float(np.median(relative_mspbe(theta, A, b, C))) if np.isfinite(theta).all() else np.inf
        results.append((score, q, n_iter, clip, eta))
        print(f"  q {q:<6g} N {n_iter:<6d} clip {clip:<7g} eta {eta:<4g} relative MSPBE {score:.4f}",
              flush=True)
    best = min(results)
    print(f"best: q {best[1]:g}, N {best[2]}, clip {best[3]:g}, eta {best[4]:g} "
          f"(relative MSPBE {best[0]:.4f})")


if __name__ == "__main__":
    main()

"""The chain target of issue 10, through the same resolution and solver as ``gpope evaluate``.

Run: ``.venv/bin/python benchmarks/chain_target.py --patients 100000 --trials 3``

Per trial: a fresh chain cohort from the simulator (the data ``gpope simulate --domain chain``
writes), its statistics under conf/specs/chain.yaml, the run's settings resolved exactly as
``gpope evaluate --epsilon E --delta 1e-6`` with no solver flags resolves them
(:func:`gpope.core.evaluation.settings.resolve_settings`: the spec's evaluation: block, then conf), sigma from the
accountant, GPOPE from OS entropy, and the released values at the spec's reference states next to
the exact chain values. The in-memory statistics are tabular here (the pipeline holds the same
statistics densely; the arithmetic is the same). Skips Spark and the ledger, nothing else.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from gpope.core.accounting import calibrate_sigma
from gpope.core.envs import chain as chain_env
from gpope.core.envs.cohort import public_transitions
from gpope.core.evaluation.settings import RunSettings, SettingsLayer, resolve_settings
from gpope.core.gpope.solver import GPOPEConfig, run_gpope
from gpope.core.trajectories.batch import statistics_of_transitions
from gpope.shell.pipeline.jobargs import load_spec


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patients", type=int, default=100_000)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--epsilons", default="1,0.1")
    args = p.parse_args()
    spec = load_spec("conf/specs/chain.yaml")
    exact = chain_env.exact_values()
    truth = np.array([exact[int(s[0])] for _, s in spec.reference_states])
    rows = []
    for t in range(args.trials):
        tr = public_transitions("chain", args.patients, np.random.default_rng(None))
        stats = statistics_of_transitions(tr, spec, representation="auto")
        m = stats.m
        for eps in (float(e) for e in args.epsilons.split(",")):
            opts, info = resolve_settings(RunSettings(), spec,
                                          SettingsLayer.of(epsilon=eps, delta=1e-6), m=m)
            sigma = float(calibrate_sigma(m=m, iterations=opts.iterations, epsilon=eps,
                                          delta=1e-6, accountant=opts.accountant,
                                          sampling=opts.sampling, batch_rate=opts.batch_rate))
            cfg = GPOPEConfig(iterations=opts.iterations, step_size=opts.step_size,
                              clip=opts.clip, noise_multiplier=sigma, sampling=opts.sampling,
                              batch_rate=opts.batch_rate, step_schedule=opts.step_schedule,
                              step_offset=opts.step_offset, averaging=opts.averaging,
                              tail_fraction=opts.tail_fraction)
            t0 = time.perf_counter()
            res = run_gpope(stats, cfg, None)
            values = spec.reference_values(res.theta_avg)
            err = np.abs(values - truth)
            row = {"trial": t, "m": m, "epsilon": eps, "values": values.round(4).tolist(),
                   "exact": truth.round(4).tolist(), "max_abs_error": float(err.max()),
                   "clip": opts.clip, "step_size": opts.step_size, "sigma": sigma,
                   "passes": opts.passes, "seconds": time.perf_counter() - t0,
                   "tuned_point": info["tuned_point"]}
            rows.append(row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

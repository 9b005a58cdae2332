"""The utility frontier of GPOPE at the issue-10 operating point, tuned on public data only.

Run (one domain per process; results are appended cell by cell, so a bounded run keeps what it
finished)::

    .venv/bin/python benchmarks/frontier.py chain --sizes 10000,100000 --trials 20
    .venv/bin/python benchmarks/frontier.py mountaincar-on --sizes 3000,10000,30000 --trials 20
    .venv/bin/python benchmarks/frontier.py mountaincar-off --sizes 3000,10000,30000 --trials 20
    .venv/bin/python benchmarks/frontier.py hiv --sizes 300,1000,3000 --trials 20

What one run does (pure numpy core, no Spark; the same code as ``gpope tune --spec`` and
``gpope evaluate``):

1. **public tuning**: a public cohort of ``--public-size`` trajectories (seed ``--seed`` + 1, never
   used for evaluation) and :func:`gpope.core.tuning.tune_operating_point` at epsilon in
   {0.1, 1, 10}: (clip, step size) per epsilon on grids set by that cohort's gradient scale and
   conditioning, at the fixed operating point (Poisson, ``--passes`` passes, ``--iterations``
   steps, q = passes / iterations, eta / (i + 0.1 N), tail averaging of the last half, PLD);
2. **trials**: per m and trial, a FRESH data set (its own seed) and, per epsilon, fresh noise and
   sample plan; the tuned point is chosen by the rule of :mod:`gpope.core.operating` (nearest
   m_pub epsilon_k to m epsilon);
3. **metrics**: relative MSPBE against the domain's ground truth (chain: exact; others: population
   statistics of a large independent sample), RMS value error (chain: exact values), wall time of
   the solver, trajectories touched (= passes * m).

Output: ``docs/results/frontier_<domain>.json`` (every trial, the tuning table, the settings).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from gpope.core.experiments.common import seed_seq
from gpope.core.gpope import GPOPEConfig, run_gpope_trials
from gpope.core.operating import EvaluationBlock, resolve_budget, resolve_step_offset
from gpope.core.tuning import tune_operating_point

EPSILONS = (0.1, 1.0, 10.0)
OUT = Path(__file__).resolve().parents[1] / "docs" / "results"


def _problem_factory(domain: str, delta: float):
    """(make(m, rng) -> problem with stats/rel_mspbe/value_error, normalization)."""
    if domain == "chain":
        from gpope.core.experiments.chain import ChainProblem, ChainSettings

        s = ChainSettings(length_scale=200.0, delta=delta)
        return (lambda m, rng: ChainProblem.simulate(m, rng, s)), "transition"
    from gpope.core.experiments.continuous import HIVSettings, MountainCarSettings, _Domain

    if domain.startswith("mountaincar"):
        figure = domain.split("-")[1]
        d = _Domain("mountaincar", figure, MountainCarSettings(delta=delta))
    else:
        d = _Domain("hiv", "off", HIVSettings(delta=delta))
    return (lambda m, rng: d.problem(m, rng, 0)), "transition"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("domain", choices=("chain", "mountaincar-on", "mountaincar-off", "hiv"))
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--public-size", type=int, default=None,
                   help="public tuning cohort (default: the smallest size)")
    p.add_argument("--passes", type=float, default=20.0)
    p.add_argument("--iterations", type=int, default=20000)
    p.add_argument("--tune-trials", type=int, default=2)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    p.add_argument("--tuned-points", default=None,
                   help="JSON list of {epsilon, clip, step_size} from an earlier public tuning of "
                        "this command (same seed and public size): skips step 1")
    args = p.parse_args()

    sizes = [int(float(x)) for x in args.sizes.split(",")]
    make, norm = _problem_factory(args.domain, args.delta)
    fixed = {"sampling": "poisson", "accountant": "auto", "passes": args.passes,
             "iterations": args.iterations, "step_schedule": "inverse",
             "step_offset_fraction": 0.1, "averaging": "tail", "tail_fraction": 0.5}
    out = Path(args.out) if args.out else OUT / f"frontier_{args.domain}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    m_pub = args.public_size or min(sizes)
    if args.tuned_points:
        from gpope.core.operating import TunedPoint
        from gpope.core.tuning import TuningResult

        pts = tuple(TunedPoint(**{k: v for k, v in d.items()})
                    for d in json.loads(args.tuned_points))
        tuned = TuningResult(pts, [], float("nan"), float("nan"))
    else:
        public = make(m_pub, np.random.default_rng(seed_seq(args.seed + 1, 3, m_pub)))
        pub_stats = public.stats(norm)
        population = pub_stats.population()
        if hasattr(public, "truth"):  # continuous domains: score against the public truth sample
            population = public.truth
        tuned = tune_operating_point(
            pub_stats, population, settings=fixed, epsilons=EPSILONS, delta=args.delta,
            trials=args.tune_trials, rng=np.random.default_rng(seed_seq(args.seed + 1, 4)),
            log=lambda msg: print(msg, flush=True))
    block = EvaluationBlock(**fixed, tuned=tuned.points, tuning={"patients": m_pub})
    record = {"domain": args.domain, "settings": fixed, "public_size": m_pub,
              "tuned": [pt.to_dict() for pt in tuned.points], "gradient_scale": tuned.gradient_scale,
              "eta0": tuned.eta0, "tuning_grid": tuned.rows,
              "tuning_seconds": time.perf_counter() - t0, "trials": [], "command": vars(args)}
    print(f"tuned in {record['tuning_seconds']:.0f} s: {record['tuned']}", flush=True)
    from gpope.core.accounting import calibrate_sigma

    for m in sizes:
        for t in range(args.trials):
            problem = make(m, np.random.default_rng(seed_seq(args.seed, 1, m, t)))
            stats = problem.stats(norm)
            for k, eps in enumerate(EPSILONS):
                sel, point = block.select(m, eps)
                N, q = resolve_budget(m=m, sampling="poisson", passes=sel["passes"],
                                      iterations=sel["iterations"], batch_rate=None,
                                      batch_size=None)
                sigma = float(calibrate_sigma(m=m, iterations=N, epsilon=eps, delta=args.delta,
                                              accountant="auto", sampling="poisson",
                                              batch_rate=q))
                cfg = GPOPEConfig(
                    iterations=N, step_size=point.step_size, clip=point.clip,
                    noise_multiplier=sigma, sampling="poisson", batch_rate=q,
                    step_schedule="inverse",
                    step_offset=resolve_step_offset(iterations=N, step_offset=None,
                                                    step_offset_fraction=0.1),
                    averaging="tail", tail_fraction=0.5)
                s0 = time.perf_counter()
                with np.errstate(all="ignore"):
                    res = run_gpope_trials(stats, cfg, np.random.default_rng(
                        seed_seq(args.seed, 2, m, t, k)), 1)
                secs = time.perf_counter() - s0
                theta = res.theta_avg
                ok = bool(np.isfinite(theta).all())
                rel = float(problem.rel_mspbe(theta)[0]) if ok else math.inf
                ve = float(problem.value_error(theta)[0]) if ok else math.inf
                record["trials"].append({"m": m, "trial": t, "epsilon": eps, "rel_mspbe": rel,
                                         "value_error": ve, "seconds": secs, "sigma": sigma,
                                         "clip": point.clip, "step_size": point.step_size,
                                         "touched": N * q * m, "steps": N})
            out.write_text(json.dumps(record, indent=1, default=float))
            print(f"m={m} trial {t} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    record["total_seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(record, indent=1, default=float))


if __name__ == "__main__":
    main()

"""Finite and covering V intervals on generated MDPs with terminal states (core, no Spark).

Identification is judged per released value (:mod:`gpope.core.untuned.weak`): a weakly visited
state leaves the other states' intervals finite. For each of ``--datasets`` generated data sets
(``random_mdp/<seed>``: tabular, 1-3 terminal states that are features never visited as a current
state, m episodes under the behaviour policy, the own-data spec without an ``evaluation:`` block,
so the documented default with no solver settings) the script runs the default's in-memory
release ``--reps`` times (fresh noise) per epsilon and prints the fraction of finite V intervals,
the fraction the whole-A identification test alone would have left finite, the coverage of the
exact values (Bellman solve) by every interval and by the finite ones, and the median half-width.

    nice -n 10 .venv/bin/python benchmarks/terminal_identification_core.py --datasets 25 --reps 4 \
        --out docs/results/terminal_identification_core.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def ward_dataset(ward_seed: int, exit_scale: float):
    """A ``dataset(name, m, seed)`` of fresh cohorts of one signed ward (12 acuity cells, discharge
    +1 / death -1 as terminal states that are features, every cell a reference state)."""
    from signed_ward_core import S, cohort, spec_of, values, ward

    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    P, mu, pi, start = ward(ward_seed, exit_scale)
    spec = spec_of(pi, mu, list(range(S)))
    truth = values(P, pi)

    def dataset(name: str, m: int, seed: int):
        tr, _ = cohort(P, mu, start, m, np.random.default_rng([ward_seed, seed]))
        rows = statistics_of_transitions(tr, spec).to_rows()
        return spec, truth, statistics_vectors(rows["A"], rows["b"], rows["C"])

    return dataset


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=int, default=25, help="generated MDPs random_mdp/0..")
    p.add_argument("--reps", type=int, default=4, help="releases per data set (fresh noise)")
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--domain", choices=("random_mdp", "ward"), default="random_mdp",
                   help="random_mdp/<seed> (one MDP per data set) or the signed ward of "
                        "benchmarks/signed_ward_core.py (--ward-seed; a fresh cohort per data set)")
    p.add_argument("--ward-seed", type=int, default=0)
    p.add_argument("--exit-scale", type=float, default=1.0, help="the ward's, see its ward()")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from own_data_core import dataset

    if a.domain == "ward":
        dataset = ward_dataset(a.ward_seed, a.exit_scale)

    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.untuned.release import UntunedSettings, plan_untuned, release_untuned_rows

    settings, run = UntunedSettings(), RunSettings()
    eps_list = [float(x) for x in a.epsilons.split(",")]
    rec: dict[float, dict[str, list]] = {e: {"finite": [], "whole": [], "cov": [], "half": []}
                                         for e in eps_list}
    t0 = time.time()
    for seed in range(a.datasets):
        spec, truth, vec = dataset(f"{a.domain}/{seed}", a.m, seed)
        for eps in eps_list:
            sig = plan_untuned(m=a.m, epsilon=eps, delta=a.delta, settings=settings,
                               share=1.0 - run.policy_value_share)
            for r in range(a.reps):
                rel = release_untuned_rows(
                    vec, spec, sigmas=sig, moments_share=run.moments_share, settings=settings,
                    rng=np.random.default_rng([seed, r, int(eps * 1000)]))
                iv = rel.interval
                finite = np.isfinite(iv.lower) & np.isfinite(iv.upper)
                out = rec[eps]
                out["finite"].extend(finite.tolist())
                out["whole"].extend((finite & (not iv.unidentified)).tolist())
                out["cov"].extend(((iv.lower <= truth) & (truth <= iv.upper)).tolist())
                out["half"].extend(((iv.upper - iv.lower) / 2.0).tolist())
        print(f"data set {seed}: {time.time() - t0:.0f} s", flush=True)
    summary = []
    print(f"\n{a.domain}: {a.datasets} data sets x {a.reps} releases, m={a.m}")
    print(f"{'eps':>5} {'intervals':>9} {'finite':>7} {'whole-A':>7} {'coverage':>8} "
          f"{'cov finite':>10} {'half-width':>10}")
    for eps in eps_list:
        o = {k: np.array(v, dtype=float) for k, v in rec[eps].items()}
        fin = o["finite"] > 0
        row = {"epsilon": eps, "intervals": len(fin), "finite": float(fin.mean()),
               "finite_whole_a_test": float(o["whole"].mean()),
               "coverage": float(o["cov"].mean()),
               "coverage_finite": float(o["cov"][fin].mean()) if fin.any() else float("nan"),
               "median_half_width": float(np.median(o["half"][fin])) if fin.any()
               else float("inf")}
        summary.append(row)
        print(f"{eps:>5g} {row['intervals']:>9} {row['finite']:>7.3f} "
              f"{row['finite_whole_a_test']:>7.3f} {row['coverage']:>8.3f} "
              f"{row['coverage_finite']:>10.3f} {row['median_half_width']:>10.4f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

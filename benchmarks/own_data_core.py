"""Candidates for the tuning-free default, measured in the core on generated MDPs (no Spark).

For each fresh generated data set (``random_mdp/<seed>`` and ``random_mdp_linear/<seed>``, m
episodes under the behaviour policy, its own-data spec without an ``evaluation:`` block) and each
candidate (the clip quantile and its budget share of :mod:`gpope.core.untuned.release`), the script runs
the default's in-memory release and prints, per epsilon: the median over data sets of the max abs
error at the reference states (values in [0, 1]), the non-private LSTD error on the same
statistics, the interval coverage (all reference states covered) and the fraction of finite
intervals. ``benchmarks/own_data.py`` runs the chosen default through the product's own path.

    .venv/bin/python benchmarks/own_data_core.py --datasets 10 --m 20000 \
        --quantiles 0.5,0.9 --refine 0.3,0.5,0.7 --out docs/results/own_data_core.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def dataset(name: str, m: int, seed: int):
    """(spec, truth (k,), statistics rows (m, 2n^2+n)) of a generated data set."""
    from gpope.core.envs.registry import get_domain, random_mdp_of
    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping(name.replace("/", "_")))
    tr = get_domain(name).generate(m, np.random.default_rng(seed), None, mdp.config.max_steps)
    rows = statistics_of_transitions(tr, spec).to_rows()
    truth = np.array([mdp.reference_values()[k] for k, _ in spec.reference_states])
    return spec, truth, statistics_vectors(rows["A"], rows["b"], rows["C"])


def lstd_error(spec, truth, vec) -> float:
    from gpope.core.ssp import split_vector, vector_features

    n = vector_features(vec.shape[1])
    A, b, _ = split_vector(vec.sum(axis=0, keepdims=True), n)
    theta = np.linalg.lstsq(A[0], b[0], rcond=None)[0]
    return float(np.max(np.abs(spec.reference_values(theta) - truth)))


def in_range(spec, iv) -> bool:
    """Whether the values and every finite interval end lie in the spec's public value range."""
    from gpope.core.untuned.release import value_range

    lo, hi = value_range(spec)
    ends = np.concatenate([iv.value, iv.lower[np.isfinite(iv.lower)],
                           iv.upper[np.isfinite(iv.upper)]])
    return bool(np.all((ends >= lo) & (ends <= hi)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=int, default=10, help="data sets per feature kind")
    p.add_argument("--first-seed", type=int, default=1000, help="first MDP seed (fresh: >= 1000)")
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--quantiles", default="0.9")
    p.add_argument("--shares", default=None,
                   help="quantile_share values (default: the conf's, UntunedSettings)")
    p.add_argument("--refine", default=None,
                   help="refine_share values (default: the conf's, UntunedSettings)")
    p.add_argument("--residual-quantile", type=float, default=0.99)
    p.add_argument("--estimator-share", type=float, default=None,
                   help="share of the run's Gaussian privacy loss the estimator gets (default: "
                        "what a pipeline run leaves it, 1 - policy_value_share)")
    p.add_argument("--kinds", default="random_mdp,random_mdp_linear")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.untuned.release import UntunedSettings, plan_untuned, release_untuned_rows

    est_share = (1.0 - RunSettings().policy_value_share if a.estimator_share is None
                 else a.estimator_share)
    shipped = UntunedSettings()
    a.shares = a.shares or str(shipped.quantile_share)
    a.refine = a.refine or str(shipped.refine_share)
    eps_list = [float(x) for x in a.epsilons.split(",")]
    cands = [(float(q), float(s), float(r)) for q in a.quantiles.split(",")
             for s in a.shares.split(",") for r in a.refine.split(",")]
    records = []
    t0 = time.time()
    for kind in a.kinds.split(","):
        for i in range(a.datasets):
            name = f"{kind}/{a.first_seed + i}"
            spec, truth, vec = dataset(name, a.m, seed=a.first_seed + i)
            base = {"dataset": name, "lstd_error": lstd_error(spec, truth, vec)}
            for q, share, refine in cands:
                settings = UntunedSettings(clip_quantile=q, quantile_share=share,
                                           refine_share=refine,
                                           residual_quantile=a.residual_quantile)
                for eps in eps_list:
                    sig = plan_untuned(m=a.m, epsilon=eps, delta=a.delta, settings=settings,
                                       share=est_share)
                    ss = np.random.SeedSequence([a.first_seed + i, int(eps * 1000), int(q * 1000)])
                    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1,
                                               settings=settings, rng=np.random.default_rng(ss))
                    iv = rel.interval
                    finite = bool(np.all(np.isfinite(iv.lower) & np.isfinite(iv.upper)))
                    records.append({**base, "quantile": q, "share": share, "refine": refine,
                                    "epsilon": eps,
                                    "error": float(np.max(np.abs(iv.value - truth))),
                                    "covered": bool(np.all((iv.lower <= truth) & (truth <= iv.upper))),
                                    "finite": finite, "clip": rel.clip,
                                    "width": float(np.max(iv.upper - iv.lower)),
                                    # the delta method alone (no second-order width)
                                    "covered_first_order": bool(not finite or np.all(
                                        np.abs(iv.value - truth) <= 1.96 * iv.se)),
                                    "in_range": in_range(spec, iv)})
            print(f"{name}: lstd {base['lstd_error']:.4f} ({time.time() - t0:.0f} s)", flush=True)
    print(f"\nmedian max abs error over {len({r['dataset'] for r in records})} data sets, m={a.m}")
    print(f"{'quantile':>8} {'share':>6} {'refine':>6} {'eps':>5} {'error':>8} {'lstd':>8} "
          f"{'coverage':>9} {'finite':>7} {'width':>7} {'in range':>8}")
    summary = []
    for q, share, refine in cands:
        for eps in eps_list:
            rs = [r for r in records
                  if (r["quantile"], r["share"], r["refine"], r["epsilon"]) == (q, share, refine, eps)]
            row = {"quantile": q, "share": share, "refine": refine, "epsilon": eps,
                   "median_error": float(np.median([r["error"] for r in rs])),
                   "median_lstd_error": float(np.median([r["lstd_error"] for r in rs])),
                   "coverage": float(np.mean([r["covered"] for r in rs])),
                   "finite": float(np.mean([r["finite"] for r in rs])),
                   "coverage_first_order": float(np.mean([r["covered_first_order"] for r in rs])),
                   "median_finite_width": float(np.median([r["width"] for r in rs if r["finite"]]
                                                          or [np.nan])),
                   "in_range": float(np.mean([r["in_range"] for r in rs]))}
            summary.append(row)
            print(f"{q:>8} {share:>6} {refine:>6} {eps:>5g} {row['median_error']:>8.4f} "
                  f"{row['median_lstd_error']:>8.4f} {row['coverage']:>9.2f} {row['finite']:>7.2f} "
                  f"{row['median_finite_width']:>7.3f} {row['in_range']:>8.2f}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "summary": summary, "records": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

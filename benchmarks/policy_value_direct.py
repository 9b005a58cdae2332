"""Can it tell which policy is better? J(target) by the direct method beside the importance
sampling identified set, J(behaviour) and their contrast, on generated MDPs (core level, no Spark).

Per fresh data set (``random_mdp/<seed>``: tabular features, rewards in [0, r_max];
``random_mdp_linear/<seed>``: linear features, signed rewards in [-r_max, r_max]), m episodes
under the behaviour policy and epsilon, one run's budget is split as ``gpope evaluate`` splits a
tuning-free run (one Gaussian mechanism, shares of its privacy loss): the default's releases
(:func:`gpope.core.untuned.release_untuned_rows`) take 1 - policy_value_share, the policy value
release the rest, of which ``first_state_share`` (conf ``evaluation.policy_value``) goes to the first states' feature moments
(:func:`gpope.core.policy_value_direct.release_first_state`).

Released rows and the public rule that picks them (level 0.95, alpha = 0.05):

* J(target): the direct method mu^ . theta^ (:func:`~gpope.core.policy_value_direct.direct_interval`,
  estimand E_{s_0}[V(s_0)] at the fit's fixed point) held at level 1 - 0.8 alpha, where its
  interval is finite; else the importance sampling identified set at 1 - 0.2 alpha (estimand:
  the recorded-horizon value). Whatever the data, the picked interval misses with probability at
  most alpha (union bound over the two).
* J(behaviour): the mean recorded return (:mod:`gpope.core.policy_value_release`).
* contrast: the direct J(target) at 1 - 0.4 alpha minus J(behaviour) at 1 - 0.4 alpha (jointly
  1 - 0.8 alpha) where finite, else the identified set's contrast at 1 - 0.2 alpha.

Truths: E_{s_0}[V^pi(s_0)] (exact Bellman solve) for the direct J(target), the recorded-horizon
values (forward recursion over the cap) for the identified set and J(behaviour); the contrast's
truth is the difference of the picked rows' estimands.

"Smallest contrast signed in 80% of runs": under a location model (the interval's lower end
moves with the truth), a true contrast c is signed (lower end > 0) when c > truth - lower, so the
smallest c signed in 80 % of runs is the 0.8 quantile of truth - lower over the runs.

    nice -n 10 .venv/bin/python benchmarks/policy_value_direct.py --kinds random_mdp,random_mdp_linear \
        --datasets 10 --runs 10 --sizes 2000,20000 --epsilons 1,10 --json docs/results/policy_value_direct.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DELTA = 1e-5
LEVEL = 0.95
ALPHA = 1.0 - LEVEL


def dataset(name: str, m: int, seed: int):
    """(spec, mdp, transitions, statistics rows) of one generated data set."""
    from gpope.core.envs.registry import get_domain, random_mdp_of
    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import statistics_vectors
    from gpope.shell.pipeline.stats import statistics_of_transitions

    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping(name.replace("/", "_")))
    tr = get_domain(name).generate(m, np.random.default_rng(seed), None, mdp.config.max_steps)
    rows = statistics_of_transitions(tr, spec).to_rows()
    return spec, mdp, tr, statistics_vectors(rows["A"], rows["b"], rows["C"])


def truths(mdp) -> dict[str, float]:
    from benchmarks.policy_value_coverage import finite_horizon_value

    return {"direct": float(mdp.start @ mdp.values()),
            "recorded": finite_horizon_value(mdp, mdp.target),
            "behaviour": finite_horizon_value(mdp, mdp.behaviour)}


def one_run(spec, tr, vec, *, eps: float, rng: np.random.Generator) -> dict:
    from gpope.config import load_config
    from gpope.core.features import TabularFeatures
    from gpope.core.policies import importance_ratios
    from gpope.core.policy_value import policy_value_terms, spec_bounds
    from gpope.core.policy_value_direct import (
        direct_interval,
        first_state_features,
        functional_level,
        release_first_state,
        split_first_state,
    )
    from gpope.core.policy_value_release import release_policy_value
    from gpope.core.ssp import ssp_sigma
    from gpope.core.untuned import (
        UntunedSettings,
        feature_norm_bound,
        release_untuned_rows,
        split_untuned,
        value_range,
    )

    conf = load_config(None).evaluation
    pv = conf.policy_value_settings()
    m = tr.n_trajectories
    sigma = float(ssp_sigma(m=m, epsilon=eps, delta=DELTA))
    s_is, s_fs = split_first_state(sigma / math.sqrt(pv.share), pv.first_state_share)
    first = release_first_state(first_state_features(tr, spec.feature_map),
                                norm_bound=feature_norm_bound(spec.feature_map), sigma=s_fs, rng=rng)
    levels = np.array([functional_level(1.0 - 0.8 * ALPHA, pv.first_state_alpha),
                       functional_level(1.0 - 0.4 * ALPHA, pv.first_state_alpha)])
    rel = release_untuned_rows(vec, spec, sigmas=split_untuned(sigma / math.sqrt(1.0 - pv.share),
                                                               UntunedSettings()),
                               moments_share=0.1, settings=UntunedSettings(), rng=rng,
                               level=LEVEL, functionals=(np.stack([first.mean] * 2), levels))
    bounds = spec_bounds(spec)
    terms = policy_value_terms(tr, importance_ratios(spec.target_policy, tr), bounds)
    pvr = release_policy_value(terms, bounds, sigma=s_is, settings=pv, rng=rng)
    fiv = rel.functionals
    vr = value_range(spec)
    tabular = isinstance(spec.feature_map, TabularFeatures)
    common = {"first_state_alpha": pv.first_state_alpha, "value_range": vr,
              "supported": rel.supported,
              "unsupported_bound": max(abs(vr[0]), abs(vr[1])) if tabular else None}
    dm = direct_interval(rel.theta, first, (fiv.lower[0], fiv.upper[0]),
                         level=1.0 - 0.8 * ALPHA, **common)
    dm_c = direct_interval(rel.theta, first, (fiv.lower[1], fiv.upper[1]),
                           level=1.0 - 0.4 * ALPHA, **common)
    is_iv = pvr.intervals(1.0 - 0.2 * ALPHA, pv.method, variance_share=pv.variance_share,
                          noise_share=pv.noise_share, clamp_share=pv.clamp_share)
    b_iv = pvr.intervals_with(LEVEL, pv)["behaviour_value"]
    b_c = pvr.intervals_with(1.0 - 0.4 * ALPHA, pv)["behaviour_value"]
    direct = math.isfinite(dm.lower) and math.isfinite(dm.upper) and np.isfinite(fiv.lower[0])
    t = is_iv["policy_value"]
    c = is_iv["policy_contrast"]
    return {
        "direct": bool(direct),
        "target": ((dm.value, dm.lower, dm.upper) if direct else (t.value, t.lower, t.upper)),
        "target_is": (t.value, t.lower, t.upper),
        "behaviour": (b_iv.value, b_iv.lower, b_iv.upper),
        "contrast": ((dm_c.value - b_c.value, dm_c.lower - b_c.upper, dm_c.upper - b_c.lower)
                     if direct else (c.value, c.lower, c.upper)),
    }


def summarise(rows: list[dict]) -> dict:
    out: dict[str, float] = {"runs": len(rows),
                             "direct_share": float(np.mean([r["direct"] for r in rows]))}
    for q in ("target", "target_is", "behaviour", "contrast"):
        cov = [lo <= r["truth"][q] <= hi for r in rows for (_, lo, hi) in [r[q]]]
        half = [(hi - lo) / 2.0 for r in rows for (_, lo, hi) in [r[q]]]
        out[f"{q}_coverage"] = float(np.mean(cov))
        out[f"{q}_half_width"] = float(np.median(half))
    out["contrast_signed_80"] = float(np.quantile([r["truth"]["contrast"] - r["contrast"][1]
                                                   for r in rows], 0.8))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default="random_mdp,random_mdp_linear")
    p.add_argument("--datasets", type=int, default=10)
    p.add_argument("--runs", type=int, default=10, help="releases per data set and epsilon")
    p.add_argument("--first-seed", type=int, default=3000)
    p.add_argument("--sizes", default="2000,20000")
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    cells = []
    for kind in a.kinds.split(","):
        for m in (int(x) for x in a.sizes.split(",")):
            by_eps: dict[float, list[dict]] = {float(e): [] for e in a.epsilons.split(",")}
            t0 = time.time()
            for i in range(a.datasets):
                seed = a.first_seed + i
                spec, mdp, tr, vec = dataset(f"{kind}/{seed}", m, seed)
                tv = truths(mdp)
                for eps, rows in by_eps.items():
                    for r in range(a.runs):
                        rng = np.random.default_rng([seed, int(eps * 1000), r])
                        out = one_run(spec, tr, vec, eps=eps, rng=rng)
                        tgt = tv["direct"] if out["direct"] else tv["recorded"]
                        out["truth"] = {"target": tgt, "target_is": tv["recorded"],
                                        "behaviour": tv["behaviour"],
                                        "contrast": tgt - tv["behaviour"]}
                        rows.append(out)
            for eps, rows in by_eps.items():
                cell = {"kind": kind, "m": m, "epsilon": eps, **summarise(rows),
                        "seconds": round(time.time() - t0, 1)}
                cells.append(cell)
                print(json.dumps(cell), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"argv": sys.argv[1:], "cells": cells}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

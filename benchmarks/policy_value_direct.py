"""Can it tell which policy is better? J(target) by the direct method beside the importance
sampling identified set, J(behaviour) and their contrast, on generated MDPs (core level, no Spark).

Per fresh data set (``random_mdp/<seed>``: tabular features, rewards in [0, r_max];
``random_mdp_linear/<seed>``: linear features, signed rewards in [-r_max, r_max]), m episodes
under the behaviour policy and epsilon, one run's budget is split as ``gpope evaluate`` splits a
tuning-free run (one Gaussian mechanism, shares of its privacy loss): the default's releases
(:func:`gpope.core.untuned.release.release_untuned_rows`) take 1 - policy_value_share, the policy value
release the rest, of which ``first_state_share`` (conf ``evaluation.policy_value``) goes to the first states' feature moments
(:func:`gpope.core.policy_value_direct.release_first_state`).

Released rows and the public rule that picks them (level 0.95, alpha = 0.05):

the product's public rule, :func:`gpope.core.policy_value_direct.pick_policy_values`: J(target)
by the direct method (estimand E_{s_0}[V(s_0)] at the fit's fixed point) where its interval is
finite, else the importance sampling identified set (the recorded-horizon value); J(behaviour)
the mean recorded return; the contrast the direct J(target) minus J(behaviour), jointly, else the
identified set's.

``ward`` (:func:`ward_dataset`): the sepsis-like ward of ``benchmarks/signed_ward_core.py``
(12 acuity cells, discharge +1, death -1, gamma 0.95, cap 30, ward ``<seed>``: dynamics, a
clinician-mix behaviour and a target half way to a random protocol), the own-data spec an
analyst would write (tabular, no ``evaluation:`` block); the same release as the pipeline's
tuning-free run computes it in memory. ``ward_outcome``: the same ward and spec with the
outcome's public range stated, ``return_bounds: [-1, 1]``.

``heavy_tail`` (:func:`heavy_tail_run`): 5% of patients carry 80% of the value; terms only,
``--datasets x --runs`` releases per cell.

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
import dataclasses
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
WORSE = 1.675  # heavy_tail: how much worse the target is (issue 36's reproducer)


def dataset(name: str, m: int, seed: int):
    """(spec, mdp, transitions, statistics rows) of one generated data set."""
    from gpope.core.envs.registry import get_domain, random_mdp_of
    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping(name.replace("/", "_")))
    tr = get_domain(name).generate(m, np.random.default_rng(seed), None, mdp.config.max_steps)
    rows = statistics_of_transitions(tr, spec).to_rows()
    return spec, mdp, tr, statistics_vectors(rows["A"], rows["b"], rows["C"])


class WardMDP:
    """The sepsis-like ward of ``benchmarks/signed_ward_core.py`` (12 acuity cells, discharge +1,
    death -1, gamma 0.95, cap 30) with the truths :func:`truths` reads."""

    def __init__(self, seed: int):
        from benchmarks.signed_ward_core import ward

        self.P, self.behaviour, self.target, self.start = ward(seed)

    def values(self, pi=None, horizon: int | None = None) -> np.ndarray:
        """(S,) V^pi: the Bellman solve (``horizon`` None) or the value over ``horizon`` steps."""
        from benchmarks.signed_ward_core import GAMMA, S, values

        pi = self.target if pi is None else pi
        if horizon is None:
            return values(self.P, pi)
        r = np.einsum("sa,sa->s", pi, self.P[:, :, S] - self.P[:, :, S + 1])
        P = np.einsum("sa,sat->st", pi, self.P[:, :, :S])
        v = np.zeros(S)
        for _ in range(horizon):
            v = r + GAMMA * P @ v
        return v


def ward_dataset(m: int, seed: int, outcome: bool = False):
    """(spec, mdp, transitions, statistics rows) of ward ``seed`` with m patients; ``outcome``:
    the spec also states ``return_bounds: [-1, 1]`` (one discounted discharge +1 or death -1)."""
    from benchmarks.signed_ward_core import cohort, spec_of
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    mdp = WardMDP(seed)
    tr, _ = cohort(mdp.P, mdp.behaviour, mdp.start, m, np.random.default_rng([seed, m]))
    spec = spec_of(mdp.target, mdp.behaviour, [0])
    if outcome:
        spec = dataclasses.replace(spec, return_bounds=(-1.0, 1.0))
    rows = statistics_of_transitions(tr, spec).to_rows()
    return spec, mdp, tr, statistics_vectors(rows["A"], rows["b"], rows["C"])


def truths(mdp) -> dict[str, float]:
    if isinstance(mdp, WardMDP):
        from benchmarks.signed_ward_core import CAP

        return {"direct": float(mdp.start @ mdp.values()),
                "recorded": float(mdp.start @ mdp.values(horizon=CAP)),
                "behaviour": float(mdp.start @ mdp.values(mdp.behaviour, horizon=CAP))}
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
        ESTIMANDS,
        direct_levels,
        first_state_features,
        one_hot_map,
        pick_policy_values,
        release_first_state,
        split_first_state,
    )
    from gpope.core.policy_value_release import release_policy_value
    from gpope.core.ssp import ssp_sigma
    from gpope.core.untuned.release import (
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
                                norm_bound=feature_norm_bound(spec.feature_map), sigma=s_fs, rng=rng,
                                one_hot=one_hot_map(spec.feature_map))
    levels = direct_levels(LEVEL, pv.first_state_alpha)
    rel = release_untuned_rows(vec, spec, sigmas=split_untuned(sigma / math.sqrt(1.0 - pv.share),
                                                               UntunedSettings()),
                               moments_share=0.1, settings=UntunedSettings(), rng=rng,
                               level=LEVEL, functionals=(np.stack([first.mean] * 2), levels))
    bounds = spec_bounds(spec)
    terms = policy_value_terms(tr, importance_ratios(spec.target_policy, tr), bounds)
    pvr = release_policy_value(terms, bounds, sigma=s_is, settings=pv, rng=rng)
    vr = value_range(spec)
    tabular = isinstance(spec.feature_map, TabularFeatures)
    fiv = rel.functionals
    picked = pick_policy_values(
        pvr, pv, level=LEVEL, theta=rel.theta, first=first,
        functional_ends=np.stack([fiv.lower, fiv.upper], axis=1), supported=rel.supported,
        functional_se=fiv.se,
        unsupported_bound=max(abs(vr[0]), abs(vr[1])) if tabular else None)
    t_is = pvr.intervals_with(LEVEL, pv)["policy_value"]
    ends = {q: (picked[k].value, picked[k].lower, picked[k].upper) for q, k in
            (("target", "policy_value"), ("behaviour", "behaviour_value"),
             ("contrast", "policy_contrast"))}
    return {"direct": picked["policy_value"].estimand == ESTIMANDS["direct"],
            "direct_contrast": picked["policy_contrast"].estimand == ESTIMANDS["direct_contrast"],
            "target_is": (t_is.value, t_is.lower, t_is.upper), **ends}


def heavy_tail_run(m: int, eps: float, rng: np.random.Generator, union: bool = True) -> dict:
    """The heavy-tail cell: returns g ~ U(0, 1) for 95% of patients and U(20, 60) for 5% (80% of
    the value), rewards in [0, 1] over 60 undiscounted decisions (public range [0, 60]); the
    target's terms are the behaviour's with the heavy patients' returns scaled by 1 - 1.675 / 2
    (every ratio 1, so its identified set is a point): contrast truth -1.675, issue 36's
    reproducer. Released as ``gpope evaluate``
    releases the policy value (its conf settings, the one-shot run's multiplier at
    policy_value_share). ``union=False`` (kind ``heavy_tail_no_union``): the same release with
    its sampling bound NOT held over the clip grid (the width that union costs; not valid)."""
    import dataclasses

    from gpope.config import load_config
    from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
    from gpope.core.policy_value_release import release_policy_value
    from gpope.core.ssp import ssp_sigma

    pv = load_config(None).evaluation.policy_value_settings()
    bounds = PolicyValueBounds(gamma=1.0, horizon=60, weight_clip=10.0, reward_bounds=(0.0, 1.0))
    heavy = rng.random(m) < 0.05
    g = np.where(heavy, rng.uniform(20.0, 60.0, m), rng.uniform(0.0, 1.0, m))
    terms = PolicyValueTerms(g=g, a=np.where(heavy, (1.0 - WORSE / 2.0) * g, g),
                             n=np.full(m, 60.0))
    sigma = float(ssp_sigma(m=m, epsilon=eps, delta=DELTA)) / math.sqrt(pv.share)
    rel = release_policy_value(terms, bounds, sigma=sigma, settings=pv, rng=rng)
    if not union:
        rel = dataclasses.replace(rel, choices=(1, 1, 1))
    iv = rel.intervals_with(LEVEL, pv)
    b_true = 0.95 * 0.5 + 0.05 * 40.0
    out = {q: (iv[k].value, iv[k].lower, iv[k].upper) for q, k in
           (("target", "policy_value"), ("target_is", "policy_value"),
            ("behaviour", "behaviour_value"), ("contrast", "policy_contrast"))}
    return {"direct": False, **out, "truth": {"target": b_true - WORSE, "target_is": b_true - WORSE,
                                              "behaviour": b_true, "contrast": -WORSE}}


def summarise(rows: list[dict]) -> dict:
    out: dict[str, float] = {"runs": len(rows),
                             "direct_share": float(np.mean([r["direct"] for r in rows]))}
    for q in ("target", "target_is", "behaviour", "contrast"):
        cov = [lo <= r["truth"][q] <= hi for r in rows for (_, lo, hi) in [r[q]]]
        half = [(hi - lo) / 2.0 for r in rows for (_, lo, hi) in [r[q]]]
        out[f"{q}_coverage"] = float(np.mean(cov))
        out[f"{q}_half_width"] = float(np.median(half))
    # a positive contrast c is signed when c > truth - lower; a negative one when -c > upper - truth
    out["contrast_signed_80"] = float(np.quantile([r["truth"]["contrast"] - r["contrast"][1]
                                                   for r in rows], 0.8))
    out["contrast_negative_signed_80"] = float(np.quantile(
        [r["contrast"][2] - r["truth"]["contrast"] for r in rows], 0.8))
    out["contrast_wrong_side"] = float(np.mean(
        [(r["contrast"][1] > 0) if r["truth"]["contrast"] <= 0 else (r["contrast"][2] < 0)
         for r in rows]))
    return out


def markdown(paths: list[str]) -> str:
    """The RESULTS table of the cells in the JSON files ``paths``."""
    head = ("| domain | m | eps | runs | direct picked | coverage J(target) / J(behaviour) / "
            "contrast | half-width J(target) direct-or-fallback (identified set) | half-width "
            "J(behaviour) | half-width contrast | smallest contrast signed in 80% | wrong side |"
            "\n|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for path in paths:
        for c in json.loads(Path(path).read_text())["cells"]:
            signed = c["contrast_signed_80"]
            lines.append(
                f"| {c['kind']} | {c['m']:,} | {c['epsilon']:g} | {c['runs']} | "
                f"{c['direct_share']:.2f} | {c['target_coverage']:.2f} / "
                f"{c['behaviour_coverage']:.2f} / {c['contrast_coverage']:.2f} | "
                f"{c['target_half_width']:.3g} ({c['target_is_half_width']:.3g}) | "
                f"{c['behaviour_half_width']:.3g} | "
                f"{c['contrast_half_width']:.3g} | {signed:.3g} | {c['contrast_wrong_side']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default="random_mdp,random_mdp_linear",
                   help="random_mdp, random_mdp_linear, ward, ward_outcome, heavy_tail, "
                        "heavy_tail_no_union")
    p.add_argument("--datasets", type=int, default=10)
    p.add_argument("--runs", type=int, default=10, help="releases per data set and epsilon")
    p.add_argument("--first-seed", type=int, default=3000)
    p.add_argument("--sizes", default="2000,20000")
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", nargs="+", default=None,
                   help="print the RESULTS table of these JSON files and exit")
    a = p.parse_args(argv)
    if a.markdown:
        print(markdown(a.markdown))
        return 0
    cells = []
    for kind in a.kinds.split(","):
        if kind in ("heavy_tail", "heavy_tail_no_union"):
            for m in (int(x) for x in a.sizes.split(",")):
                for eps in (float(e) for e in a.epsilons.split(",")):
                    t0 = time.time()
                    rows = [heavy_tail_run(m, eps, np.random.default_rng([m, int(eps * 1000), r]),
                                           union=kind == "heavy_tail")
                            for r in range(a.datasets * a.runs)]
                    cell = {"kind": kind, "m": m, "epsilon": eps, **summarise(rows),
                            "seconds": round(time.time() - t0, 1)}
                    cells.append(cell)
                    print(json.dumps(cell), flush=True)
            continue
        for m in (int(x) for x in a.sizes.split(",")):
            by_eps: dict[float, list[dict]] = {float(e): [] for e in a.epsilons.split(",")}
            t0 = time.time()
            for i in range(a.datasets):
                seed = a.first_seed + i
                spec, mdp, tr, vec = (ward_dataset(m, seed, outcome=kind == "ward_outcome")
                                      if kind in ("ward", "ward_outcome") else
                                      dataset(f"{kind}/{seed}", m, seed))
                tv = truths(mdp)
                for eps, rows in by_eps.items():
                    for r in range(a.runs):
                        rng = np.random.default_rng([seed, int(eps * 1000), r])
                        out = one_run(spec, tr, vec, eps=eps, rng=rng)
                        tgt = tv["direct"] if out["direct"] else tv["recorded"]
                        ctg = tv["direct"] if out["direct_contrast"] else tv["recorded"]
                        out["truth"] = {"target": tgt, "target_is": tv["recorded"],
                                        "behaviour": tv["behaviour"],
                                        "contrast": ctg - tv["behaviour"]}
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

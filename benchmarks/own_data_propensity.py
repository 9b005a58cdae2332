"""Own data without logged propensities, measured in the core (no Spark): three routes side by side.

For each generated data set (``random_mdp/<seed>``, m episodes, its own-data spec) and the ward
trial (``benchmarks/own_data_ward.py``'s model, simulated in memory), at each epsilon:

* ``logged``: the tuning-free default with the logged propensities (today's path);
* ``lstdq``: the state-action fit (:mod:`gpope.core.state_action`), no propensities;
* ``estimated``: the behaviour policy estimated privately from noisy counts
  (:mod:`gpope.core.behaviour_estimate`, charged to the run), then the default with ``pi / mu^``.

Every route gets what a pipeline run leaves the estimator (``1 - policy_value_share`` of the
run's Gaussian privacy loss; ``estimated`` spends part of it on the counts). Printed per route
and epsilon: the median over data sets of the max abs error at the reference states (values in
[0, 1]), the interval coverage (all reference states covered; an unbounded interval covers) and
the fraction of data sets with every interval finite.

    nice -n 10 .venv/bin/python benchmarks/own_data_propensity.py --datasets 12 --m 20000 \\
        --ward --out docs/results/own_data_propensity.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROUTES = ("logged", "lstdq", "estimated")


def _pv_settings():
    from gpope.core.evaluation.settings import RunSettings

    return RunSettings().policy_value


PV_SETTINGS = _pv_settings()


def generated(name: str, m: int, seed: int):
    """(spec, truth (k,), transitions, (J(target), J(behaviour))) of a generated data set:
    J(target) the direct method's estimand ``start . V``, J(behaviour) the behaviour's
    discounted return over the recorded horizon (the cap)."""
    from gpope.core.envs.registry import get_domain, random_mdp_of
    from gpope.core.spec import EvaluationSpec

    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping(name.replace("/", "_")))
    tr = get_domain(name).generate(m, np.random.default_rng(seed), None, mdp.config.max_steps)
    truth = np.array([mdp.reference_values()[k] for k, _ in spec.reference_states])
    S, g = mdp.n_states, mdp.config.gamma
    P_mu = np.einsum("sa,sat->st", mdp.behaviour, mdp.P[:, :, :S])
    r_mu = np.einsum("sa,sa->s", mdp.behaviour, mdp.reward_mean)
    d, j_b = mdp.start.copy(), 0.0
    for t in range(mdp.config.max_steps):
        j_b, d = j_b + g ** t * float(d @ r_mu), d @ P_mu
    return spec, truth, tr, (float(mdp.start @ mdp.values()), j_b)


def ward(m: int, seed: int):
    """(spec, truth, transitions, (J(target), J(behaviour))) of the ward trial's model, episodes
    cut at its cap as ingest cuts them (terminal ends without a successor, transfers and capped
    records bootstrapped); J(target) = E over admissions of V, J(behaviour) the recorded return."""
    import own_data_ward as w

    from gpope.core.spec import EvaluationSpec
    from gpope.core.trajectories.transitions import Transitions

    P, R = w.model()
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(m):
        s = int(rng.choice(w.N_ACUITY, p=w.ADMIT))
        for t in range(w.MAX_ROUNDS):
            a = int(rng.choice(len(w.ACTIONS), p=w.BEHAVIOUR[s]))
            s2 = int(rng.choice(w.N_ACUITY + 2, p=P[s, a]))
            if t < w.MAX_LENGTH:
                rows.append((i, t, s, a, R[s, a, s2], s2 if s2 < w.N_ACUITY else 0,
                             s2 >= w.N_ACUITY, w.BEHAVIOUR[s, a]))
            if s2 >= w.N_ACUITY or rng.random() < w.TRANSFER_P:
                break
            s = s2
    c = list(zip(*rows, strict=True))
    term = np.array(c[6], dtype=bool)
    last = np.r_[np.diff(np.array(c[0])) != 0, True]
    tr = Transitions(traj_index=np.array(c[0]), t=np.array(c[1]),
                     state=np.array(c[2], dtype=float)[:, None], action=np.array(c[3]),
                     reward=np.array(c[4]), next_state=np.array(c[5], dtype=float)[:, None],
                     terminal=term, truncated=last & ~term, behavior_prob=np.array(c[7]),
                     n_trajectories=m)
    spec = EvaluationSpec.from_mapping({
        "name": "ward_escalation", "gamma": w.GAMMA, "normalization": "transition",
        "length_scale": w.MAX_LENGTH, "importance_weight_bound": w.WEIGHT_BOUND,
        "reward_bounds": [0.0, 1.0], "feature_map": {"kind": "tabular", "n_states": w.N_ACUITY},
        "target_policy": {"kind": "tabular", "probs": w.TARGET.tolist()},
        "reference_states": {f"acuity{s}": [s] for s in range(w.N_ACUITY)}})
    v = w.exact_values(w.TARGET, P, R)
    return spec, v, tr, (float(w.ADMIT @ v), w.record_value(w.BEHAVIOUR, P, R))


class SparseRows:
    """A TrajectoryStats' rows held once as a CSR matrix: the chunked aggregate of
    :func:`gpope.core.untuned.release.release_untuned` without rebuilding dense slices."""

    def __init__(self, stats, block: int = 256):
        from scipy import sparse

        from gpope.core.ssp import statistics_vectors

        parts = [sparse.csr_matrix(statistics_vectors(*stats.dense_range(lo, min(lo + block, stats.m))))
                 for lo in range(0, stats.m, block)]
        self.rows, self.m, self.block = sparse.vstack(parts).tocsr(), stats.m, block

    def aggregate(self, kernel, width):
        out = np.zeros(width)
        for lo in range(0, self.m, self.block):
            hi = min(lo + self.block, self.m)
            out += kernel(np.arange(lo, hi), self.rows[lo:hi].toarray())[0]
        return out


def empirical_behaviour(tr, spec):
    """The exact empirical behaviour ``N(s, a) / N(s)`` (a noise-free diagnostic, never released:
    it isolates what the counts' noise costs from what their share of the run costs)."""
    from gpope.core import behaviour_estimate as be

    S, K = spec.n_features, spec.target_policy.n_actions
    n = be.count_rows(tr, spec).sum(axis=0).reshape(S, K)
    tot = n.sum(axis=1, keepdims=True)
    probs = np.where(tot > 0, n / np.where(tot > 0, tot, 1.0), 1.0 / K)
    return be.BehaviourEstimate(probs=probs, clip=1.0, noise_std=0.0)


def release(route, spec, tr, *, eps, delta, est_share, rng, behaviour=None, oracle=False,
            pv_share=0.0, pv_rng=None):
    """(values, lower, upper, J rows or None) of one route's release. ``pv_share`` > 0 (logged
    and estimated routes): also the policy value rows as ``gpope evaluate`` picks them (the
    direct J(target) over the run's value fit, J(behaviour), the contrast;
    :func:`gpope.core.policy_value_direct.pick_policy_values`), their noise from ``pv_rng``."""
    from gpope.core import behaviour_estimate as be
    from gpope.core.ssp import ssp_sigma
    from gpope.core.state_action import state_action_spec, state_action_statistics
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.core.untuned.release import UntunedSettings, plan_untuned, release_untuned

    settings = UntunedSettings()
    m = tr.n_trajectories
    share = est_share
    first, terms = None, None
    if pv_share and route != "lstdq":
        terms, first = policy_inputs(route, spec, tr, m=m, eps=eps, delta=delta,
                                     pv_share=pv_share, rng=pv_rng)
    if route == "estimated":
        bs = behaviour or be.BehaviourSettings()
        total = float(ssp_sigma(m=m, epsilon=eps, delta=delta))
        sq, sc = be.behaviour_sigmas(total, bs)
        rows = be.count_rows(tr, spec)
        idx = np.arange(m)
        est = be.release_behaviour(lambda k, w: k(idx, rows)[0], n_states=spec.n_features,
                                   n_actions=spec.target_policy.n_actions, m=m,
                                   sigma_quantile=sq, sigma_counts=sc, settings=bs, rng=rng)
        if oracle:
            est = empirical_behaviour(tr, spec)
        tr = be.with_estimated_propensities(tr, spec, est)
        share = est_share - bs.share - bs.quantile_share
    sig = plan_untuned(m=m, epsilon=eps, delta=delta, settings=settings, share=share)
    if route == "lstdq":
        spec = state_action_spec(spec)
        stats = state_action_statistics(tr, spec)
    else:
        stats = statistics_of_transitions(tr, spec, representation="auto")
    agg = SparseRows(stats).aggregate
    functionals = None
    if first is not None:
        from gpope.core.policy_value_direct import direct_levels

        functionals = (np.stack([first.mean] * 2),
                       direct_levels(0.95, PV_SETTINGS.first_state_alpha))
    rel = release_untuned(agg, spec, m=m, sigmas=sig, moments_share=0.1, settings=settings,
                          rng=rng, functionals=functionals)
    iv = rel.interval
    js = None if first is None else policy_rows(route, spec, rel, terms, first, m=m, eps=eps,
                                                delta=delta, pv_share=pv_share, rng=pv_rng)
    return iv.value, iv.lower, iv.upper, js


def _pv_sigma(m, eps, delta, pv_share):
    """The policy value component's multiplier: its share of the run's one Gaussian mechanism."""
    import math

    from gpope.core.ssp import ssp_sigma

    return float(ssp_sigma(m=m, epsilon=eps, delta=delta)) / math.sqrt(pv_share)


def policy_inputs(route, spec, tr, *, m, eps, delta, pv_share, rng):
    """(per-patient terms, first-state release) as the stats stage stores and evaluate releases
    them: with the logged ratios, or every ratio 1 without them (the state-action spec)."""
    import dataclasses

    from gpope.core.policy_value import PolicyValueTerms
    from gpope.core.policy_value_direct import (
        one_hot_map,
        release_first_state,
        split_first_state,
    )
    from gpope.core.state_action import state_action_spec
    from gpope.core.trajectories.batch import bounded, policy_terms
    from gpope.core.untuned.release import feature_norm_bound

    tspec = spec if route == "logged" else state_action_spec(spec)
    rho, reward, _ = bounded(tr, tspec)
    x = policy_terms(dataclasses.replace(tr, reward=reward), rho, tspec)
    terms = PolicyValueTerms(g=x[:, 0].copy(), a=x[:, 1].copy(), n=x[:, 2].copy())
    _, s_fs = split_first_state(_pv_sigma(m, eps, delta, pv_share),
                                PV_SETTINGS.first_state_share)
    first = release_first_state(x[:, 3:], norm_bound=feature_norm_bound(spec.feature_map),
                                sigma=s_fs, rng=rng, one_hot=one_hot_map(spec.feature_map))
    return terms, first


def policy_rows(route, spec, rel, terms, first, *, m, eps, delta, pv_share, rng):
    """{name: PolicyValueInterval} as ``gpope evaluate`` releases them."""
    import dataclasses

    from gpope.core.policy_value import spec_bounds
    from gpope.core.policy_value_direct import pick_policy_values, split_first_state
    from gpope.core.policy_value_release import release_policy_value
    from gpope.core.untuned.release import value_range

    settings = dataclasses.replace(PV_SETTINGS, share=pv_share)
    sigma, _ = split_first_state(_pv_sigma(m, eps, delta, pv_share), settings.first_state_share)
    is_rel = release_policy_value(terms, spec_bounds(spec), sigma=sigma, settings=settings,
                                  rng=rng)
    vr = value_range(spec)
    fiv = rel.functionals
    return pick_policy_values(is_rel, settings, level=0.95, theta=rel.theta, first=first,
                              functional_ends=np.stack([fiv.lower, fiv.upper], axis=1),
                              functional_se=fiv.se,
                              supported=rel.supported,
                              unsupported_bound=max(abs(vr[0]), abs(vr[1])),
                              ratios_logged=route == "logged")


def main(argv=None) -> int:
    from gpope.core.evaluation.settings import RunSettings

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=int, default=12)
    p.add_argument("--first-seed", type=int, default=1000)
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--routes", default=",".join(ROUTES))
    p.add_argument("--ward", action="store_true", help="also the ward trial's model")
    p.add_argument("--ward-repeats", type=int, default=3)
    p.add_argument("--repeats", type=int, default=1,
                   help="releases per data set, route and epsilon (fresh noise; the median is "
                        "over data sets and releases)")
    p.add_argument("--behaviour-share", type=float, default=None,
                   help="the counts' share of the run (default: BehaviourSettings)")
    p.add_argument("--prior-stds", type=float, default=None)
    p.add_argument("--behaviour-quantile", type=float, default=None,
                   help="the count rows' clip quantile")
    p.add_argument("--oracle", action="store_true",
                   help="diagnostic: the estimated route with the exact empirical N(s,a)/N(s) "
                        "(noise-free, same shares): what the counts' noise costs")
    p.add_argument("--estimator-share", type=float, default=None,
                   help="the estimator's share of the run (default: 1 - policy_value_share)")
    p.add_argument("--policy-value", action="store_true",
                   help="also the policy value rows (J(target), J(behaviour), contrast) at "
                        "policy_value_share of the run, as gpope evaluate releases them")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from gpope.core.behaviour_estimate import BehaviourSettings

    given = {k: v for k, v in (("share", a.behaviour_share), ("prior_stds", a.prior_stds),
                               ("clip_quantile", a.behaviour_quantile)) if v is not None}
    behaviour = BehaviourSettings(**given)
    est_share = (1.0 - RunSettings().policy_value_share if a.estimator_share is None
                 else a.estimator_share)
    pv_share = RunSettings().policy_value_share if a.policy_value else 0.0
    routes = a.routes.split(",")
    eps_list = [float(x) for x in a.epsilons.split(",")]
    sets = [(f"random_mdp/{a.first_seed + i}", a.first_seed + i) for i in range(a.datasets)]
    if a.ward:
        sets += [(f"ward/{r}", 2026 + r) for r in range(a.ward_repeats)]
    records, t0 = [], time.time()
    for name, seed in sets:
        spec, truth, tr, (j_t, j_b) = (ward(a.m, seed) if name.startswith("ward")
                                       else generated(name, a.m, seed))
        j_truth = {"policy_value": j_t, "behaviour_value": j_b, "policy_contrast": j_t - j_b}
        for route in routes:
            for eps, rep in ((e, r) for e in eps_list for r in range(a.repeats)):
                rng = np.random.default_rng([seed, int(eps * 1000), ROUTES.index(route)]
                                            + ([rep] if rep else []))
                pv_rng = np.random.default_rng([seed, int(eps * 1000), ROUTES.index(route), rep,
                                                0x5056])
                v, lo, hi, js = release(route, spec, tr, eps=eps, delta=a.delta,
                                        est_share=est_share, rng=rng, behaviour=behaviour,
                                        oracle=a.oracle, pv_share=pv_share, pv_rng=pv_rng)
                records.append({"dataset": name, "route": route, "epsilon": eps, "repeat": rep,
                                "error": float(np.max(np.abs(v - truth))),
                                "covered": bool(np.all((lo <= truth) & (truth <= hi))),
                                "finite": bool(np.all(np.isfinite(lo) & np.isfinite(hi)))})
                r = records[-1]
                for k, iv in (js or {}).items():
                    r[k] = {"error": abs(iv.value - j_truth[k]), "width": iv.upper - iv.lower,
                            "covered": bool(iv.lower <= j_truth[k] <= iv.upper),
                            "estimand": iv.estimand}
                print(f"{name} {route:>9} eps {eps:g}: error {r['error']:.4f} covered "
                      f"{r['covered']} finite {r['finite']} ({time.time() - t0:.0f} s)", flush=True)
    from gpope.core.policy_value_direct import ESTIMANDS

    summary = []
    print(f"\n{'data':>6} {'route':>9} {'eps':>4} {'median err':>10} {'coverage':>8} {'finite':>6}")
    for kind in ("random_mdp", "ward"):
        for route in routes:
            for eps in eps_list:
                rs = [r for r in records if r["dataset"].startswith(kind)
                      and r["route"] == route and r["epsilon"] == eps]
                if not rs:
                    continue
                row = {"data": kind, "route": route, "epsilon": eps, "n": len(rs),
                       "median_error": float(np.median([r["error"] for r in rs])),
                       "coverage": float(np.mean([r["covered"] for r in rs])),
                       "finite": float(np.mean([r["finite"] for r in rs]))}
                for k in ("policy_value", "behaviour_value", "policy_contrast"):
                    js = [r[k] for r in rs if k in r]
                    if js:
                        row[k] = {"median_error": float(np.median([j["error"] for j in js])),
                                  "median_width": float(np.median([j["width"] for j in js])),
                                  "coverage": float(np.mean([j["covered"] for j in js])),
                                  "direct": float(np.mean([j["estimand"] == ESTIMANDS[
                                      "direct" if k == "policy_value" else "direct_contrast"]
                                      for j in js])) if k != "behaviour_value" else None}
                summary.append(row)
                print(f"{kind[:6]:>6} {route:>9} {eps:>4g} {row['median_error']:>10.4f} "
                      f"{row['coverage']:>8.2f} {row['finite']:>6.2f}  " + "  ".join(
                          f"{k}: err {row[k]['median_error']:.4f} width "
                          f"{row[k]['median_width']:.3f} cov {row[k]['coverage']:.2f}"
                          for k in ("policy_value", "behaviour_value", "policy_contrast")
                          if k in row))
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summary,
                                           "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

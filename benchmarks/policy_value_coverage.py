"""Evidence (issue 27): coverage and width of the released policy value, behaviour value and
contrast, per domain x m x epsilon, beside the same estimator's non-private interval.

Everything runs on the core (:mod:`gpope.core.policy_value`, :mod:`gpope.core.policy_value_release`)
exactly as ``gpope evaluate`` releases it: per-patient terms, the release with the resolved
configuration's settings (``evaluation.policy_value`` at the share ``policy_value_share`` of
(epsilon, delta), ``--conf`` overlays the shipped conf as ``gpope`` does; ``--settings`` changes
fields for a study) (Gaussian mechanism calibrated by
:func:`gpope.core.policy_value_release.policy_value_sigma`, add/remove), the intervals at
level 0.95. The non-private column is the same estimator with exact statistics and no clipping
(:func:`gpope.core.policy_value_release.exact_intervals`).

Data sets and truths:

* chain (conf/specs/chain.yaml, on-policy, H = 200): a fresh simulated data set per trial; truth
  the closed form mean of V(s) over the start states 0..38 (DOMAINS.md 1) for both values,
  contrast 0.
* mountaincar (conf/specs/mountaincar.yaml: uniform target, 0.1-greedy learned behaviour,
  W = 10, H = 200): the simulator costs ~0.5 ms per episode, so one pool of ``--mc-pool``
  behaviour episodes is simulated once (cached) and each data set is drawn iid with replacement
  from it; J(behaviour) is the pool's mean return (the pool is the population), J(target) a Monte
  Carlo estimate from ``--mc-truth`` independent episodes of the uniform policy (standard error
  printed).
* hiv (conf/specs/hiv_demo.yaml, the demo's 40 decisions, W = 20, rewards in [-1e6, 1e9]): a
  pool of ``--hiv-pool`` patients, iid resampling as above; J(target) is the deterministic
  greedy rollout (no patient variation), J(behaviour) the pool mean.
* random<seed> (generated tabular MDPs, :class:`gpope.core.envs.random_mdp.RandomMDPConfig.drawn`:
  weight clip = the instance's ratio bound, rewards in [0, r_max], H = its cap): fresh data sets
  per trial; truths by forward recursion over the cap (the recorded-horizon estimand).

Estimators (``--estimators``): ``is`` (the product's: clipped per-decision importance sampling,
weighted point) and ``dr`` (doubly robust, :func:`gpope.core.policy_value.doubly_robust_terms`,
released through the same mechanism on the same data set). The doubly robust control variate is
the target's EXACT value function V^pi (the best any released theta can give; its public range
[0, S r_max]), so its numbers bound from above what the run's private value function achieves.
It runs where V^pi is known (generated MDPs); on-policy (chain) it equals ``is`` exactly (the
terms telescope); on mountain car and HIV the report gives its identified set's width, which
no V changes: (d_hi' - d_lo') (S - E[n]) with the TD error's public range (``dr_set_width``).

Usage: nice -n 10 python benchmarks/policy_value_coverage.py --domains chain --sizes 2000 \
          --epsilons 1 --trials 20 [--json docs/results/policy_value_coverage.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpope.core.policy_value import PolicyValueBounds, policy_value_terms  # noqa: E402
from gpope.core.policy_value_release import (  # noqa: E402
    QUANTITIES,
    PolicyValueSettings,
    exact_intervals,
    policy_value_sigma,
    release_policy_value,
)

DELTA = 1e-5
LEVEL = 0.95


def conf_settings(conf: str | None, changes: dict | None = None) -> PolicyValueSettings:
    """The policy value release's settings of ``gpope evaluate`` under configuration ``conf``
    (None: the shipped conf/default.yaml), with ``changes`` (PolicyValueSettings fields) over
    them: the same resolved settings the product releases with, never a copy in code."""
    from gpope.config import load_config

    settings = load_config(conf).evaluation.policy_value_settings()
    return dataclasses.replace(settings, **(changes or {}))


def finite_horizon_value(mdp, policy: np.ndarray) -> float:
    """sum_{t < cap} gamma^t E[r_t] of a :class:`~gpope.core.envs.random_mdp.RandomMDP` under
    ``policy`` (S, A): the recorded-horizon estimand (exact, by forward recursion)."""
    S = mdp.n_states
    P_pi = np.einsum("sa,sat->st", policy, mdp.P[:, :, :S])
    r_pi = np.einsum("sa,sa->s", policy, mdp.reward_mean)
    d, total = mdp.start.copy(), 0.0
    for t in range(mdp.config.max_steps):
        total += mdp.config.gamma ** t * float(d @ r_pi)
        d = d @ P_pi
    return total


# --- domains: terms of a data set and the truths ---------------------------------------------

class Domain:
    """Per-patient terms of data sets of one domain and the three true quantities."""

    def __init__(self, name: str, args: argparse.Namespace):
        self.name = name
        self.pool = None
        self.note = ""
        self.dr_bounds = None
        if name == "chain":
            from gpope.core.envs import chain

            self.cfg = chain.ChainConfig()
            self.bounds = PolicyValueBounds(gamma=self.cfg.gamma, horizon=self.cfg.max_steps,
                                            weight_clip=1.0, reward_bounds=(0.0, 1.0),
                                            on_policy=True)
            v = float(np.mean(chain.exact_values(self.cfg)[: self.cfg.n_states - 1]))
            self.truth = {"policy_value": v, "behaviour_value": v, "policy_contrast": 0.0}
            self.note = "fresh data sets; truth: closed form"
        elif name.startswith("random"):
            from gpope.core.envs.random_mdp import RandomMDPConfig, random_mdp

            seed = int(name[len("random"):] or 0)
            self.mdp = random_mdp(RandomMDPConfig.drawn(seed))
            c = self.mdp.config
            self.bounds = PolicyValueBounds(gamma=c.gamma, horizon=c.max_steps,
                                            weight_clip=c.ratio_bound,
                                            reward_bounds=(0.0, self.mdp.r_max))
            jt = finite_horizon_value(self.mdp, self.mdp.target)
            jb = finite_horizon_value(self.mdp, self.mdp.behaviour)
            self.truth = {"policy_value": jt, "behaviour_value": jb, "policy_contrast": jt - jb}
            S = self.mdp.n_states
            p_pi = np.einsum("sa,sat->st", self.mdp.target, self.mdp.P[:, :, :S])
            v_pi = np.linalg.solve(np.eye(S) - c.gamma * p_pi, np.einsum(
                "sa,sa->s", self.mdp.target, self.mdp.reward_mean))
            self.v_ext = np.concatenate([v_pi, np.zeros(c.n_terminal)])
            self.dr_bounds = dataclasses.replace(
                self.bounds, value_range=(0.0, self.bounds.discount_mass * self.mdp.r_max))
            self.note = (f"gpope.core.envs.random_mdp RandomMDPConfig.drawn({seed}): {c.n_states} "
                         f"states, {c.n_actions} actions, mean length {c.mean_length:.1f}, cap "
                         f"{c.max_steps}, gamma {c.gamma}, ratio bound (= weight clip) "
                         f"{c.ratio_bound:.2f}; fresh data sets; truth: forward recursion")
        elif name in ("mountaincar", "hiv"):
            self._pool_domain(name, args)
        else:
            raise SystemExit(f"unknown domain {name!r}")

    def _pool_domain(self, name: str, args: argparse.Namespace) -> None:
        from gpope.core.envs.cohort import generate_episodes
        from gpope.core.policies import importance_ratios
        from gpope.shell.pipeline.jobargs import load_spec

        spec_file = {"mountaincar": "mountaincar.yaml", "hiv": "hiv_demo.yaml"}[name]
        spec = load_spec(ROOT / "conf/specs" / spec_file)
        horizon = 200 if name == "mountaincar" else 40
        self.bounds = PolicyValueBounds.from_spec(spec, horizon=horizon)
        size = args.mc_pool if name == "mountaincar" else args.hiv_pool
        folder = Path(args.pool_dir)
        folder.mkdir(parents=True, exist_ok=True)
        f = folder / f"{name}_terms_{size}_{args.seed}.npy"
        if not f.exists():
            chunk = 5000 if name == "mountaincar" else 1000
            parts = []
            for c in range(-(-size // chunk)):
                tr = generate_episodes(name, min(chunk, size - c * chunk),
                                       np.random.default_rng([args.seed, 31, c]),
                                       n_steps=horizon, batch_size=chunk)
                t = policy_value_terms(tr, importance_ratios(spec.target_policy, tr), self.bounds)
                parts.append(np.stack([t.g, t.a, t.n], axis=1))
                print(f"  {name} pool chunk {c}: {(c + 1) * chunk} episodes", flush=True)
            np.save(f, np.concatenate(parts))
        self.pool = np.load(f)
        jb = float(self.pool[:, 0].mean())
        if name == "mountaincar":
            from gpope.core.envs import mountaincar

            tf = folder / f"mountaincar_uniform_{args.mc_truth}_{args.seed}.npy"
            if not tf.exists():
                tr = mountaincar.generate(args.mc_truth, np.random.default_rng([args.seed, 77]),
                                          mountaincar.uniform_policy())
                disc = self.bounds.gamma ** tr.t.astype(np.float64)
                np.save(tf, np.bincount(tr.traj_index, weights=disc * tr.reward,
                                        minlength=tr.n_trajectories))
            returns = np.load(tf)
            jt = float(returns.mean())
            se = float(returns.std() / np.sqrt(len(returns)))
            self.note = (f"iid from a pool of {size} simulated episodes; J(target) by Monte Carlo "
                         f"({len(returns)} uniform-policy episodes, standard error {se:.3g})")
        else:
            from gpope.core.envs import hiv

            tr = hiv.generate(1, np.random.default_rng(0), spec.target_policy, n_steps=horizon)
            jt = float(np.sum(self.bounds.gamma ** tr.t.astype(np.float64) * tr.reward))
            self.note = (f"iid from a pool of {size} simulated patients; J(target) the "
                         "deterministic greedy rollout")
        self.truth = {"policy_value": jt, "behaviour_value": jb, "policy_contrast": jt - jb}

    def terms(self, m: int, rng: np.random.Generator) -> dict:
        """{estimator: (terms, bounds)} of one fresh data set (``dr`` where V^pi is known)."""
        from gpope.core.policy_value import PolicyValueTerms, doubly_robust_terms

        if self.pool is not None:
            x = self.pool[rng.integers(0, len(self.pool), m)]
            return {"is": (PolicyValueTerms(g=x[:, 0].copy(), a=x[:, 1].copy(), n=x[:, 2].copy()),
                           self.bounds)}
        if self.name == "chain":
            from gpope.core.envs import chain

            tr = chain.generate(m, rng, self.cfg)
            return {"is": (policy_value_terms(tr, np.ones(len(tr.t)), self.bounds), self.bounds)}
        tr = self.mdp.generate(m, rng)
        s, a = tr.state[:, 0].astype(np.int64), tr.action
        ratios = self.mdp.target[s, a] / self.mdp.behaviour[s, a]
        dr = doubly_robust_terms(tr, ratios, self.dr_bounds, self.v_ext[s],
                                 self.v_ext[tr.next_state[:, 0].astype(np.int64)])
        return {"is": (policy_value_terms(tr, ratios, self.bounds), self.bounds),
                "dr": (dr, self.dr_bounds)}

    def dr_set_width(self) -> float | None:
        """Off-policy pools: the doubly robust identified set's width over the whole pool,
        (d_hi' - d_lo') (S - E[n]) with V's public range S (lo', hi'): no V narrows it."""
        if self.pool is None or self.bounds.on_policy:
            return None
        lo0, hi0 = self.bounds.range_with_zero
        s = self.bounds.discount_mass
        b = dataclasses.replace(self.bounds, value_range=(s * lo0, s * hi0))
        d_lo, d_hi = b.target_range
        return float((d_hi - d_lo) * (s - self.pool[:, 2].mean()))


def _cell_summary(rows: list[dict], truth: dict) -> dict:
    out = {}
    for q in QUANTITIES:
        lo = np.array([r[q]["lower"] for r in rows])
        hi = np.array([r[q]["upper"] for r in rows])
        lb = np.array([r[q]["lower_bound"] for r in rows])
        out[q] = {"coverage": float(np.mean((lo <= truth[q]) & (truth[q] <= hi))),
                  "lower_bound_holds": float(np.mean(lb <= truth[q])),
                  "finite": float(np.mean(np.isfinite(lo) & np.isfinite(hi))),
                  "median_width": float(np.median(hi - lo)),
                  "median_value_error": float(np.median(np.abs(
                      np.array([r[q]["value"] for r in rows]) - truth[q]))),
                  "bias": float(np.mean(np.array([r[q]["value"] for r in rows]) - truth[q]))}
    return out


def markdown(report: dict, method: str = "bernstein") -> str:
    """The RESULTS tables of a report: per domain, coverage / median width (non-private width)."""
    short = {"policy_value": "J(target)", "behaviour_value": "J(behaviour)",
             "policy_contrast": "contrast"}
    out = []
    for name, dom in report["domains"].items():
        t = dom["truth"]
        out.append(f"**{name}** ({dom['note']}; truth J(target) {t['policy_value']:.4g}, "
                   f"J(behaviour) {t['behaviour_value']:.4g})\n")
        out.append("| m | eps | trials | " + " | ".join(
            f"{short[q]}: coverage, width (non-private)" for q in QUANTITIES) + " |")
        out.append("|---|---|---|" + "---|" * len(QUANTITIES))
        for c in dom["cells"]:
            if c["method"] != method or c.get("estimator", "is") != "is":
                continue
            cells = [f"{c[q]['coverage']:.2f}, {c[q]['median_width']:.3g} "
                     f"({c[q]['nonprivate_median_width']:.3g})" for q in QUANTITIES]
            out.append(f"| {c['m']:,} | {c['epsilon']:g} | {c['trials']} | " + " | ".join(cells)
                       + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domains", default="chain,random0,random1,random2,mountaincar,hiv")
    p.add_argument("--sizes", default="2000,20000,200000")
    p.add_argument("--epsilons", default="0.1,1,10")
    p.add_argument("--trials", type=int, default=100)
    p.add_argument("--trials-large", type=int, default=0,
                   help="trials at m >= 200,000 (0: --trials)")
    p.add_argument("--seed", type=int, default=2027)
    p.add_argument("--mc-pool", type=int, default=400_000)
    p.add_argument("--mc-truth", type=int, default=100_000)
    p.add_argument("--hiv-pool", type=int, default=50_000)
    p.add_argument("--pool-dir", default="/tmp/policy_value_pools")
    p.add_argument("--methods", default="bernstein,normal")
    p.add_argument("--estimators", default="is,dr",
                   help="is (importance sampling, the product's) and/or dr (doubly robust)")
    p.add_argument("--conf", default=None,
                   help="configuration file over conf/default.yaml (as gpope --conf)")
    p.add_argument("--settings", default="{}",
                   help="JSON of PolicyValueSettings fields to change (default: the resolved "
                        "conf's evaluation.policy_value, the product's)")
    p.add_argument("--json", default=None)
    p.add_argument("--markdown", default=None, metavar="JSON",
                   help="print the RESULTS tables of a saved report and exit")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return 0
    settings = conf_settings(args.conf, json.loads(args.settings))
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    methods = args.methods.split(",")
    estimators = args.estimators.split(",")
    report = {"command": "python benchmarks/policy_value_coverage.py " + " ".join(argv or sys.argv[1:]),
              "settings": settings.__dict__, "delta": DELTA, "level": LEVEL, "domains": {}}
    for name in args.domains.split(","):
        t0 = time.perf_counter()
        dom = Domain(name, args)
        print(f"{name}: truth {dom.truth} ({dom.note}); setup {time.perf_counter() - t0:.1f} s",
              flush=True)
        if dom.dr_set_width() is not None:
            print(f"  dr identified set width over the pool (any V): {dom.dr_set_width():.4g}",
                  flush=True)
        cells = []
        for m in sizes:
            trials = args.trials_large if (m >= 200_000 and args.trials_large) else args.trials
            rng = np.random.default_rng([args.seed, m])
            sig = {e: policy_value_sigma(m=m, epsilon=e, delta=DELTA, settings=settings)
                   for e in epsilons}
            rows = {(est, e, meth): [] for est in estimators for e in epsilons
                    for meth in methods}
            exact = {(est, meth): [] for est in estimators for meth in methods}
            t1 = time.perf_counter()
            for _ in range(trials):
                data = dom.terms(m, rng)
                for est in estimators:
                    if est not in data:
                        continue
                    terms, bounds = data[est]
                    for meth in methods:
                        iv = exact_intervals(terms, bounds, LEVEL, meth)
                        exact[(est, meth)].append({q: iv[q].__dict__ for q in QUANTITIES})
                    for e in epsilons:
                        rel = release_policy_value(terms, bounds, sigma=sig[e],
                                                   settings=settings, rng=rng)
                        for meth in methods:
                            iv = rel.intervals(LEVEL, meth,
                                               variance_share=settings.variance_share,
                                               noise_share=settings.noise_share)
                            rows[(est, e, meth)].append({q: iv[q].__dict__ for q in QUANTITIES})
            for est in estimators:
                for meth in methods:
                    if not exact[(est, meth)]:
                        continue
                    np_sum = _cell_summary(exact[(est, meth)], dom.truth)
                    for e in epsilons:
                        summ = _cell_summary(rows[(est, e, meth)], dom.truth)
                        for q in QUANTITIES:
                            summ[q]["nonprivate_median_width"] = np_sum[q]["median_width"]
                            summ[q]["nonprivate_coverage"] = np_sum[q]["coverage"]
                        cells.append({"m": m, "epsilon": e, "method": meth, "estimator": est,
                                      "trials": trials, "sigma": sig[e], **summ})
                        print(f"  m={m} eps={e:g} {est} {meth}: " + "; ".join(
                            f"{q} cov {summ[q]['coverage']:.2f} w {summ[q]['median_width']:.4g}"
                            f" (np {summ[q]['nonprivate_median_width']:.4g}) bias "
                            f"{summ[q]['bias']:.3g}" for q in QUANTITIES), flush=True)
            print(f"  m={m}: {trials} trials in {time.perf_counter() - t1:.1f} s", flush=True)
        report["domains"][name] = {"truth": dom.truth, "note": dom.note, "cells": cells,
                                   "dr_set_width": dom.dr_set_width(),
                                   "bounds": {**dom.bounds.__dict__,
                                              "discount_mass": dom.bounds.discount_mass}}
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Could any tuning-free estimator of the released statistics reach the tuned HIV demo? (no Spark)

The tuning-free default misses 1.5x of the tuned GPOPE on the HIV demo (docs/RESULTS.md, "The
shipped specs with their evaluation: blocks removed"). This script measures what every
estimator a public rule could choose from the same statistics reaches, and what it costs the
other domains. Per shipped spec (the cohorts of ``own_data_shipped_core.py``) and, with
``--generated K``, K generated MDPs per feature kind (``own_data_core.py``'s data sets):

- exact statistics (no noise, not a release): the LSTD fixed point, the early-stopped gradient
  descent path on the MSPBE ``(A theta - b)^T C^-1 (A theta - b)`` from theta = 0 (step 1/L,
  L the top eigenvalue of ``A^T C^-1 A``), the ridge path ``argmin ||A theta - b||^2 +
  c s_1^2 ||theta||^2`` (``s_1`` the top singular value of A) and its best point chosen WITH the
  truth (``oracle``);
- each epsilon and noise draw: the default as released, and on the SAME noisy sums (pure
  post-processing, no budget) the same paths with public rules: a fixed iteration count or ridge
  multiplier; the discrepancy principle (the largest ridge whose residual ``||A~ theta - b~||``
  is within ``kappa`` times the noise's expected ``std sqrt(k (1 + ||theta||^2))``); truncated
  SVD and ridge at the noise's spectral-norm bound ``tau``; the ``-unid`` variants replace the
  default's release only where its identification test fails (the rest keep the default's);
- HIV only, with ``--floor N``: the best linear fit in the spec's features of the true values
  at N states drawn from the behaviour cohort (Monte Carlo of the public simulator), read at the
  reference states: the error no linear estimator under the behaviour distribution avoids; and
  LSTD(1) (importance-weighted returns regressed on the features, no noise);
- HIV only, with ``--gpope``: the shipped block's GPOPE (its clip, step, batch rate, tail
  averaging) without noise at 1x, 4x and 16x its tuned 20,000 iterations, and private at epsilon
  1 / 10 at 1x and 4x: how much of its error is early stopping rather than the fixed point.

Errors are max abs errors at the reference states relative to the largest |true value| (as
``own_data_shipped.py``); medians over cohorts x draws.

    nice -n 10 .venv/bin/python benchmarks/own_data_shipped_floor.py --generated 6 \
        --floor 2000 --gpope --out docs/results/own_data_shipped_floor.json
    nice -n 10 .venv/bin/python benchmarks/own_data_shipped_floor.py --only hiv \
        --variants 0.75:0.3,0.5:0.3,0.9:0.1,0.5:0.1 --out docs/results/own_data_shipped_floor_hiv_clip.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from own_data_shipped_core import add_cohort_arguments, cohort_rows, selected_specs

#: iteration counts (in steps of 1/L) of the early-stopped gradient path
STEPS = (300, 1000, 3000, 10000)
#: ridge multipliers of s_1^2 (fixed public rules)
RIDGES = (1e-6, 1e-5, 1e-4, 1e-3)
#: discrepancy-principle factors
KAPPAS = (0.5, 1.0)
#: the oracle's ridge grid (multipliers of s_1^2)
ORACLE_GRID = np.logspace(-12, 2, 141)


def _paths(A, b, C, *, std: float, c_std: float) -> dict[str, np.ndarray]:
    """Candidate thetas on (supported) sums ``A, b, C`` with noise stds ``std`` (A, b) and
    ``c_std`` (C); 0 for exact statistics. Post-processing only."""
    from gpope.core.ssp import _psd_floor, noise_norm_bound

    k = b.shape[0]
    U, sv, Vt = np.linalg.svd(A)
    ub = U.T @ b

    def ridge(lam: float) -> np.ndarray:
        return Vt.T @ ((sv / (sv ** 2 + lam)) * ub)

    out = {"lstd": np.linalg.lstsq(A, b, rcond=None)[0]}
    floor = max(noise_norm_bound(k, c_std), 1e-12 * float(np.abs(C).max()))
    Ci = np.linalg.inv(_psd_floor(C, floor))
    H, g0 = A.T @ Ci @ A, A.T @ Ci @ b
    L = float(np.linalg.eigvalsh(H)[-1])
    theta = np.zeros(k)
    for it in range(1, max(STEPS) + 1):
        theta = theta - (H @ theta - g0) / L
        if it in STEPS:
            out[f"gd{it}"] = theta.copy()
    for c in RIDGES:
        out[f"ridge{c:g}"] = ridge(c * sv[0] ** 2)
    path = [ridge(c * sv[0] ** 2) for c in ORACLE_GRID]
    out["oracle_path"] = np.array(path)
    if std > 0:
        for kappa in KAPPAS:
            pick = path[0]
            for t in path[::-1]:  # the largest ridge first
                if np.linalg.norm(A @ t - b) <= kappa * std * math.sqrt(k * (1.0 + t @ t)):
                    pick = t
                    break
            out[f"discrepancy{kappa:g}"] = pick
        tau = noise_norm_bound(k, std)
        big = sv > tau
        out["tsvd_tau"] = Vt.T[:, big] @ (ub[big] / sv[big])
        out["ridge_tau2"] = ridge(tau ** 2)
    return out


def _errors(thetas: dict[str, np.ndarray], keep: np.ndarray, err) -> dict[str, float]:
    def full(t: np.ndarray) -> np.ndarray:
        th = np.zeros(keep.shape[0])
        th[keep] = t
        return th

    r = {name: err(full(t)) for name, t in thetas.items() if name != "oracle_path"}
    r["oracle"] = min(err(full(t)) for t in thetas["oracle_path"])
    return r


def measure(spec, truth, vec, *, epsilons, draws: int, delta: float, seed: int,
            settings=None) -> list[dict]:
    """Records of one cohort: exact statistics (epsilon 0) and each epsilon x draw of the default
    with ``settings`` (None: conf's ``evaluation.untuned``)."""
    from gpope.core.ssp import split_vector, supported_features
    from gpope.core.untuned.release import (
        UntunedSettings,
        plan_untuned,
        release_untuned_rows,
        value_range,
    )

    n = spec.n_features
    lo, hi = value_range(spec)
    G = np.array([spec.reference_values(e) for e in np.eye(n)]).T
    scale = float(np.max(np.abs(truth)))

    def err(theta: np.ndarray) -> float:
        return float(np.max(np.abs(np.clip(G @ theta, lo, hi) - truth)) / scale)

    A, b, C = (x[0] for x in split_vector(vec.sum(axis=0, keepdims=True), n))
    keep = np.ones(n, dtype=bool)
    recs = [{"epsilon": 0.0, "seed": seed, "draw": 0,
             **_errors(_paths(A, b, C, std=0.0, c_std=0.0), keep, err)}]
    settings = settings or UntunedSettings()
    for eps in epsilons:
        sig = plan_untuned(m=vec.shape[0], epsilon=eps, delta=delta, settings=settings)
        for draw in range(draws):
            rng = np.random.default_rng(np.random.SeedSequence([seed, draw, int(eps * 1000)]))
            rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1,
                                       settings=settings, rng=rng)
            A, b, C = rel.noisy.pooled()
            std = rel.noisy.pooled_noise_std()
            keep = supported_features(C, noise_std=std * rel.noisy.c_noise_scale)
            ix = np.ix_(keep, keep)
            r = _errors(_paths(A[ix], b[keep], C[ix], std=std,
                               c_std=std * rel.noisy.c_noise_scale), keep, err)
            default = err(rel.theta)
            unid = bool(rel.interval.unidentified)
            for name in ("tsvd_tau", "ridge_tau2", "discrepancy0.5"):
                r[f"{name}-unid"] = r[name] if unid else default
            recs.append({"epsilon": eps, "seed": seed, "draw": draw, "default": default,
                         "unidentified": unid, **r})
    return recs


def projection_floor(spec, truth, states: int, seed: int = 0) -> dict[str, float]:
    """HIV: the best linear fit of the true values at ``states`` behaviour-cohort states."""
    from gpope.core.envs import train_hiv
    from gpope.core.envs.registry import get_domain

    dom = get_domain("hiv")
    tr = dom.generate(2000, np.random.default_rng(100 + seed), dom.behaviour(), 40)
    idx = np.random.default_rng(5).choice(len(tr.t), states, replace=False)
    S = tr.state[idx]
    V, _ = train_hiv.monte_carlo_values(spec.target_policy, S, np.random.default_rng(0),
                                        n_rollouts=1, gamma=spec.gamma, n_steps=200)
    Phi = np.asarray(spec.feature_map(S))
    theta = np.linalg.lstsq(Phi, V, rcond=None)[0]
    scale = float(np.max(np.abs(truth)))
    ref = np.asarray(spec.feature_map(spec.reference_array())) @ theta
    return {"states": states, "reference_error": float(np.max(np.abs(ref - truth)) / scale),
            "fit_rms": float(np.sqrt(np.mean((Phi @ theta - V) ** 2)) / scale)}


def mc_regression(spec, truth, *, seeds: int) -> list[dict]:
    """HIV: LSTD(1), i.e. the least-squares regression of per-decision importance-weighted
    returns (weights capped at the spec's bound) on the features of the states at decisions
    t < t_max of each 40-decision record, without noise: the estimator that minimises value
    error instead of the projected Bellman error."""
    from gpope.core.envs.registry import get_domain

    dom = get_domain("hiv")
    ref = np.asarray(spec.feature_map(spec.reference_array()))
    scale = float(np.max(np.abs(truth)))
    out = []
    for seed in range(seeds):
        tr = dom.generate(2000, np.random.default_rng(100 + seed), dom.behaviour(), 40)
        pi = spec.target_policy.probabilities(tr.state)[np.arange(len(tr.t)), tr.action]
        rho = np.minimum(pi / tr.behavior_prob, spec.importance_weight_bound).reshape(-1, 40)
        rewards = tr.reward.reshape(-1, 40)
        returns, nxt = np.zeros_like(rewards), np.zeros(rewards.shape[0])
        for t in range(39, -1, -1):
            nxt = rho[:, t] * (rewards[:, t] + spec.gamma * nxt)
            returns[:, t] = nxt
        phi = np.asarray(spec.feature_map(tr.state)).reshape(rewards.shape[0], 40, -1)
        for t_max in (20, 40):
            theta = np.linalg.lstsq(phi[:, :t_max].reshape(-1, phi.shape[2]),
                                    returns[:, :t_max].ravel(), rcond=None)[0]
            out.append({"seed": seed, "t_max": t_max,
                        "error": float(np.max(np.abs(ref @ theta - truth)) / scale)})
    return out


def gpope_path(spec, truth, *, seeds: int, runs: int, delta: float) -> list[dict]:
    """HIV: the shipped block's GPOPE without noise at 1x/4x/16x its iterations, and private."""
    from gpope.core.envs.registry import get_domain
    from gpope.core.gpope.config import GPOPEConfig
    from gpope.core.gpope.solver import run_gpope
    from gpope.core.trajectories.batch import statistics_of_transitions

    n = spec.n_features
    G = np.array([spec.reference_values(e) for e in np.eye(n)]).T
    scale = float(np.max(np.abs(truth)))
    tuned = {float(t.epsilon): t for t in spec.evaluation.tuned}
    dom = get_domain("hiv")
    out = []
    for seed in range(seeds):
        stats = statistics_of_transitions(
            dom.generate(2000, np.random.default_rng(100 + seed), dom.behaviour(), 40), spec)
        for eps, mult in ((None, 1), (None, 4), (None, 16), (1.0, 1), (10.0, 1), (1.0, 4),
                          (10.0, 4)):
            t = tuned[10.0 if eps is None else eps]
            cfg = GPOPEConfig(iterations=20_000 * mult, step_size=float(t.step_size),
                              clip=float(t.clip), sampling="poisson", batch_rate=0.01,
                              step_schedule="constant", averaging="tail", tail_fraction=0.5,
                              noise_multiplier=0.0 if eps is None else None, epsilon=eps,
                              delta=delta)
            for r in range(1 if eps is None else runs):
                theta = run_gpope(stats, cfg, np.random.default_rng(r)).theta_avg
                out.append({"seed": seed, "epsilon": eps or 0.0, "iterations": cfg.iterations,
                            "run": r,
                            "error": float(np.max(np.abs(G @ theta - truth)) / scale)})
    return out


def _summary(records: list[dict]) -> list[dict]:
    rows = []
    for name in dict.fromkeys(r["spec"] for r in records):
        for eps in sorted({r["epsilon"] for r in records if r["spec"] == name}):
            rs = [r for r in records if r["spec"] == name and r["epsilon"] == eps]
            keys = [k for k in rs[0] if isinstance(rs[0][k], float) and k != "epsilon"]
            rows.append({"spec": name, "epsilon": eps, "n": len(rs),
                         **{k: float(np.median([r[k] for r in rs])) for k in keys}})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cohort_arguments(p)
    p.add_argument("--generated", type=int, default=0,
                   help="also K generated MDPs per feature kind (seeds 1000...), m = 20,000")
    p.add_argument("--floor", type=int, default=0, help="HIV projection floor at N states (0: off)")
    p.add_argument("--gpope", action="store_true", help="HIV: the shipped GPOPE's path (slow)")
    p.add_argument("--variants", default=None,
                   help="Q:W,... the default with clip_quantile Q and second_moment_weight W "
                        "(shipped specs only; default: conf's settings)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)

    eps = [float(x) for x in a.epsilons.split(",")]
    variants = [("", None)]
    if a.variants:
        from dataclasses import replace

        from gpope.core.untuned.release import UntunedSettings

        variants = [(f" q{q} w{w}", replace(UntunedSettings(), clip_quantile=float(q),
                                            second_moment_weight=float(w)))
                    for q, w in (v.split(":") for v in a.variants.split(","))]
    records, extra = [], {}
    t0 = time.time()
    for spec, domain, patients, cap, truth in selected_specs(a.only):
        for seed in range(a.seeds):
            vec = cohort_rows(spec, domain, patients, cap, seed)
            for label, settings in variants:
                for r in measure(spec, truth, vec, epsilons=eps, draws=a.draws, delta=a.delta,
                                 seed=seed, settings=settings):
                    records.append({"spec": spec.name + label, **r})
            print(f"{spec.name} seed {seed} ({time.time() - t0:.0f} s)", flush=True)
        if domain == "hiv" and a.floor:
            extra["projection_floor"] = projection_floor(spec, truth, a.floor)
            extra["mc_regression"] = mc_regression(spec, truth, seeds=a.seeds)
        if domain == "hiv" and a.gpope:
            extra["gpope_path"] = gpope_path(spec, truth, seeds=min(a.seeds, 2), runs=3,
                                             delta=a.delta)
    if a.generated:
        from own_data_core import dataset

        for kind in ("random_mdp", "random_mdp_linear"):
            for i in range(a.generated):
                spec, truth, vec = dataset(f"{kind}/{1000 + i}", 20_000, 1000 + i)
                for r in measure(spec, truth, vec, epsilons=eps, draws=1, delta=a.delta,
                                 seed=1000 + i):
                    records.append({"spec": "generated", **r})
                print(f"{kind}/{1000 + i} ({time.time() - t0:.0f} s)", flush=True)
    summary = _summary(records)
    cols = [k for k in dict.fromkeys(k for row in summary for k in row)
            if k not in ("spec", "epsilon", "n")]
    for c0 in range(0, len(cols), 9):
        part = cols[c0:c0 + 9]
        print(f"\n{'spec':<12} {'eps':>4} " + " ".join(f"{c:>14}" for c in part))
        for row in summary:
            print(f"{row['spec']:<12} {row['epsilon']:>4g} "
                  + " ".join(f"{row.get(c, float('nan')):>14.4f}" for c in part))
    for name, value in extra.items():
        print(f"\n{name}: {json.dumps(value)[:2000]}")
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summary, **extra,
                                           "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

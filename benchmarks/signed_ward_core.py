"""Coverage of the tuning-free default's V intervals on a sepsis-like ward (core, no Spark).

A generated tabular MDP nobody tuned on: 12 acuity cells, three treatments, two terminal states
(discharge pays +1, death -1, every other step 0), gamma 0.95, episodes capped at 30 steps, a
clinician-mix behaviour policy and a target mixing it with a random protocol (ward ``seed``:
dynamics, policies and start). The truth is the Bellman solve ``V = (I - gamma P_pi)^-1 r_pi``,
which is also the tabular LSTD fixed point the interval is stated for. For each of ``--datasets``
fresh cohorts of ``--m`` patients the script runs the default's in-memory release ``--reps``
times (fresh noise) and prints, per epsilon and reference state (the most visited cell, the
mildest, the middle and the most severe), the coverage of the truth and of the cohort's own
non-private LSTD, the mean signed error, the median half-width, and (a private diagnostic
rebuilt without noise) the shift the residual clip leaves in the refined values with the bound
the exact clipped mass would put on it; ``--residual-quantile`` and ``--residual-tail-stds``
compare the refinement's residual clip (:func:`gpope.core.untuned.release.residual_quantile`),
``--exit-scale`` and ``--target-mix`` longer stays and larger weights, ``--all-states`` reads
every cell.

    .venv/bin/python benchmarks/signed_ward_core.py --datasets 20 --reps 5 --m 20000
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

S, A, GAMMA, CAP = 12, 3, 0.95, 30


def ward(seed: int, exit_scale: float = 1.0, target_mix: float = 0.5):
    """(P (S, A, S+2), mu (S, A), pi (S, A), start (S,)) of the ward ``seed``; column S is
    discharge, S + 1 death. Sicker cells die more and leave less; treatment 2 helps most.
    ``exit_scale`` multiplies both exit probabilities (below 1: longer stays, more of them cut
    at the cap); the target is ``(1 - target_mix) mu + target_mix`` a random protocol's rows
    (1: a deterministic protocol, the largest importance weights)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x57A2D]))
    P = np.zeros((S, A, S + 2))
    for s in range(S):
        sev = s / (S - 1)
        for a in range(A):
            p_dis = exit_scale * (0.02 + 0.10 * (1.0 - sev) * (1.0 + 0.3 * a))
            p_die = exit_scale * (0.01 + 0.08 * sev * (1.2 - 0.3 * a))
            succ = np.clip(s + np.arange(-2, 3), 0, S - 1)
            np.add.at(P[s, a], succ, (1.0 - p_dis - p_die) * rng.dirichlet(np.full(5, 2.0)))
            P[s, a, S], P[s, a, S + 1] = p_dis, p_die
    mu = 0.3 / A + 0.7 * rng.dirichlet(np.full(A, 2.0), size=S)
    protocol = np.eye(A)[rng.integers(A, size=S)] if target_mix >= 1.0 else \
        rng.dirichlet(np.ones(A), size=S)
    pi = (1.0 - target_mix) * mu + target_mix * protocol
    return P, mu, pi, rng.dirichlet(np.full(S, 2.0))


def values(P: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """(S,) exact V^pi: discharge +1, death -1 on entering them."""
    r = np.einsum("sa,sa->s", pi, P[:, :, S] - P[:, :, S + 1])
    return np.linalg.solve(np.eye(S) - GAMMA * np.einsum("sa,sat->st", pi, P[:, :, :S]), r)


def episodes(P, R, mu, start, m: int, cap: int, rng: np.random.Generator):
    """``m`` episodes under mu as :class:`~gpope.core.trajectories.transitions.Transitions`:
    P (S, A, S + K) with the K columns past S terminal, rewards R[s, a, s'], records cut at
    ``cap`` decisions."""
    from gpope.core.trajectories.transitions import Transitions

    n_states = P.shape[0]
    state, alive = rng.choice(n_states, size=m, p=start), np.arange(m)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("traj", "t", "s", "a", "r", "ns")}
    cmu, cP = np.cumsum(mu, 1), np.cumsum(P, 2)
    for t in range(cap):
        a = np.minimum((cmu[state] < rng.random(len(state))[:, None]).sum(1), mu.shape[1] - 1)
        ns = np.minimum((cP[state, a] < rng.random(len(state))[:, None]).sum(1), P.shape[2] - 1)
        for k, v in (("traj", alive), ("t", np.full(len(alive), t)), ("s", state), ("a", a),
                     ("r", R[state, a, ns]), ("ns", ns)):
            cols[k].append(v)
        alive, state = alive[ns < n_states], ns[ns < n_states]
        if not len(alive):
            break
    f = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((f["t"], f["traj"]))
    f = {k: v[order] for k, v in f.items()}
    end = f["ns"] >= n_states
    return Transitions(
        traj_index=f["traj"], t=f["t"], state=f["s"].astype(np.float64)[:, None],
        action=f["a"], reward=f["r"].astype(np.float64),
        next_state=f["ns"].astype(np.float64)[:, None], terminal=end,
        truncated=(f["t"] == cap - 1) & ~end, behavior_prob=mu[f["s"], f["a"]], n_trajectories=m)


def signed_rewards(P: np.ndarray) -> np.ndarray:
    """R[s, a, s'] of the ward: discharge +1 and death -1 on entering them, 0 otherwise."""
    R = np.zeros_like(P)
    R[:, :, S], R[:, :, S + 1] = 1.0, -1.0
    return R


def cohort(P, mu, start, m: int, rng: np.random.Generator):
    """``m`` episodes under mu (:func:`episodes`) and the visit counts per cell."""
    tr = episodes(P, signed_rewards(P), mu, start, m, CAP, rng)
    return tr, np.bincount(tr.state[:, 0].astype(np.int64), minlength=S)


def spec_of(pi: np.ndarray, mu: np.ndarray, refs: list[int]):
    """The own-data spec an analyst would write: public bounds, no ``evaluation:`` block."""
    from gpope.core.spec import EvaluationSpec

    return EvaluationSpec.from_mapping({
        "name": "signed_ward", "gamma": GAMMA, "normalization": "transition",
        "length_scale": CAP, "feature_map": {"kind": "tabular", "n_states": S + 2},
        "importance_weight_bound": float(np.ceil(np.max(pi / mu) * 1000) / 1000),
        "reward_bounds": [-1.0, 1.0],
        "target_policy": {"kind": "tabular",
                          "probs": np.vstack([pi, np.full((2, A), 1.0 / A)]).tolist()},
        "reference_states": {f"s{s}": [float(s)] for s in refs}})


def clip_shift(vec: np.ndarray, spec, settings, quantile: float) -> tuple[np.ndarray, np.ndarray]:
    """The default's arithmetic without noise (a private diagnostic, never released): the shift
    of the refined values from the LSTD's that the residual clip leaves (statistics clipped at
    their exact ``clip_quantile``, residuals at their exact ``quantile``, the one the default
    takes at the run's epsilon and m: :func:`gpope.core.untuned.release.residual_quantile`), and the bound
    ``||A_c^-T g|| sum_i (||r_i|| - c_r)+`` on it that the exact clipped mass would give."""
    from gpope.core.ssp import c_block_scale, clip_statistics, residuals, split_vector

    n = spec.n_features
    w = c_block_scale(n, settings.second_moment_weight)
    c = np.quantile(np.linalg.norm(vec * w, axis=1), settings.clip_quantile)

    def solve(v):
        Am, bm, _ = split_vector(v.sum(axis=0, keepdims=True), n)
        return np.linalg.lstsq(Am[0], bm[0], rcond=None)[0], Am[0]

    theta_lstd, _ = solve(vec)
    theta0, A_c = solve(clip_statistics(vec * w, c) / w)
    r = residuals(vec, theta0, n)
    norms = np.linalg.norm(r, axis=1)
    c_r = np.quantile(norms, quantile)
    kept = np.minimum(1.0, c_r / np.maximum(norms, 1e-300))[:, None]
    inv = np.linalg.pinv(A_c)
    theta = theta0 + inv @ (r * kept).sum(axis=0)
    G = np.array([spec.reference_values(e) for e in np.eye(n)]).T
    shift = spec.reference_values(theta) - spec.reference_values(theta_lstd)
    return shift, np.linalg.norm(G @ inv, axis=1) * float(np.maximum(norms - c_r, 0.0).sum())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0, help="the ward (dynamics and policies)")
    p.add_argument("--exit-scale", type=float, default=1.0, help="see ward()")
    p.add_argument("--target-mix", type=float, default=0.5, help="see ward()")
    p.add_argument("--datasets", type=int, default=20, help="fresh cohorts")
    p.add_argument("--reps", type=int, default=5, help="releases per cohort (fresh noise)")
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--residual-quantile", type=float, default=None,
                   help="the refinement's residual clip quantile (default: the conf's)")
    p.add_argument("--residual-tail-stds", type=float, default=None,
                   help="rows above the residual clip, in the residual sum's noise stds (default: "
                        "the conf's; 1e9: the residual quantile alone)")
    p.add_argument("--all-states", action="store_true",
                   help="every cell a reference state (default: the most visited, the mildest, "
                        "the middle and the most severe)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.ssp import split_vector, statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.core.untuned.release import (
        UntunedSettings,
        plan_untuned,
        release_untuned_rows,
        residual_quantile,
    )

    settings = UntunedSettings()
    if a.residual_quantile is not None:
        settings = replace(settings, residual_quantile=a.residual_quantile)
    if a.residual_tail_stds is not None:
        settings = replace(settings, residual_tail_stds=a.residual_tail_stds)
    run = RunSettings()
    P, mu, pi, start = ward(a.seed, a.exit_scale, a.target_mix)
    truth_all = values(P, pi)
    _, visits = cohort(P, mu, start, 2000, np.random.default_rng(0))  # public design: the mode
    refs = list(range(S)) if a.all_states else sorted({int(visits.argmax()), 0, S // 2, S - 1})
    spec = spec_of(pi, mu, refs)
    truth = truth_all[refs]
    eps_list = [float(x) for x in a.epsilons.split(",")]
    rec: dict[float, dict[str, list]] = {
        e: {"cov": [], "cov_lstd": [], "err": [], "half": [], "shift": [], "bound": []}
        for e in eps_list}
    sigmas = {e: plan_untuned(m=a.m, epsilon=e, delta=a.delta, settings=settings,
                              share=1.0 - run.policy_value_share) for e in eps_list}
    t0 = time.time()
    for d in range(a.datasets):
        tr, _ = cohort(P, mu, start, a.m, np.random.default_rng([a.seed, d]))
        rows = statistics_of_transitions(tr, spec).to_rows()
        vec = statistics_vectors(rows["A"], rows["b"], rows["C"])
        Ab, bb, _ = split_vector(vec.sum(axis=0, keepdims=True), spec.n_features)
        lstd = spec.reference_values(np.linalg.lstsq(Ab[0], bb[0], rcond=None)[0])
        for eps in eps_list:
            sig = sigmas[eps]
            shift, bound = clip_shift(vec, spec, settings, residual_quantile(settings, sig, a.m))
            rec[eps]["shift"].append(shift)
            rec[eps]["bound"].append(bound)
            for r in range(a.reps):
                iv = release_untuned_rows(
                    vec, spec, sigmas=sig, moments_share=run.moments_share, settings=settings,
                    rng=np.random.default_rng([a.seed, d, r, int(eps * 1000)])).interval
                out = rec[eps]
                out["cov"].append((iv.lower <= truth) & (truth <= iv.upper))
                out["cov_lstd"].append((iv.lower <= lstd) & (lstd <= iv.upper))
                out["err"].append(iv.value - truth)
                out["half"].append((iv.upper - iv.lower) / 2.0)
        print(f"cohort {d}: {time.time() - t0:.0f} s", flush=True)
    summary = []
    print(f"\nreference states {refs} (most visited {int(visits.argmax())}); truth "
          f"{np.round(truth, 3).tolist()}; {a.datasets} x {a.reps} releases, m={a.m}, "
          f"residual_quantile={settings.residual_quantile}, residual_tail_stds="
          f"{settings.residual_tail_stds} (clipped at the "
          + ", ".join(f"{residual_quantile(settings, sigmas[e], a.m):.5f} quantile at epsilon {e:g}"
                      for e in eps_list) + ")")
    print("clip shift: the residual clip's shift of the noise-free release from the LSTD (mean "
          "over cohorts); bound: what the exact clipped mass would bound it by")
    print(f"{'eps':>5} {'state':>5} {'coverage':>8} {'cov LSTD':>8} {'bias':>8} {'half':>7} "
          f"{'finite':>6} {'clip shift':>10} {'bound':>7}")
    for eps in eps_list:
        out = {k: np.array(v) for k, v in rec[eps].items()}
        shifts_a, bounds_a = out["shift"], out["bound"]
        for j, s in enumerate(refs):
            fin = np.isfinite(out["half"][:, j])
            row = {"epsilon": eps, "state": s, "coverage": float(out["cov"][:, j].mean()),
                   "coverage_lstd": float(out["cov_lstd"][:, j].mean()),
                   "bias": float(out["err"][:, j].mean()), "finite": float(fin.mean()),
                   "median_half_width": float(np.median(out["half"][fin, j])) if fin.any()
                   else float("inf"), "clip_shift": float(shifts_a[:, j].mean()),
                   "max_abs_clip_shift": float(np.abs(shifts_a[:, j]).max()),
                   "clip_bound": float(bounds_a[:, j].mean())}
            summary.append(row)
            print(f"{eps:>5g} {s:>5} {row['coverage']:>8.3f} {row['coverage_lstd']:>8.3f} "
                  f"{row['bias']:>8.4f} {row['median_half_width']:>7.4f} {row['finite']:>6.2f} "
                  f"{row['clip_shift']:>10.4f} {row['clip_bound']:>7.4f}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "refs": refs, "summary": summary}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

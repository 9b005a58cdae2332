"""Coverage of every released V interval against its stated estimand, per domain x epsilon (core).

The documented own-data path with no solver flags releases V at the spec's reference states by
the tuning-free default (:mod:`gpope.core.untuned.release`); this script runs that release in
memory (the pipeline sums the same statistics with Spark and runs the same arithmetic) on fresh
data sets, ``--datasets`` per domain, ``--reps`` releases each (fresh noise), at ``--m`` patients
and each epsilon, and prints per cell: the releases, the V intervals, the fraction finite, the
coverage of the estimand by every interval (an unbounded one covers) and by the finite ones, the
lowest coverage over the reference states (domains with fixed reference states), the median
finite half-width and how many releases the probe moved (``UntunedRelease.probe_scale``). Noise comes from seeded numpy Generators (a seeded run is not private).

Domains and estimands (the row's stated estimand: the tabular fixed point, i.e. the exact value
``(I - gamma P_pi)^-1 r_pi``, or the feature fixed point of a non-tabular map):

* ``random_mdp``: generated tabular MDPs ``random_mdp/<seed>`` (1-3 absorbing terminal states,
  rewards in [0, r_max]); one MDP per data set; exact values.
* ``random_mdp_linear``: ``random_mdp_linear/<seed>``, linear features in which V is exact, so
  rewards ``(I - gamma P_pi) V`` take both signs; the feature fixed point is the exact value.
* ``ward``: the sepsis-like ward of ``benchmarks/signed_ward_core.py`` (12 acuity cells, three
  treatments, discharge +1 / death -1 terminal, gamma 0.95, cap 30), a fresh cohort per data set,
  every cell a reference state; exact values.
* ``ward_long``: the same ward with stays twice as long and a deterministic target protocol
  (importance weights up to 5.2): the heavy-tailed residuals (a few long, heavily weighted stays)
  that the refinement's residual clip cuts.
* ``icu``: the ICU trial of ``benchmarks/own_data_icu.py`` (lactate and MAP, Fourier order 3
  without interactions, terminal discharge / death, cap 30), a fresh cohort per data set; its
  estimand is the feature fixed point, computed once by LSTD on ``--icu-population`` simulated
  patients (its own sampling error is printed), not the true V (the features' approximation error
  is outside every interval; RESULTS "Does it work with continuous measurements?").

    nice -n 10 timeout 1200 .venv/bin/python benchmarks/v_coverage_core.py \\
        --out docs/results/v_coverage_core.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

DOMAINS = ("random_mdp", "random_mdp_linear", "ward", "ward_long", "icu")


def generated(kind: str):
    """``make(d, m) -> (spec, estimand (k,), statistics rows)`` of ``kind/<d>``."""
    from own_data_core import dataset

    def make(d: int, m: int):
        return dataset(f"{kind}/{d}", m, d)

    return make


def ward_of(exit_scale: float, target_mix: float):
    """``make`` of fresh cohorts of the signed ward 0 (every cell a reference state)."""
    from signed_ward_core import S, cohort, spec_of, values, ward

    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    P, mu, pi, start = ward(0, exit_scale, target_mix)
    spec, truth = spec_of(pi, mu, list(range(S))), values(P, pi)

    def make(d: int, m: int):
        tr, _ = cohort(P, mu, start, m, np.random.default_rng([0, d]))
        rows = statistics_of_transitions(tr, spec).to_rows()
        return spec, truth, statistics_vectors(rows["A"], rows["b"], rows["C"])

    return make


def icu_transitions(n: int, rng: np.random.Generator):
    """``n`` ICU stays under the unit's protocol as Transitions (the trial's dynamics, in memory;
    terminal on discharge or death, truncated at the public cap)."""
    import own_data_icu as icu

    from gpope.core.trajectories.transitions import Transitions

    s, alive = icu.admit(n, rng), np.arange(n)
    cols: dict[str, list[np.ndarray]] = {k: [] for k in
                                         ("traj", "t", "s", "a", "p", "r", "ns", "end")}
    for t in range(icu.MAX_LENGTH):
        p = icu.behaviour(s)
        a = icu.sample_actions(p, rng)
        s2, r, end = icu.step(s, a, rng)
        for k, v in (("traj", alive), ("t", np.full(len(alive), t)), ("s", s), ("a", a),
                     ("p", p[np.arange(len(a)), a]), ("r", r), ("ns", s2), ("end", end > 0)):
            cols[k].append(v)
        alive, s = alive[end == 0], s2[end == 0]
        if not len(alive):
            break
    f = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((f["t"], f["traj"]))
    f = {k: v[order] for k, v in f.items()}
    return Transitions(
        traj_index=f["traj"], t=f["t"], state=f["s"], action=f["a"], reward=f["r"],
        next_state=f["ns"], terminal=f["end"],
        truncated=(f["t"] == icu.MAX_LENGTH - 1) & ~f["end"], behavior_prob=f["p"],
        n_trajectories=n)


def icu_make(population: int):
    """``make`` of fresh ICU cohorts; the estimand: LSTD on ``population`` patients."""
    import own_data_icu as icu

    from gpope.core.spec import EvaluationSpec
    from gpope.core.ssp import split_vector, statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    spec = EvaluationSpec.from_mapping(icu.spec_mapping(3, 1, name="icu"))

    def vectors(m: int, rng: np.random.Generator) -> np.ndarray:
        rows = statistics_of_transitions(icu_transitions(m, rng), spec).to_rows()
        return statistics_vectors(rows["A"], rows["b"], rows["C"])

    n = spec.n_features

    def solve(sums: np.ndarray) -> np.ndarray:
        A, b, _ = split_vector(sums.sum(axis=0, keepdims=True), n)
        return spec.reference_values(np.linalg.solve(A[0], b[0]))

    # bounded memory: 50,000 patients at a time
    sums = np.array([vectors(50000, np.random.default_rng([7, k])).sum(axis=0)
                     for k in range(max(2, population // 50000))])
    estimand = solve(sums)
    spread = np.abs(solve(sums[::2]) - solve(sums[1::2])) / 2.0
    print(f"icu estimand (LSTD on {len(sums) * 50000} patients): {np.round(estimand, 4).tolist()}"
          f"; half-sample difference / 2: {np.round(spread, 4).tolist()}", flush=True)

    def make(d: int, m: int):
        return spec, estimand, vectors(m, np.random.default_rng([11, d]))

    return make


def makers(domains: list[str], icu_population: int):
    out = {}
    for dom in domains:
        if dom in ("random_mdp", "random_mdp_linear"):
            out[dom] = generated(dom)
        elif dom == "ward":
            out[dom] = ward_of(1.0, 0.5)
        elif dom == "ward_long":
            out[dom] = ward_of(0.5, 1.0)
        elif dom == "icu":
            out[dom] = icu_make(icu_population)
        else:
            raise SystemExit(f"unknown domain {dom!r}; choose from {', '.join(DOMAINS)}")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--domains", default=",".join(DOMAINS))
    p.add_argument("--datasets", type=int, default=25, help="data sets per domain")
    p.add_argument("--reps", type=int, default=4, help="releases per data set (fresh noise)")
    p.add_argument("--m", type=int, default=20000)
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--icu-population", type=int, default=400000)
    p.add_argument("--residual-tail-stds", type=float, default=None,
                   help="the default's residual_tail_stds (default: the conf's; 1e9: the residual "
                        "quantile alone)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.untuned.release import UntunedSettings, plan_untuned, release_untuned_rows

    settings, run = UntunedSettings(), RunSettings()
    if a.residual_tail_stds is not None:
        settings = replace(settings, residual_tail_stds=a.residual_tail_stds)
    eps_list = [float(x) for x in a.epsilons.split(",")]
    t0 = time.time()
    summary = []
    for dom, make in makers(a.domains.split(","), a.icu_population).items():
        rec = {e: {"finite": [], "cov": [], "half": [], "probe": []} for e in eps_list}
        for d in range(a.datasets):
            spec, estimand, vec = make(d, a.m)
            for eps in eps_list:
                sig = plan_untuned(m=a.m, epsilon=eps, delta=a.delta, settings=settings,
                                   share=1.0 - run.policy_value_share)
                for r in range(a.reps):
                    rel = release_untuned_rows(
                        vec, spec, sigmas=sig, moments_share=run.moments_share,
                        settings=settings, rng=np.random.default_rng([d, r, int(eps * 1000)]))
                    iv = rel.interval
                    rec[eps]["probe"].append(rel.probe_scale is not None)
                    rec[eps]["finite"].append(np.isfinite(iv.lower) & np.isfinite(iv.upper))
                    rec[eps]["cov"].append((iv.lower <= estimand) & (estimand <= iv.upper))
                    rec[eps]["half"].append((iv.upper - iv.lower) / 2.0)
        print(f"{dom}: {time.time() - t0:.0f} s", flush=True)
        for eps in eps_list:
            fin = np.concatenate(rec[eps]["finite"])
            cov = np.concatenate(rec[eps]["cov"])
            half = np.concatenate(rec[eps]["half"])
            same = len({len(x) for x in rec[eps]["cov"]}) == 1 and dom != "random_mdp"
            states = np.array(rec[eps]["cov"]).mean(axis=0) if same else np.array([np.nan])
            summary.append({
                "domain": dom, "epsilon": eps, "releases": len(rec[eps]["cov"]),
                "intervals": len(cov), "finite": float(fin.mean()),
                "coverage": float(cov.mean()),
                "coverage_finite": float(cov[fin].mean()) if fin.any() else float("nan"),
                "min_state_coverage": float(states.min()),
                "state_coverage": [round(float(c), 3) for c in states],
                "median_half_width": float(np.median(half[fin])) if fin.any() else float("inf"),
                "probe_moved": int(np.sum(rec[eps]["probe"]))})
    print(f"\nm={a.m}, {a.datasets} data sets x {a.reps} releases per cell, "
          f"{time.time() - t0:.0f} s")
    print(f"{'domain':>18} {'eps':>4} {'releases':>8} {'V intervals':>11} {'finite':>6} "
          f"{'coverage':>8} {'cov finite':>10} {'min state':>9} {'half-width':>10} "
          f"{'probe moved':>11}")
    for row in summary:
        print(f"{row['domain']:>18} {row['epsilon']:>4g} {row['releases']:>8} "
              f"{row['intervals']:>11} {row['finite']:>6.3f} {row['coverage']:>8.3f} "
              f"{row['coverage_finite']:>10.3f} {row['min_state_coverage']:>9.3f} "
              f"{row['median_half_width']:>10.4f} {row['probe_moved']:>11}")
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

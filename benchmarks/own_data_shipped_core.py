"""Can a regularised fallback bring the default within 1.5x of the tuned shipped specs? (no Spark)

For each shipped spec (chain, mountain car off-policy, HIV demo) and seed, one cohort is simulated
in memory at the spec's operating point (the patients of ``benchmarks/own_data_shipped.py``) and
turned into the pipeline's statistics rows; then, per epsilon and noise draw:

- ``default``: the tuning-free default as released (:func:`gpope.core.untuned.release.release_untuned_rows`),
  with its identification test's separation;
- ``ridge x mu``: on the SAME noisy sums the default released (post-processing, no extra budget),
  the ridge solve ``argmin ||A~ theta - b~||^2 + mu tau^2 ||theta||^2`` over the supported
  features, ``tau`` the noise's spectral-norm bound (:func:`gpope.core.ssp.noise_norm_bound`;
  ``mu = 1`` is AdaSSP at its most regularised), values clamped into the spec's public range like
  the default's; ``ridge best`` is the best ``mu`` of the grid chosen WITH the truth, a lower bound
  for every ridge rule built from public quantities (not a release);
- ``lstd``: the non-private LSTD on the same statistics (not a release): the error of the fixed
  point every unbiased solve of the statistics aims at;
- with ``--private-tuning``: one privately tuned GPOPE release per cohort and epsilon
  (:func:`gpope.core.tuning.private.tune_privately`, conf's generic solver settings: 20 passes of
  N = 20,000 Poisson steps, inverse schedule, tail averaging), the ``--tune private`` path.

Each release gets the share of the run's privacy loss a ``gpope evaluate`` run leaves the
default (:func:`estimator_share`: the conf's policy value release takes the rest), so the numbers
describe the pipeline's release; ``--estimator-share 1`` gives the estimator the whole epsilon.
Errors are max abs errors at the reference states divided by the largest |true value| (as
``own_data_shipped.py``). With ``--tuned FILE`` (that script's JSON) the summary prints the
1.5x target (1.5 x the tuned median) beside each row.

    nice -n 10 .venv/bin/python benchmarks/own_data_shipped_core.py --seeds 3 --draws 3 \
        --tuned docs/results/own_data_shipped.json --out docs/results/own_data_shipped_core.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from own_data_shipped import SHIPPED, truth_of

#: ridge multipliers of tau^2 (the AdaSSP scale)
MULTIPLIERS = (0.001, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)


def cohort_rows(spec, domain: str, patients: int, cap: int | None, seed: int) -> np.ndarray:
    """Statistics rows (m, 2n^2+n) of one simulated behaviour cohort, as ``gpope stats`` builds
    them."""
    from gpope.core.envs.registry import get_domain
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    dom = get_domain(domain)
    tr = dom.generate(patients, np.random.default_rng(100 + seed), dom.behaviour(),
                      cap or dom.max_steps)
    rows = statistics_of_transitions(tr, spec).to_rows()
    return statistics_vectors(rows["A"], rows["b"], rows["C"])


def ridge_values(spec, noisy, mu: float) -> np.ndarray:
    """Reference values of the ridge solve ``mu tau^2`` on a release's pooled noisy sums,
    clamped into :func:`gpope.core.untuned.release.value_range` (post-processing)."""
    from gpope.core.ssp import noise_norm_bound, supported_features
    from gpope.core.untuned.release import _ridge_solve, value_range

    A, b, C = noisy.pooled()
    std = noisy.pooled_noise_std()
    keep = supported_features(C, noise_std=std * noisy.c_noise_scale)
    theta = _ridge_solve(A, b, keep, mu * noise_norm_bound(int(keep.sum()), std) ** 2)
    lo, hi = value_range(spec)
    return np.clip(spec.reference_values(theta), lo, hi)


def lstd_values(spec, vec: np.ndarray) -> np.ndarray:
    from gpope.core.ssp import split_vector

    A, b, _ = split_vector(vec.sum(axis=0, keepdims=True), spec.n_features)
    return spec.reference_values(np.linalg.lstsq(A[0], b[0], rcond=None)[0])


def private_tuning_values(spec, domain: str, patients: int, cap: int | None, seed: int,
                          epsilon: float, delta: float) -> np.ndarray:
    """Reference values of one privately tuned GPOPE release on the cohort of ``seed``."""
    from gpope.core.envs.registry import get_domain
    from gpope.core.gpope.solver import GPOPEConfig
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.core.tuning.private import (
        PrivateTuningSettings,
        plan_private_tuning,
        tune_privately,
    )

    dom = get_domain(domain)
    tr = dom.generate(patients, np.random.default_rng(100 + seed), dom.behaviour(),
                      cap or dom.max_steps)
    stats = statistics_of_transitions(tr, spec)
    settings = PrivateTuningSettings()
    n_iter, q = 20_000, 20 / 20_000
    plan = plan_private_tuning(m=stats.m, iterations=n_iter, batch_rate=q, epsilon=epsilon,
                               delta=delta, settings=settings)
    base = GPOPEConfig(iterations=n_iter, step_size=0.5, clip=1.0, noise_multiplier=1.0,
                       delta=delta, sampling="poisson", batch_rate=q, step_schedule="inverse",
                       step_offset=0.1 * n_iter, averaging="tail", tail_fraction=0.5,
                       accountant="rdp")
    res = tune_privately(stats, base, plan, settings, rng=np.random.default_rng(seed))
    return spec.reference_values(res.result.theta)


def estimator_share(spec, share: float | None = None) -> float:
    """The share of the run's Gaussian privacy loss the default gets: ``share`` when given, else
    what ``gpope evaluate`` leaves it (the joint calibration of :func:`gpope.core.evaluation.
    plan_release`): ``1 - policy_value_share`` of the conf where the spec carries the policy
    value release, 1 where it lacks a bound that release needs."""
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.policy_value import policy_value_unavailable

    if share is not None:
        return float(share)
    return 1.0 if policy_value_unavailable(spec) else 1.0 - RunSettings().policy_value_share


def selected_specs(only: str | None):
    """Yield (spec, domain, patients, cap, truth) for each shipped spec ``--only`` keeps (all if
    None), its spec read from conf and its true reference values computed once."""
    from gpope.shell.pipeline.jobargs import load_spec

    for spec_path, domain, patients, cap in SHIPPED:
        if only and domain not in only.split(","):
            continue
        spec = load_spec(spec_path)
        yield spec, domain, patients, cap, truth_of(spec, domain)


def add_cohort_arguments(p: argparse.ArgumentParser) -> None:
    """The options shared by the in-memory shipped-spec benchmarks: cohorts, draws, budget."""
    p.add_argument("--seeds", type=int, default=3, help="cohorts per shipped spec")
    p.add_argument("--draws", type=int, default=3, help="noise draws per cohort and epsilon")
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--only", default=None, help="comma-separated shipped domains (default: all)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cohort_arguments(p)
    p.add_argument("--private-tuning", action="store_true",
                   help="also one --tune private release per cohort and epsilon (slow)")
    p.add_argument("--tuned", default=None, help="own_data_shipped.py JSON with the tuned errors")
    p.add_argument("--estimator-share", type=float, default=None,
                   help="share of the run's Gaussian privacy loss the default gets (default: what "
                        "a `gpope evaluate` run leaves it, 1 - policy_value_share where the spec "
                        "carries the policy value release; 1: the estimator alone)")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from gpope.core.untuned.release import UntunedSettings, plan_untuned, release_untuned_rows

    eps_list = [float(x) for x in a.epsilons.split(",")]
    settings = UntunedSettings()
    records = []
    t0 = time.time()
    for spec, domain, patients, cap, truth in selected_specs(a.only):
        scale = float(np.max(np.abs(truth)))

        def err(values, truth=truth, scale=scale) -> float:
            return float(np.max(np.abs(np.asarray(values) - truth)) / scale)

        for seed in range(a.seeds):
            vec = cohort_rows(spec, domain, patients, cap, seed)
            lstd = err(lstd_values(spec, vec))
            for eps in eps_list:
                sig = plan_untuned(m=vec.shape[0], epsilon=eps, delta=a.delta, settings=settings,
                                   share=estimator_share(spec, a.estimator_share))
                for draw in range(a.draws):
                    rng = np.random.default_rng(np.random.SeedSequence([seed, draw, int(eps * 1000)]))
                    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1,
                                               settings=settings, rng=rng)
                    ridge = {f"{mu:g}": err(ridge_values(spec, rel.noisy, mu)) for mu in MULTIPLIERS}
                    records.append({
                        "spec": spec.name, "seed": seed, "draw": draw, "epsilon": eps,
                        "default": err(rel.interval.value), "lstd": lstd, "ridge": ridge,
                        "ridge_best": min(ridge.values()),
                        "separation": rel.interval.separation, "clip": rel.clip})
            if a.private_tuning:
                for eps in eps_list:
                    v = private_tuning_values(spec, domain, patients, cap, seed, eps, a.delta)
                    for r in records:
                        if (r["spec"], r["seed"], r["epsilon"]) == (spec.name, seed, eps):
                            r["private_tuning"] = err(v)
            print(f"{spec.name} seed {seed}: lstd {lstd:.4f} ({time.time() - t0:.0f} s)", flush=True)
    tuned = {}
    if a.tuned:
        for row in json.loads(Path(a.tuned).read_text()).get("summary", []):
            tuned[(row["spec"], float(row["epsilon"]))] = row["tuned"]
    cols = ["default", *(f"ridge x{mu:g}" for mu in MULTIPLIERS), "ridge best", "lstd"]
    print(f"\nmedian relative max abs error over seeds x draws\n{'spec':<12} {'eps':>4} "
          f"{'1.5x tuned':>10} " + " ".join(f"{c:>10}" for c in cols) + f" {'sep':>7}")
    summary = []
    for name in dict.fromkeys(r["spec"] for r in records):
        for eps in eps_list:
            rs = [r for r in records if r["spec"] == name and r["epsilon"] == eps]
            row = {"spec": name, "epsilon": eps, "n": len(rs),
                   "default": float(np.median([r["default"] for r in rs])),
                   "ridge": {f"{mu:g}": float(np.median([r["ridge"][f"{mu:g}"] for r in rs]))
                             for mu in MULTIPLIERS},
                   "ridge_best": float(np.median([r["ridge_best"] for r in rs])),
                   "lstd": float(np.median([r["lstd"] for r in rs])),
                   "separation": float(np.median([r["separation"] for r in rs])),
                   "private_tuning": sorted({r["private_tuning"] for r in rs
                                             if "private_tuning" in r}) or None,
                   "target": 1.5 * tuned[(name, eps)] if (name, eps) in tuned else None}
            summary.append(row)
            vals = [row["default"], *row["ridge"].values(), row["ridge_best"], row["lstd"]]
            target = f"{row['target']:.4f}" if row["target"] is not None else "-"
            print(f"{name:<12} {eps:>4g} {target:>10} " + " ".join(f"{v:>10.4f}" for v in vals)
                  + f" {row['separation']:>7.3f}")
            if row["private_tuning"]:
                print(f"{'':<17} private tuning (one per cohort): "
                      + ", ".join(f"{v:.4f}" for v in row["private_tuning"]))
    if a.out:
        Path(a.out).write_text(json.dumps({"args": vars(a), "multipliers": MULTIPLIERS,
                                           "summary": summary, "records": records}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

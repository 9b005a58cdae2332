"""Diagnosis: where the SSP interval's undercoverage on HIV (m = 2000, epsilon 10: 0.885) comes from.

Same data, noise streams, public cohort and pool as ``benchmarks/intervals_coverage.py`` (trial t
draws the same cohort and the same release noise, so variant ``pipeline`` reproduces that
benchmark's cell exactly), and per trial five intervals of the same 15 quantities (the two
reference values and the 13 theta coordinates), each a nominal-95% basic bootstrap:

* ``pipeline``: the interval ``gpope evaluate --estimator ssp`` released before the
  identification test became its default (noisy sums, noisy residual moments clipped at the
  public bound; every variant here runs the bootstrap with ``identification=False``);
* ``exact_moments``: the same noisy sums, the residual moments WITHOUT their noise (still clipped):
  what the moments release's noise costs;
* ``unclipped_moments``: the same, residuals not clipped either: what the residual clip costs;
* ``no_privacy``: no privacy noise at all (exact sums, exact unclipped moments): the parametric
  bootstrap's sampling model alone (``b`` perturbed by the sandwich meat, ``A`` fixed);
* ``pairs``: no privacy noise, the nonparametric pairs bootstrap (trajectories resampled, ``A``
  and ``b`` redrawn together): what a sampling model that redraws ``A`` too would give.

NOT private (it reads the data's exact moments): a diagnosis of the method, never a release.
Also reported: the Monte Carlo standard deviation of the pipeline's estimate over the trials
against the mean bootstrap standard error, and its bias in standard deviations.

Usage: nice -n 10 python benchmarks/intervals_diagnosis.py --sizes 2000 --epsilon 10 \
          --trials 100 --draws 200 --pool 6000 --public 400 --json out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("pipeline", "exact_moments", "unclipped_moments", "no_privacy", "pairs")


def _coverage_module():
    spec = importlib.util.spec_from_file_location("intervals_coverage",
                                                  ROOT / "benchmarks/intervals_coverage.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _basic(value: np.ndarray, reps: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    a = 1.0 - level
    q_lo, q_hi = np.quantile(reps, a / 2, axis=0), np.quantile(reps, 1 - a / 2, axis=0)
    return np.minimum(2 * value - q_hi, value), np.maximum(2 * value - q_lo, value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--moments-share", type=float, default=0.1)
    parser.add_argument("--clip-quantile", type=float, default=0.99)
    parser.add_argument("--public", type=int, default=400)
    parser.add_argument("--pool", type=int, default=6000)
    parser.add_argument("--pool-dir", default="/tmp/intervals/hivpool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--json", default=None, help="summary, rewritten after every trial")
    args = parser.parse_args(argv)

    from gpope.core import ssp
    from gpope.core.intervals import bootstrap_interval, ssp_values

    cov_mod = _coverage_module()
    setup = cov_mod._Setup("hiv", args.seed, args.pool, args.pool_dir)
    public = setup.public(args.public, args.seed)
    clip = float(np.quantile(np.linalg.norm(public, axis=1), args.clip_quantile))
    public_c = ssp.clip_statistics(public, clip)
    n = setup.spec.n_features
    estimand, transform, eps, share = setup.estimand, setup.transform, args.epsilon, 1.0
    out = []
    for m in (int(float(x)) for x in args.sizes.split(",")):
        sigma = ssp.ssp_sigma(m=m, epsilon=eps * share, delta=args.delta * share)
        s1, s2 = ssp.split_sigma(sigma, args.moments_share)
        cover = {v: [] for v in VARIANTS}
        se, values, t0 = [], [], time.perf_counter()
        for t in range(args.trials):
            vec = setup.data(m, np.random.default_rng([args.seed, m, t]))
            vec_c = ssp.clip_statistics(vec, clip)
            total = vec_c.sum(axis=0, keepdims=True)
            # the coverage benchmark's release stream for (ssp, eps, share 1), trial t
            rng = np.random.default_rng([args.seed, m, int(eps * 1000), int(share * 1000), t, 0])
            noisy = ssp.release_noisy_statistics(total, n=n, m=m, sigma=s1, clip=clip, rng=rng)
            theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
            norms = np.linalg.norm(ssp.residuals(public_c, theta, n), axis=1)
            bound = min(ssp.residual_bound(theta, clip),
                        float(np.quantile(norms, args.clip_quantile)))
            msum = ssp.clipped_moment_sum(vec, theta, n=n, clip=clip, bound=bound)
            moments = ssp.release_moments(msum, n=n, theta=theta, sigma=s2, bound=bound, rng=rng)
            # identification=False: the diagnosis studies the bootstrap itself (the interval the
            # pipeline released before the identification test became its default)
            _, iv = bootstrap_interval(noisy, moments, transform, rng=rng, level=args.level,
                                       draws=args.draws, regularize=False, identification=False)
            ivs = {"pipeline": (iv.lower, iv.upper)}
            se.append(iv.se)
            values.append(iv.value)
            brng = np.random.default_rng([args.seed, m, t, 4242])
            exact = ssp.NoisyMoments(matrix=ssp.moments_matrix(msum, n), theta=theta, sigma=0.0,
                                     bound=bound)
            r = ssp.residuals(vec_c, theta, n)
            full = ssp.NoisyMoments(matrix=r.T @ r, theta=theta, sigma=0.0, bound=np.inf)
            for name, mom in (("exact_moments", exact), ("unclipped_moments", full)):
                _, v = bootstrap_interval(noisy, mom, transform, rng=brng, level=args.level,
                                          draws=args.draws, regularize=False, identification=False)
                ivs[name] = (v.lower, v.upper)
            clean = ssp.release_noisy_statistics(total, n=n, m=m, sigma=0.0, clip=clip, rng=brng)
            theta0, _ = ssp_values(clean, lambda th: th, regularize=False)
            r0 = ssp.residuals(vec_c, theta0, n)
            _, v = bootstrap_interval(
                clean, ssp.NoisyMoments(matrix=r0.T @ r0, theta=theta0, sigma=0.0, bound=np.inf),
                transform, rng=brng, level=args.level, draws=args.draws, regularize=False,
                identification=False)
            ivs["no_privacy"] = (v.lower, v.upper)
            reps = np.empty((args.draws, len(estimand)))
            for k in range(args.draws):
                A, b, _ = ssp.split_vector(vec_c[brng.integers(0, m, m)].sum(axis=0), n)
                reps[k] = transform(np.linalg.lstsq(A, b, rcond=None)[0])
            ivs["pairs"] = _basic(transform(theta0), reps, args.level)
            for name, (lo, hi) in ivs.items():
                cover[name].append((lo <= estimand) & (estimand <= hi))
            err = np.array(values) - estimand
            sd = err.std(axis=0, ddof=1) if t else np.full(len(estimand), np.nan)
            cell = {
                "m": m, "epsilon": eps, "trials": t + 1, "draws": args.draws, "clip": clip,
                "sigma": sigma, "quantities": setup.names,
                "coverage": {k: float(np.mean(c)) for k, c in cover.items()},
                "coverage_per_quantity": {k: np.mean(c, axis=0).tolist() for k, c in cover.items()},
                "mc_sd_over_mean_se": (sd / np.mean(se, axis=0)).tolist(),
                "bias_in_sd": (err.mean(axis=0) / sd).tolist(),
                "seconds": time.perf_counter() - t0,
            }
            if args.json:
                Path(args.json).write_text(json.dumps([*out, cell], indent=2))
            print(f"  m={m} trial {t + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                      cell["coverage"].items()), flush=True)
        out.append(cell)
    return 0


if __name__ == "__main__":
    sys.exit(main())

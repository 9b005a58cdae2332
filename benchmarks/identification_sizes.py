"""Arithmetic: from which m an SSP release is identified (issue 11; the identification test of
:func:`gpope.core.intervals.separated_from_singular`, the default of ``gpope evaluate``).

On PUBLIC simulated data of a domain (the coverage benchmark's :class:`_Setup`: chain, mountain
car on the spec's raw rewards, or the HIV demo spec's cached pool), with the statistics clip at
the ``--clip-quantile`` of the norms on an independent public cohort (the benchmark's and the
pipeline's rule), it computes the per-patient population matrix ``A-bar`` (mean of the clipped
``A_i`` over ``--n`` trajectories) and, per epsilon, the noise std ``s`` on the released summed A
(an ssp run: the whole budget, ``sigma / sqrt(1 - moments_share)`` x clip; ``--share 0.1``: the
release a gpope run's interval rests on), the test's threshold ``T = s sqrt(chi2_k^-1(level))``
(k = n, every feature supported at such m), and

* ``m_equal``: the m where the population's ``s_min(m A-bar)`` equals ``T`` (``T / s_min(A-bar)``);
* the probability that the test rejects "A is singular" for a release of ``m A-bar`` plus the
  mechanism's noise (``--draws`` draws; the data's own sampling variability of A left out, second
  order at these m), on a grid of m, and the smallest grid m where it reaches 0.5 and 0.95.

Post-processing of public simulations only; nothing here looks at an evaluation trial.

Usage: python benchmarks/identification_sizes.py --domain mountaincar --epsilons 1,10 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("chain", "mountaincar", "hiv"), default="mountaincar")
    parser.add_argument("--epsilons", default="1,10")
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--share", type=float, default=1.0,
                        help="share of (epsilon, delta) of the release (1: ssp run; 0.1: gpope's)")
    parser.add_argument("--moments-share", type=float, default=0.1)
    parser.add_argument("--clip-quantile", type=float, default=0.99)
    parser.add_argument("--public", type=int, default=1000, help="public cohort for the clip")
    parser.add_argument("--n", type=int, default=20000, help="trajectories for A-bar (not hiv)")
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--pool", type=int, default=6000)
    parser.add_argument("--pool-dir", default="/tmp/intervals/hivpool")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from intervals_coverage import _Setup
    from scipy.stats import chi2

    from gpope.core import ssp

    setup = _Setup(args.domain, args.seed, args.pool, args.pool_dir,
                   spec_scale=args.domain == "mountaincar")
    public = setup.public(args.public, args.seed)
    clip = float(np.quantile(np.linalg.norm(public, axis=1), args.clip_quantile))
    n = ssp.vector_features(public.shape[1])
    vec = setup.pool if args.domain == "hiv" else setup.data(args.n, np.random.default_rng([args.seed, 5]))
    A_bar = ssp.split_vector(ssp.clip_statistics(vec, clip).mean(axis=0), n)[0]
    s_min = float(np.linalg.svd(A_bar, compute_uv=False)[-1])
    q = float(np.sqrt(chi2.ppf(args.level, n)))
    rng = np.random.default_rng([args.seed, 9])
    out = {"domain": args.domain, "n_features": n, "clip": clip, "clip_quantile": args.clip_quantile,
           "trajectories_for_A_bar": int(vec.shape[0]), "s_min_A_bar_per_patient": s_min,
           "share": args.share, "moments_share": args.moments_share, "delta": args.delta,
           "level": args.level, "b_factor": setup.b_factor, "cells": []}
    print(f"{args.domain}: n = {n}, clip {clip:.4g} (public quantile {args.clip_quantile}), "
          f"s_min(A-bar) per patient {s_min:.4g} from {vec.shape[0]} trajectories", flush=True)
    for eps in (float(e) for e in args.epsilons.split(",")):
        sigma = ssp.ssp_sigma(m=1000, epsilon=eps * args.share, delta=args.delta * args.share)
        s = ssp.split_sigma(sigma, args.moments_share)[0] * clip
        T = s * q
        m_equal = T / s_min if s_min > 0 else float("inf")
        grid = sorted({round(m_equal * f) for f in (0.25, 0.5, 1, 1.5, 2, 3, 4, 8)
                       if np.isfinite(m_equal) and m_equal * f >= 1})
        probs = []
        for m in grid:
            A = m * A_bar
            rej = [float(np.linalg.svd(A + s * rng.standard_normal((n, n)), compute_uv=False)[-1]) > T
                   for _ in range(args.draws)]
            probs.append(float(np.mean(rej)))
        first = {p: next((m for m, pr in zip(grid, probs, strict=True) if pr >= p), None)
                 for p in (0.5, 0.95)}
        cell = {"epsilon": eps, "sigma_sums": s / clip, "noise_std_on_summed_A": s, "threshold": T,
                "threshold_over_s": q, "m_equal": m_equal, "grid_m": grid,
                "rejection_probability": probs, "first_grid_m_with_probability_0.5": first[0.5],
                "first_grid_m_with_probability_0.95": first[0.95]}
        out["cells"].append(cell)
        print(f"  eps {eps:g} (share {args.share:g}): noise std on the summed A {s:.4g}, threshold "
              f"{T:.4g} = {q:.3g} s; s_min(m A-bar) = threshold at m = {m_equal:.4g}; P(reject) "
              + ", ".join(f"m={m}: {p:.2f}" for m, p in zip(grid, probs, strict=True)), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

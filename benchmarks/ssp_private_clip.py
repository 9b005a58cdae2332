"""Which private clip quantile should ``gpope evaluate --estimator ssp`` take on own data?

On generated MDPs (``random_mdp/<k>``, values in [0, 1] known exactly) at m trajectories and
epsilon 1, the plain SSP release with its clip released privately (one noisy histogram at the
default's 5% quantile share, :func:`gpope.core.estimators.ssp.private_clip`'s
arithmetic in memory) at the quantiles 0.9 and 0.99, beside the tuning-free default and the
non-private LSTD. Prints the median max abs value error at the reference states per estimator.

    .venv/bin/python benchmarks/ssp_private_clip.py --datasets 10 --out docs/results/ssp_private_clip.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from own_data_core import dataset, lstd_error


def errors(name: str, m: int, seed: int, draws: int, epsilon: float, delta: float) -> dict:
    """Max abs value errors of each estimator on one generated data set (``draws`` noise draws)."""
    from gpope.config import load_config
    from gpope.core.intervals import ssp_values
    from gpope.core.ssp import clip_statistics, release_noisy_statistics, ssp_sigma
    from gpope.core.untuned.release import (
        _private_quantile,
        plan_untuned,
        quantile_grid,
        release_untuned_rows,
        value_range,
    )

    spec, truth, vec = dataset(name, m, seed)
    st = load_config().evaluation.untuned  # the rules gpope evaluate runs with (conf)
    lo, hi = value_range(spec)
    idx = np.arange(m)

    def aggregate(kernel, width):
        return kernel(idx, vec)[0]

    s_q = ssp_sigma(m=m, epsilon=epsilon * st.quantile_share, delta=delta * st.quantile_share)
    rest = 1.0 - st.quantile_share
    s_s = ssp_sigma(m=m, epsilon=epsilon * rest, delta=delta * rest)
    out: dict[str, list[float]] = {"ssp q0.9": [], "ssp q0.99": [], "untuned": []}
    for d in range(draws):
        rng = np.random.default_rng([seed, d])
        for q in (0.9, 0.99):
            c = _private_quantile(aggregate, quantile_grid(spec, st), lambda r: r, q, m=m,
                                  sigma=s_q, rng=rng)
            noisy = release_noisy_statistics(clip_statistics(vec, c).sum(axis=0)[None, :],
                                             n=spec.n_features, m=m, sigma=s_s, clip=c, rng=rng)
            theta, _ = ssp_values(noisy, lambda t: t, regularize=False)
            v = np.clip(spec.reference_values(theta), lo, hi)
            out[f"ssp q{q:g}"].append(float(np.max(np.abs(v - truth))))
        sig = plan_untuned(m=m, epsilon=epsilon, delta=delta, settings=st)
        rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1, settings=st, rng=rng)
        out["untuned"].append(float(np.max(np.abs(rel.interval.value - truth))))
    out["lstd (not private)"] = [lstd_error(spec, truth, vec)]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", type=int, default=10)
    p.add_argument("--m", type=int, default=20_000)
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    per = {}
    for k in range(1, a.datasets + 1):
        per[f"random_mdp/{k}"] = errors(f"random_mdp/{k}", a.m, k, a.draws, a.epsilon, a.delta)
    names = list(next(iter(per.values())))
    medians = {n: float(np.median([x for e in per.values() for x in e[n]])) for n in names}
    print(f"m {a.m}, epsilon {a.epsilon:g}, {a.datasets} data sets x {a.draws} draws: "
          "median max abs value error")
    for n in names:
        print(f"  {n:20s} {medians[n]:.4f}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"m": a.m, "epsilon": a.epsilon, "delta": a.delta, "draws": a.draws,
                       "median_max_abs_error": medians, "per_dataset": per}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What an honest neighbouring relation costs the tuning-free default, measured in the core.

A run charged under add/remove-one adjacency may not release the exact m (m itself tells the
two neighbours apart); with the exact m public, what holds is replace-one. Two ways to make
the charged relation true, measured on generated MDPs (the data sets of
``benchmarks/own_data_core.py``, the default's in-memory release at the pipeline's share):

- **replace-one** (``replace_one``): keep m public and calibrate the run for replace-one
  adjacency. Each release's sensitivity grows from 1 to ``r_j`` (2 for a clipped sum: one
  patient's vector replaced by its opposite; sqrt 2 for a histogram: one count down, another
  up), so at the same shares the run's multiplier grows by ``k = sqrt(sum_j w_j r_j^2)``.
- **noisy m** (``noisy_m``): release ``m~ = m + N(0, (sigma / sqrt(w))^2)`` (sensitivity 1)
  at share ``w`` of the run's Gaussian privacy loss and use ``m~`` wherever m enters (here the
  quantile targets); the estimator's share shrinks by ``w``. ``m_rel_error`` is
  ``|m~ - m| / m``, the relative error every mean over patients (the policy value J) inherits.

``exact_m`` is the release as charged before the relation was named (add/remove with the exact
m public: NOT a valid guarantee; the reference the two are compared with).

    .venv/bin/python benchmarks/neighbours_core.py --datasets 4 --draws 5 --m 2000,20000 \
        --out docs/results/neighbours_core.json
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np


def replace_one_factor(quantile_share: float) -> float:
    """k = sqrt(sum_j w_j r_j^2): the default's two histograms (share ``quantile_share`` each,
    r = sqrt 2) and its sums (the rest, r = 2)."""
    q = float(quantile_share)
    return math.sqrt(2.0 * q * 2.0 + (1.0 - 2.0 * q) * 4.0)


def main(argv=None) -> int:
    from own_data_core import dataset

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", type=int, default=4, help="data sets per feature kind")
    p.add_argument("--first-seed", type=int, default=7100)
    p.add_argument("--m", default="2000,20000")
    p.add_argument("--draws", type=int, default=5, help="noise draws per data set")
    p.add_argument("--epsilons", default="1,10")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--count-shares", default="0.01,0.05",
                   help="shares w of the run's privacy loss given to the noisy m")
    p.add_argument("--kinds", default="random_mdp,random_mdp_linear")
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    from gpope.core.evaluation.settings import RunSettings
    from gpope.core.ssp import ssp_sigma
    from gpope.core.untuned.release import UntunedSettings, release_untuned, split_untuned

    settings = UntunedSettings()
    est_share = 1.0 - RunSettings().policy_value_share
    k = replace_one_factor(settings.quantile_share)
    ws = [float(w) for w in a.count_shares.split(",")]
    variants = [("exact_m", None), ("replace_one", None)] + [(f"noisy_m w={w:g}", w) for w in ws]
    records = []
    t0 = time.time()
    for m in (int(x) for x in a.m.split(",")):
        for kind in a.kinds.split(","):
            for i in range(a.datasets):
                seed = a.first_seed + i
                name = f"{kind}/{seed}"
                spec, truth, vec = dataset(name, m, seed=seed)
                idx = np.arange(vec.shape[0])

                def aggregate(kernel, width, vec=vec, idx=idx):
                    return kernel(idx, vec)[0]

                for eps in (float(e) for e in a.epsilons.split(",")):
                    total = float(ssp_sigma(m=m, epsilon=eps, delta=a.delta))
                    for (label, w), draw in ((v, d) for v in variants for d in range(a.draws)):
                        # the same release noise for every variant (common random numbers);
                        # the noisy m from its own stream
                        ss = np.random.SeedSequence([seed, m, int(eps * 1000), draw])
                        rng, count_rng = (np.random.default_rng(s) for s in ss.spawn(2))
                        m_used, m_err = m, 0.0
                        if label == "exact_m":
                            sig = split_untuned(total / math.sqrt(est_share), settings)
                        elif label == "replace_one":
                            sig = split_untuned(k * total / math.sqrt(est_share), settings)
                        else:
                            sig = split_untuned(total / math.sqrt(est_share - w), settings)
                            noisy = m + count_rng.normal(0.0, total / math.sqrt(w))
                            m_used = max(1, round(noisy))
                            m_err = abs(noisy - m) / m
                        rel = release_untuned(aggregate, spec, m=m_used, sigmas=sig,
                                              moments_share=0.1, settings=settings, rng=rng)
                        iv = rel.interval
                        finite = bool(np.all(np.isfinite(iv.lower) & np.isfinite(iv.upper)))
                        records.append({
                            "dataset": name, "draw": draw, "m": m, "epsilon": eps, "variant": label,
                            "sigma": sig.total, "m_rel_error": m_err,
                            "error": float(np.max(np.abs(iv.value - truth))),
                            "width": float(np.max(iv.upper - iv.lower)), "finite": finite,
                            "covered": bool(np.all((iv.lower <= truth) & (truth <= iv.upper)))})
                print(f"m={m} {name} ({time.time() - t0:.0f} s)", flush=True)
    print(f"\nmedian over data sets; replace-one multiplier factor k = {k:.3f}")
    print(f"{'m':>6} {'eps':>4} {'variant':>16} {'sigma':>7} {'error':>7} {'width':>7} "
          f"{'finite':>6} {'coverage':>8} {'m~ err':>7}")
    summary = []
    for m in (int(x) for x in a.m.split(",")):
        for eps in (float(e) for e in a.epsilons.split(",")):
            for label, _ in variants:
                rs = [r for r in records
                      if (r["m"], r["epsilon"], r["variant"]) == (m, eps, label)]
                fin = [r["width"] for r in rs if r["finite"]]
                row = {"m": m, "epsilon": eps, "variant": label,
                       "sigma": float(np.median([r["sigma"] for r in rs])),
                       "median_error": float(np.median([r["error"] for r in rs])),
                       "median_finite_width": float(np.median(fin)) if fin else float("nan"),
                       "finite": float(np.mean([r["finite"] for r in rs])),
                       "coverage": float(np.mean([r["covered"] for r in rs])),
                       "median_m_rel_error": float(np.median([r["m_rel_error"] for r in rs]))}
                summary.append(row)
                print(f"{m:>6} {eps:>4g} {label:>16} {row['sigma']:>7.2f} "
                      f"{row['median_error']:>7.4f} {row['median_finite_width']:>7.3f} "
                      f"{row['finite']:>6.2f} {row['coverage']:>8.2f} "
                      f"{row['median_m_rel_error']:>7.4f}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"args": vars(a), "replace_one_factor": k, "summary": summary,
                       "records": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

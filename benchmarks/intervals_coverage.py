"""Evidence: empirical coverage and width of the SSP grouped-jackknife intervals (issue 11).

Each trial simulates a FRESH data set with the core experiments harness (chain:
:class:`gpope.core.experiments.chain.ChainProblem`; mountain car off-policy and HIV: the
continuous harness's domains), computes every trajectory's statistics, clips them jointly at a
public bound (the 0.99 quantile of the norms on an independent public cohort), sums them in K = 10
random groups, adds the calibrated Gaussian noise (one release at (epsilon, delta), add/remove),
solves (AdaSSP-style) and forms the nominal-95% grouped-jackknife intervals
(:func:`gpope.core.intervals.jackknife_interval`). Coverage is measured against the estimand:

* chain: the values at the spec's reference states s0, s20, s38 (the population fixed point of the
  tabular features = the exact values, closed form, which is also the Monte Carlo truth);
* mountain car (off-policy, Fourier features) and HIV: every coordinate of theta against the
  population fixed point theta* = A^-1 b of the harness's large-sample truth statistics.

Usage: nice -n 10 python benchmarks/intervals_coverage.py --domain chain --sizes 10000 \
          --epsilons 1 --trials 100 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def _vectors(transitions, features, rho, gamma, length_scale, block=1024):
    from gpope.core.ssp import statistics_vectors, transition_blocks
    from gpope.core.statistics import statistics_from_transitions

    out = []
    for idx, sub in transition_blocks(transitions, block):
        r = (statistics_from_transitions(sub, features, rho[idx_rows(transitions, idx)], gamma=gamma,
                                         length_scale=length_scale, representation="dense")
             .to_rows())
        out.append(statistics_vectors(r["A"], r["b"], r["C"]))
    return np.concatenate(out)


def idx_rows(transitions, idx):
    """Row slice of the trajectories idx (consecutive) in a (traj, t)-sorted batch."""
    offsets = np.concatenate([[0], np.cumsum(transitions.lengths)])
    return slice(int(offsets[idx[0]]), int(offsets[idx[-1] + 1]))


class _Setup:
    def __init__(self, domain: str, seed: int):
        self.domain = domain
        if domain == "chain":
            from gpope.core.envs import chain as ch

            self.cfg = ch.ChainConfig()
            self.features = ch.feature_map(self.cfg)
            self.gamma, self.L = self.cfg.gamma, 200.0
            states = np.array([0, 20, 38])
            self.estimand = ch.exact_values(self.cfg)[states]
            self.transform = lambda th: th[states]
            self.names = ["V(s0)", "V(s20)", "V(s38)"]
        else:
            from gpope.core.experiments.continuous import HIVSettings, MountainCarSettings, _Domain

            s = MountainCarSettings() if domain == "mountaincar" else HIVSettings()
            self.dom = _Domain(domain, "off" if domain == "mountaincar" else "main", s)
            self.features, self.gamma, self.L = self.dom.features, s.gamma, 200.0
            A, b, _ = self.dom.truth(seed)
            self.estimand = np.linalg.lstsq(A, b, rcond=None)[0]
            self.transform = lambda th: th
            self.names = [f"theta[{i}]" for i in range(len(self.estimand))]

    def data(self, m: int, rng: np.random.Generator):
        if self.domain == "chain":
            from gpope.core.envs import chain as ch

            tr = ch.generate(m, rng, self.cfg)
            rho = np.ones(tr.n_transitions)
        else:
            tr = self.dom.generate(m, rng)
            rho = self.dom.rho(tr)
        return _vectors(tr, self.features, rho, self.gamma, self.L)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("chain", "mountaincar", "hiv"), default="chain")
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--epsilons", default="1")
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--groups", type=int, default=10)
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-regularize", action="store_true", help="lambda = 0 (plain LSTD solve)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    from gpope.core import ssp
    from gpope.core.intervals import jackknife_interval

    setup = _Setup(args.domain, args.seed)
    public = setup.data(1000, np.random.default_rng([args.seed, 99]))
    clip = float(np.quantile(np.linalg.norm(public, axis=1), 0.99))
    n = round((-1 + np.sqrt(1 + 8 * public.shape[1])) / 4)
    cells = []
    for m in (int(float(x)) for x in args.sizes.split(",")):
        for eps in (float(x) for x in args.epsilons.split(",")):
            sigma = ssp.ssp_sigma(m=m, epsilon=eps, delta=args.delta)
            cov, width, err, lb = [], [], [], []
            t0 = time.perf_counter()
            for t in range(args.trials):
                rng = np.random.default_rng([args.seed, m, int(eps * 1000), t])
                vec = setup.data(m, rng)
                key = int(rng.integers(0, 2**62))
                sums = ssp.group_sums(ssp.clip_statistics(vec, clip),
                                      ssp.assign_groups(np.arange(m), key, args.groups), args.groups)
                noisy = ssp.release_noisy_statistics(sums, n=n, m=m, sigma=sigma, clip=clip, rng=rng)
                _, iv = jackknife_interval(noisy, setup.transform, level=args.level,
                                           regularize=not args.no_regularize)
                e = setup.estimand
                cov.append((iv.lower <= e) & (e <= iv.upper))
                lb.append(iv.lower_bound <= e)
                width.append(iv.upper - iv.lower)
                err.append(iv.value - e)
                print(f"  trial {t + 1}: covered {np.mean(cov[-1]):.2f}, running coverage "
                      f"{np.mean(cov):.3f}, width {np.mean(width[-1]):.4g}", flush=True)
            cov, width, err, lb = map(np.array, (cov, width, err, lb))
            cell = {"domain": args.domain, "m": m, "epsilon": eps, "delta": args.delta,
                    "trials": args.trials, "groups": args.groups, "regularize": not args.no_regularize, "clip": clip, "sigma": sigma,
                    "coverage": float(cov.mean()), "coverage_per_quantity": cov.mean(axis=0).tolist(),
                    "lower_bound_coverage": float(lb.mean()), "mean_width": float(width.mean()),
                    "rms_error": float(np.sqrt((err ** 2).mean())),
                    "quantities": setup.names, "seconds": time.perf_counter() - t0}
            cells.append(cell)
            print(f"{args.domain} m={m} eps={eps:g}: coverage {cell['coverage']:.3f} (one-sided "
                  f"{cell['lower_bound_coverage']:.3f}), mean width {cell['mean_width']:.4g}, RMS error "
                  f"{cell['rms_error']:.4g}, {args.trials} trials in {cell['seconds']:.0f} s", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

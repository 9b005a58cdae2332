"""Evidence: empirical coverage and width of the SSP parametric-bootstrap intervals (issue 11).

Each trial simulates a FRESH data set with the core experiments harness (chain:
:mod:`gpope.core.envs.chain`; mountain car off-policy and HIV: the continuous harness's domains),
computes every trajectory's statistics, clips them jointly at a public bound (the 0.99 quantile of
the norms on an independent public cohort), releases their total with Gaussian noise at
``sigma / sqrt(1 - moments_share)``, solves (unregularised LSTD on the supported features),
releases the second moments of the residuals at that estimate (each clipped at the 0.99 quantile
of the public cohort's residual norms) with noise at ``sigma / sqrt(moments_share)`` (together:
the Gaussian mechanism at ``sigma`` calibrated to (epsilon, delta), add/remove) and forms the
nominal-95% parametric-bootstrap interval (:func:`gpope.core.intervals.bootstrap_interval`),
exactly as ``gpope evaluate`` does. With ``--shares 0.1`` the release gets only the share 0.1 of
(epsilon, delta): that is the interval a gpope run anchors its released value to (its interval is
the hull of this one and its value, so covers at least as often). Coverage is measured against
the estimand:

* chain: the values at s0, s20, s38 (the population fixed point of the tabular features = the
  exact values, closed form, which is also the Monte Carlo truth);
* mountain car (off-policy, Fourier features) and HIV: every coordinate of theta against the
  population fixed point theta* = A^-1 b of the harness's large-sample truth statistics;

and (``coverage_mc``) against a Monte Carlo estimate (``--truth`` fresh trajectories) of the
fixed point of the CLIPPED population statistics, which is what a clipped release estimates.

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


def _sorted(transitions, rho):
    """(transitions sorted by (traj_index, t) with dense trajectory numbers, rho in that order):
    the blocks below slice consecutive trajectories (a harness may interleave them)."""
    from gpope.core.transitions import Transitions

    tr = transitions
    order = np.lexsort((tr.t, tr.traj_index))
    _, dense = np.unique(tr.traj_index[order], return_inverse=True)
    out = Transitions(
        traj_index=dense.astype(tr.traj_index.dtype), t=tr.t[order], state=tr.state[order],
        action=tr.action[order], reward=tr.reward[order], next_state=tr.next_state[order],
        terminal=tr.terminal[order], truncated=tr.truncated[order],
        behavior_prob=tr.behavior_prob[order], n_trajectories=int(dense.max()) + 1,
    )
    return out, np.asarray(rho)[order]


def _vectors(transitions, features, rho, gamma, length_scale, block=1024):
    from gpope.core.ssp import statistics_vectors, transition_blocks
    from gpope.core.statistics import statistics_from_transitions

    transitions, rho = _sorted(transitions, rho)
    offsets = np.concatenate([[0], np.cumsum(transitions.lengths)])
    out = []
    for idx, sub in transition_blocks(transitions, block):
        rows = slice(int(offsets[idx[0]]), int(offsets[idx[-1] + 1]))
        r = (statistics_from_transitions(sub, features, rho[rows], gamma=gamma,
                                         length_scale=length_scale, representation="dense")
             .to_rows())
        out.append(statistics_vectors(r["A"], r["b"], r["C"]))
    return np.concatenate(out)


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

    def clipped_estimand(self, clip: float, m: int, seed: int) -> np.ndarray:
        """Monte Carlo estimate of the released quantities at the fixed point of the CLIPPED
        population statistics (what a clipped release estimates), from m fresh trajectories."""
        from gpope.core import ssp

        vec = ssp.clip_statistics(self.data(m, np.random.default_rng([seed, 7777])), clip)
        n = round((-1 + np.sqrt(1 + 8 * vec.shape[1])) / 4)
        A, b, _ = ssp.split_vector(vec.mean(axis=0), n)
        return self.transform(np.linalg.lstsq(A, b, rcond=None)[0])


def markdown_table(cells: list[dict]) -> str:
    """The RESULTS.md table of result cells (numbers exactly as measured)."""
    rows = ["| domain | quantities | m | epsilon | share | trials | coverage (estimand) | coverage "
            "(MC clipped fixed point) | one-sided | mean width | median width | median abs error |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        q = c["quantities"]
        what = ", ".join(q) if len(q) <= 3 else f"{len(q)} theta coordinates"
        rows.append(f"| {c['domain']} | {what} | {c['m']} | {c['epsilon']:g} | {c['share']:g} | "
                    f"{c['trials']} | {c['coverage']:.3f} | {c['coverage_mc']:.3f} | "
                    f"{c['lower_bound_coverage']:.3f} | {c['mean_width']:.4g} | {c['median_width']:.4g} | "
                    f"{c['median_abs_error']:.4g} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("chain", "mountaincar", "hiv"), default="chain")
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--epsilons", default="1")
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--moments-share", type=float, default=0.1)
    parser.add_argument("--shares", default="1",
                        help="shares of (epsilon, delta) for the release, comma-separated (1: an ssp "
                        "run's; 0.1: the release a gpope run's interval rests on)")
    parser.add_argument("--draws", type=int, default=None, help="bootstrap draws (default: the pipeline's)")
    parser.add_argument("--public", type=int, default=1000, help="public cohort size (clip bounds)")
    parser.add_argument("--truth", type=int, default=20000,
                        help="trajectories of the Monte Carlo estimate of the clipped fixed point")
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print the markdown table of saved --json results and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table([c for f in args.table for c in json.loads(Path(f).read_text())]))
        return 0

    from gpope.core import ssp
    from gpope.core.intervals import BOOTSTRAP_DRAWS, bootstrap_interval, ssp_values

    draws = args.draws or BOOTSTRAP_DRAWS
    setup = _Setup(args.domain, args.seed)
    public = setup.data(args.public, np.random.default_rng([args.seed, 99]))
    clip = float(np.quantile(np.linalg.norm(public, axis=1), 0.99))
    public_c = ssp.clip_statistics(public, clip)
    n = round((-1 + np.sqrt(1 + 8 * public.shape[1])) / 4)
    estimand = setup.estimand
    clipped_estimand = setup.clipped_estimand(clip, args.truth, args.seed)
    cells = []
    epsilons = [(float(e), float(sh)) for e in args.epsilons.split(",") for sh in args.shares.split(",")]
    for m in (int(float(x)) for x in args.sizes.split(",")):
        # fresh data per trial, shared by the epsilon cells of that trial (independent noise each)
        acc = {eps: {k: [] for k in ("cov", "cov_mc", "width", "err", "lb")} for eps in epsilons}
        t0 = time.perf_counter()
        for t in range(args.trials):
            rng_data = np.random.default_rng([args.seed, m, t])
            vec = setup.data(m, rng_data)
            total = ssp.clip_statistics(vec, clip).sum(axis=0, keepdims=True)
            for eps, share in epsilons:
                rng = np.random.default_rng([args.seed, m, int(eps * 1000), int(share * 1000), t])
                sigma = ssp.ssp_sigma(m=m, epsilon=eps * share, delta=args.delta * share)
                s1, s2 = ssp.split_sigma(sigma, args.moments_share)
                noisy = ssp.release_noisy_statistics(total, n=n, m=m, sigma=s1, clip=clip, rng=rng)
                theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
                norms = np.linalg.norm(ssp.residuals(public_c, theta, n), axis=1)
                bound = min(ssp.residual_bound(theta, clip), float(np.quantile(norms, 0.99)))
                moments = ssp.release_moments(
                    ssp.clipped_moment_sum(vec, theta, n=n, clip=clip, bound=bound), n=n,
                    theta=theta, sigma=s2, bound=bound, rng=rng)
                _, iv = bootstrap_interval(noisy, moments, setup.transform, rng=rng, level=args.level,
                                           draws=draws, regularize=False)
                a = acc[(eps, share)]
                a["cov"].append((iv.lower <= estimand) & (estimand <= iv.upper))
                a["cov_mc"].append((iv.lower <= clipped_estimand) & (clipped_estimand <= iv.upper))
                a["lb"].append(iv.lower_bound <= estimand)
                a["width"].append(iv.upper - iv.lower)
                a["err"].append(iv.value - estimand)
            print(f"  trial {t + 1}: running coverage "
                  + ", ".join(f"eps {e:g} share {sh:g}: {np.mean(acc[(e, sh)]['cov']):.3f}"
                              for e, sh in epsilons), flush=True)
        seconds = time.perf_counter() - t0
        for eps, share in epsilons:
            cov, cov_mc, width, err, lb = (np.array(acc[(eps, share)][k])
                                           for k in ("cov", "cov_mc", "width", "err", "lb"))
            sigma = ssp.ssp_sigma(m=m, epsilon=eps * share, delta=args.delta * share)
            cell = {"domain": args.domain, "m": m, "epsilon": eps, "delta": args.delta,
                    "share": share, "moments_share": args.moments_share, "draws": draws,
                    "trials": args.trials, "clip": clip, "sigma": sigma,
                    "coverage": float(cov.mean()), "coverage_mc": float(cov_mc.mean()),
                    "coverage_per_quantity": cov.mean(axis=0).tolist(),
                    "lower_bound_coverage": float(lb.mean()), "mean_width": float(width.mean()),
                    "median_width": float(np.median(width)),
                    "rms_error": float(np.sqrt((err ** 2).mean())),
                    "median_abs_error": float(np.median(np.abs(err))),
                    "quantities": setup.names, "seconds_all_cells_of_m": seconds}
            cells.append(cell)
            print(f"{args.domain} m={m} eps={eps:g} share={share:g}: coverage "
                  f"{cell['coverage']:.3f} (vs the Monte Carlo clipped fixed point {cell['coverage_mc']:.3f}; "
                  f"one-sided {cell['lower_bound_coverage']:.3f}), mean width {cell['mean_width']:.4g} "
                  f"(median {cell['median_width']:.4g}), RMS error {cell['rms_error']:.4g}, median "
                  f"|error| {cell['median_abs_error']:.4g}, {args.trials} trials", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

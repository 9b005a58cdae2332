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
* mountain car (off-policy, Fourier features): every coordinate of theta against the
  population fixed point theta* = A^-1 b of the harness's large-sample truth statistics;
* HIV: the demo's spec (conf/specs/hiv_demo.yaml: 13 Fourier features, gamma 0.9, the demo's 40
  decisions per patient). The simulator costs about 0.06-0.1 s per patient, so ONE pool of
  ``--pool`` patients is simulated once (cached under ``--pool-dir``) and every trial's cohort is
  drawn iid WITH REPLACEMENT from it: the population is the pool, the estimand its fixed point
  (the reference values and every theta coordinate; the clipped one is computed exactly). The
  public cohort for the clip bounds is simulated separately (its own seed);

and (``coverage_mc``) against a Monte Carlo estimate (``--truth`` fresh trajectories) of the
fixed point of the CLIPPED population statistics, which is what a clipped release estimates.

``--estimators gpope`` (chain and HIV): per trial, ``--gpope-runs`` GPOPE runs (vectorised,
independent noise) at the operating point ``gpope evaluate`` takes from the spec for (m, epsilon
(1 - share)), each with its own noisy-statistics release at ``--statistics-share`` of (epsilon,
delta) and the interval ``gpope evaluate`` releases: the SSP interval of that release widened to
hold the GPOPE value (:func:`gpope.core.intervals.anchored_interval`).

Usage: nice -n 10 python benchmarks/intervals_coverage.py --domain chain --sizes 10000 \
          --epsilons 1 --trials 100 [--estimators ssp,gpope] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

def _sorted(transitions, rho):
    """(transitions sorted by (traj_index, t) with dense trajectory numbers, rho in that order):
    the blocks below slice consecutive trajectories (a harness may interleave them)."""
    from gpope.core.trajectories.transitions import Transitions

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


def transition_blocks(transitions, block: int = 2048):  # -> Iterator[tuple[np.ndarray, Transitions]]
    """Consecutive trajectory blocks of a (traj, t)-sorted :class:`Transitions`:
    ``(traj_index (k,), block Transitions re-indexed 0..k-1)``; memory O(block rows)."""
    from gpope.core.trajectories.transitions import Transitions

    tr = transitions
    offsets = np.concatenate([[0], np.cumsum(tr.lengths)])
    for lo in range(0, tr.n_trajectories, block):
        hi = min(lo + block, tr.n_trajectories)
        rows = slice(int(offsets[lo]), int(offsets[hi]))
        sub = Transitions(
            traj_index=tr.traj_index[rows] - lo, t=tr.t[rows], state=tr.state[rows],
            action=tr.action[rows], reward=tr.reward[rows], next_state=tr.next_state[rows],
            terminal=tr.terminal[rows], truncated=tr.truncated[rows],
            behavior_prob=tr.behavior_prob[rows], n_trajectories=hi - lo,
        )
        yield np.arange(lo, hi, dtype=np.int64), sub


def _vectors(transitions, features, rho, gamma, length_scale, block=1024):
    from gpope.core.ssp import statistics_vectors
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


def _hiv_pool(folder: Path, name: str, size: int, *, seed: int, chunk: int = 250) -> np.ndarray:
    """(size, 2n^2+n) statistics vectors of ``size`` HIV patients (the demo's spec, 40 decisions,
    ``gpope simulate``'s behaviour policy), simulated once in chunks of ``chunk`` patients
    (stream ``[seed, c]``) and cached as ``folder/name_ccc.npy``."""
    from gpope.core.envs.cohort import generate_episodes
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.shell.pipeline.jobargs import load_spec

    spec = load_spec(ROOT / "conf/specs/hiv_demo.yaml")
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for c in range(-(-size // chunk)):
        f = folder / f"{name}_{c:03d}.npy"
        if not f.exists():
            tr = generate_episodes("hiv", chunk, np.random.default_rng([seed, c]), n_steps=40)
            r = statistics_of_transitions(tr, spec).to_rows()
            np.save(f, statistics_vectors(r["A"], r["b"], r["C"]))
            print(f"  simulated {name} chunk {c} ({chunk} patients)", flush=True)
        parts.append(np.load(f))
    return np.concatenate(parts)[:size]


class _Setup:
    def __init__(self, domain: str, seed: int, pool: int = 6000, pool_dir: str = "/tmp/intervals/hivpool",
                 spec_scale: bool = False, mc_pool: int = 0):
        self.domain = domain
        self.pool_dir = pool_dir
        self.pool = None  # hiv, or mountain car with mc_pool: cohorts drawn from this pool
        self.b_factor = 1.0  # multiplies the b part of every statistics vector (and the estimand)
        # tabular features: the public value range, per-value identification as gpope evaluate does
        self.value_bounds = None
        if domain == "chain":
            from gpope.core.envs import chain as ch

            self.cfg = ch.ChainConfig()
            self.features = ch.feature_map(self.cfg)
            self.gamma, self.L = self.cfg.gamma, 200.0
            states = np.array([0, 20, 38])
            self.estimand = ch.exact_values(self.cfg)[states]
            self.transform = lambda th: th[states]
            self.names = ["V(s0)", "V(s20)", "V(s38)"]
            self.value_bounds = (0.0, 1.0 / (1.0 - self.gamma))  # rewards in [0, 1]
        elif domain == "mountaincar":
            from gpope.core.experiments.continuous import MountainCarSettings, _Domain

            s = MountainCarSettings()
            self.dom = _Domain(domain, "off", s)
            self.features, self.gamma, self.L = self.dom.features, s.gamma, 200.0
            A, b, _ = self.dom.truth(seed)
            if spec_scale:
                # conf/specs/mountaincar.yaml (what `gpope evaluate` reads) keeps the raw -1 rewards
                # (reward_scale 1); the harness multiplies them by 0.01. Same features, policies,
                # gamma and length scale, so the spec's statistics are the harness's with b / 0.01
                # (checked to 2e-16 on 50 episodes); GPOPE's tuned clip and step size are for them.
                self.b_factor = 1.0 / s.reward_scale
            self.estimand = np.linalg.lstsq(A, b * self.b_factor, rcond=None)[0]
            self.transform = lambda th: th
            self.names = [f"theta[{i}]" for i in range(len(self.estimand))]
            if mc_pool:  # like HIV: one simulated pool is the population (cached)
                from gpope.core import ssp

                f = Path(pool_dir) / f"mountaincar_pool_{mc_pool}_{seed}_{'spec' if spec_scale else 'harness'}.npy"
                if not f.exists():
                    f.parent.mkdir(parents=True, exist_ok=True)
                    np.save(f, self._simulate(mc_pool, np.random.default_rng([seed, 4242])))
                self.pool = np.load(f)
                n = self.features.n_features
                A, b, _ = ssp.split_vector(self.pool.mean(axis=0), n)
                self.estimand = np.linalg.lstsq(A, b, rcond=None)[0]
        else:  # hiv: the demo's spec on a cached pool (module docstring)
            from gpope.core import ssp
            from gpope.shell.pipeline.jobargs import load_spec

            self.spec = load_spec(ROOT / "conf/specs/hiv_demo.yaml")
            n = self.spec.n_features
            self.pool = _hiv_pool(Path(pool_dir), "pool", pool, seed=11)
            A, b, _ = ssp.split_vector(self.pool.mean(axis=0), n)
            spec = self.spec
            self.transform = lambda th: np.concatenate([spec.reference_values(th), th])
            self.estimand = self.transform(np.linalg.solve(A, b))
            self.names = [f"V({r})" for r in spec.reference_names] + [f"theta[{i}]" for i in range(n)]

    def public(self, m: int, seed: int) -> np.ndarray:
        """An independent public cohort's statistics vectors (clip bounds only)."""
        if self.domain == "hiv":
            return _hiv_pool(Path(self.pool_dir), "public", m, seed=77)
        return self._simulate(m, np.random.default_rng([seed, 99]))

    def data(self, m: int, rng: np.random.Generator):
        if self.pool is not None:  # iid with replacement from the pool
            return self.pool[rng.integers(0, len(self.pool), m)]
        return self._simulate(m, rng)

    def weighted(self, m: int, rng: np.random.Generator):
        """(rows, counts, expand): the trial's data set as distinct rows with their counts
        (counts None: every row once) and a function giving the m rows themselves. HIV: the
        pool and how often the m iid draws (the same ``rng.integers`` stream as :meth:`data`)
        picked each patient, so a cohort of 512,000 costs the pool's memory, not m rows'."""
        if self.pool is not None:
            idx = rng.integers(0, len(self.pool), m)
            return self.pool, np.bincount(idx, minlength=len(self.pool)), lambda: self.pool[idx]
        vec = self._simulate(m, rng)
        return vec, None, lambda: vec

    def _simulate(self, m: int, rng: np.random.Generator):
        if self.domain == "chain":
            from gpope.core.envs import chain as ch

            tr = ch.generate(m, rng, self.cfg)
            rho = np.ones(tr.n_transitions)
        else:
            tr = self.dom.generate(m, rng)
            rho = self.dom.rho(tr)
        vec = _vectors(tr, self.features, rho, self.gamma, self.L)
        if self.b_factor != 1.0:
            n = self.features.n_features
            vec[:, n * n:n * n + n] *= self.b_factor
        return vec

    def clipped_estimand(self, clip: float, m: int, seed: int) -> np.ndarray:
        """Monte Carlo estimate of the released quantities at the fixed point of the CLIPPED
        population statistics (what a clipped release estimates), from m fresh trajectories."""
        from gpope.core import ssp

        if self.pool is not None:  # the pool is the population: its clipped fixed point, exactly
            vec = ssp.clip_statistics(self.pool, clip)
            n = ssp.vector_features(vec.shape[1])
            A, b, _ = ssp.split_vector(vec.mean(axis=0), n)
            return self.transform(np.linalg.lstsq(A, b, rcond=None)[0])
        vec = ssp.clip_statistics(self.data(m, np.random.default_rng([seed, 7777])), clip)
        n = ssp.vector_features(vec.shape[1])
        A, b, _ = ssp.split_vector(vec.mean(axis=0), n)
        return self.transform(np.linalg.lstsq(A, b, rcond=None)[0])


def markdown_table(cells: list[dict]) -> str:
    """The RESULTS.md table of result cells (numbers exactly as measured)."""
    rows = ["| domain | estimator | quantities | m | epsilon | share | intervals per quantity | "
            "coverage (estimand) | coverage (MC clipped fixed point) | one-sided | unbounded | "
            "mean width (bounded) | median width | median abs error |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        q = c["quantities"]
        what = ", ".join(q) if len(q) <= 3 else f"{len(q)} quantities"
        # cells measured before the identification test existed have no "identification"
        ident = {"on": " (identification test)", "off": " (no identification test)"}.get(
            c.get("identification", ""), "")
        rows.append(f"| {c['domain']} | {c.get('estimator', 'ssp')}{ident} | {what} | {c['m']} | "
                    f"{c['epsilon']:g} | {c['share']:g} | {c.get('intervals_per_quantity', c['trials'])} | "
                    f"{c['coverage']:.3f} | {c['coverage_mc']:.3f} | {c['lower_bound_coverage']:.3f} | "
                    f"{c.get('unbounded', 0.0):.3f} | {c['mean_width']:.4g} | {c['median_width']:.4g} | "
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
    parser.add_argument("--clip-quantile", type=float, default=0.99,
                        help="quantile of the public norms for the statistics clip and the residual "
                        "bound (the pipeline's evaluation.ssp_clip_quantile, default 0.99)")
    parser.add_argument("--truth", type=int, default=20000,
                        help="trajectories of the Monte Carlo estimate of the clipped fixed point")
    parser.add_argument("--level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--estimators", default="ssp",
                        help="ssp and/or gpope (GPOPE at the spec's operating point; mountain car: the spec's raw rewards)")
    parser.add_argument("--gpope-runs", type=int, default=5,
                        help="GPOPE runs (independent noise, vectorised) per data set")
    parser.add_argument("--statistics-share", type=float, default=0.1,
                        help="a gpope run's share of (epsilon, delta) for the noisy statistics")
    parser.add_argument("--pool", type=int, default=6000, help="hiv: patients in the cached pool")
    parser.add_argument("--pool-dir", default="/tmp/intervals/hivpool", help="hiv: pool cache")
    parser.add_argument("--mc-pool", type=int, default=0,
                        help="mountain car: draw every cohort with replacement from ONE simulated "
                        "pool of this many trajectories (the population; cached in --pool-dir), "
                        "so large m is cheap; 0: fresh simulation per trial")
    parser.add_argument("--identification", choices=("on", "off", "both"), default="on",
                        help="the bootstrap's identification test (gpope.core.intervals."
                        "separated_from_singular): on (the pipeline's default, "
                        "evaluation.ssp_identification), off, or both (each on the same release "
                        "and bootstrap draws)")
    parser.add_argument("--mc-rewards", choices=("harness", "spec"), default=None,
                        help="mountain car: the harness's rewards (x 0.01) or the spec's raw ones "
                        "(what `gpope evaluate` uses); default spec with gpope, harness otherwise")
    parser.add_argument("--json", default=None, help="result cells (rewritten after every trial)")
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print the markdown table of saved --json results and exit")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table([c for f in args.table for c in json.loads(Path(f).read_text())]))
        return 0

    from gpope.core import ssp
    from gpope.core.intervals import BOOTSTRAP_DRAWS

    draws = args.draws or BOOTSTRAP_DRAWS
    estimators = args.estimators.split(",")
    # mountain car with gpope: the spec's statistics (raw rewards), which its tuned GPOPE point needs
    mc_rewards = args.mc_rewards or ("spec" if "gpope" in estimators else "harness")
    setup = _Setup(args.domain, args.seed, args.pool, args.pool_dir,
                   spec_scale=args.domain == "mountaincar" and mc_rewards == "spec",
                   mc_pool=args.mc_pool if args.domain == "mountaincar" else 0)
    idents = ["off", "on"] if args.identification == "both" else [args.identification]
    public = setup.public(args.public, args.seed)
    clip = float(np.quantile(np.linalg.norm(public, axis=1), args.clip_quantile))
    public_c = ssp.clip_statistics(public, clip)
    n = ssp.vector_features(public.shape[1])
    estimand = setup.estimand
    clipped_estimand = setup.clipped_estimand(clip, args.truth, args.seed)

    def release_interval(vec, total, m, eps, delta, rng, counts=None):
        """The pipeline's SSP release and its bootstrap interval (pooled sums, moments), per
        identification setting: {ident: Interval}, each from the same bootstrap draws (``rng``
        ends as after one interval, so a single setting reproduces the earlier streams)."""
        import copy

        from gpope.core.intervals import bootstrap_interval, ssp_values

        sigma = ssp.ssp_sigma(m=m, epsilon=eps, delta=delta)
        s1, s2 = ssp.split_sigma(sigma, args.moments_share)
        noisy = ssp.release_noisy_statistics(total, n=n, m=m, sigma=s1, clip=clip, rng=rng)
        theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
        norms = np.linalg.norm(ssp.residuals(public_c, theta, n), axis=1)
        bound = min(ssp.residual_bound(theta, clip), float(np.quantile(norms, args.clip_quantile)))
        moments = ssp.release_moments(
            ssp.clipped_moment_sum(vec, theta, n=n, clip=clip, bound=bound, counts=counts), n=n,
            theta=theta, sigma=s2, bound=bound, rng=rng)
        return {ident: bootstrap_interval(
                    noisy, moments, setup.transform, rng=rng if i == len(idents) - 1 else copy.deepcopy(rng),
                    level=args.level, draws=draws, regularize=False, identification=ident == "on",
                    value_bounds=setup.value_bounds)[1]
                for i, ident in enumerate(idents)}

    cells: list[dict] = []
    keys = [(est, float(e), float(sh)) for est in estimators for e in args.epsilons.split(",")
            for sh in (args.shares.split(",") if est == "ssp" else ["1"])]
    for m in (int(float(x)) for x in args.sizes.split(",")):
        # fresh data per trial, shared by the cells of that trial (independent noise each)
        acc = {(*k, i): {f: [] for f in ("cov", "cov_mc", "width", "err", "lb", "sep")} for k in keys
               for i in idents}
        t0 = time.perf_counter()
        done = [c for c in cells]

        def record(key, iv, acc=acc):
            a = acc[key]
            a["cov"].append((iv.lower <= estimand) & (estimand <= iv.upper))
            a["cov_mc"].append((iv.lower <= clipped_estimand) & (clipped_estimand <= iv.upper))
            a["lb"].append(iv.lower_bound <= estimand)
            a["width"].append(iv.upper - iv.lower)
            a["err"].append(iv.value - estimand)
            a["sep"].append(np.nan if iv.separation is None else iv.separation)

        for t in range(args.trials):
            rng_data = np.random.default_rng([args.seed, m, t])
            rows, counts, expand = setup.weighted(m, rng_data)
            clipped_rows = ssp.clip_statistics(rows, clip)
            total = (clipped_rows.sum(axis=0, keepdims=True) if counts is None
                     else (counts @ clipped_rows)[None, :])
            for key in keys:
                est, eps, share = key
                rng = np.random.default_rng([args.seed, m, int(eps * 1000), int(share * 1000), t,
                                             estimators.index(est)])
                if est == "ssp":
                    for ident, iv in release_interval(rows, total, m, eps * share,
                                                      args.delta * share, rng, counts).items():
                        record((*key, ident), iv)
                    continue
                from gpope.core.intervals import anchored_interval

                sh = args.statistics_share
                vec = expand()
                thetas = _gpope_thetas(setup, vec, m=m, n=n, epsilon=eps * (1 - sh),
                                       delta=args.delta * (1 - sh), runs=args.gpope_runs, rng=rng)
                for th in thetas:
                    for ident, ref in release_interval(rows, total, m, eps * sh, args.delta * sh,
                                                       rng, counts).items():
                        record((*key, ident), anchored_interval(setup.transform(th), ref))
            cells = done + [_cell(args, setup, key, acc[key], m=m, clip=clip, draws=draws,
                                  seconds=time.perf_counter() - t0, trials=t + 1,
                                  clipped=clipped_estimand) for key in acc]
            if args.json:
                Path(args.json).write_text(json.dumps(cells, indent=2))
            print(f"  trial {t + 1}: running coverage "
                  + ", ".join(f"{k[0]} eps {k[1]:g} share {k[2]:g} id {k[3]}: {np.mean(acc[k]['cov']):.3f}"
                              for k in acc), flush=True)
        for c in cells[len(done):]:
            print(f"{args.domain} {c['estimator']} m={m} eps={c['epsilon']:g} share={c['share']:g} "
                  f"identification {c['identification']}: "
                  f"coverage {c['coverage']:.3f} (vs the Monte Carlo clipped fixed point "
                  f"{c['coverage_mc']:.3f}; one-sided {c['lower_bound_coverage']:.3f}), mean width "
                  f"{c['mean_width']:.4g} (median {c['median_width']:.4g}), unbounded "
                  f"{c['unbounded']:.3f}, RMS error {c['rms_error']:.4g}, median |error| "
                  f"{c['median_abs_error']:.4g}, {c['intervals_per_quantity']} intervals per quantity",
                  flush=True)
    return 0


def _cell(args, setup, key, a, *, m, clip, draws, seconds, trials, clipped) -> dict:
    from gpope.core import ssp

    est, eps, share, ident = key
    cov, cov_mc, width, err, lb = (np.array(a[k]) for k in ("cov", "cov_mc", "width", "err", "lb"))
    finite = np.isfinite(width)
    sep = np.array(a["sep"], dtype=np.float64)
    sep = sep[np.isfinite(sep) | (sep == np.inf)]

    def median_bounded(w):  # median width of the bounded intervals (None: none bounded)
        w = w[np.isfinite(w)]
        return float(np.median(w)) if w.size else None
    sigma = ssp.ssp_sigma(m=m, epsilon=eps * share, delta=args.delta * share)
    return {"domain": args.domain, "estimator": est, "identification": ident, "seed": args.seed,
            "m": m, "epsilon": eps, "delta": args.delta,
            "share": share if est == "ssp" else args.statistics_share,
            "moments_share": args.moments_share, "clip_quantile": args.clip_quantile, "draws": draws, "trials": trials,
            "gpope_runs_per_trial": args.gpope_runs if est == "gpope" else None,
            "intervals_per_quantity": int(cov.shape[0]), "clip": clip, "sigma": sigma,
            "coverage": float(cov.mean()), "coverage_mc": float(cov_mc.mean()),
            "coverage_per_quantity": cov.mean(axis=0).tolist(),
            "lower_bound_coverage": float(lb.mean()),
            "unbounded": float(1.0 - finite.mean()),
            "mean_width": float(width[finite].mean()) if finite.any() else float("inf"),
            "median_width": float(np.median(width)),
            "median_width_bounded": median_bounded(width.ravel()),
            "median_width_bounded_per_quantity": [median_bounded(width[:, j])
                                                  for j in range(width.shape[1])],
            "unbounded_per_quantity": (1.0 - finite.mean(axis=0)).tolist(),
            "coverage_of_bounded": float(cov[finite].mean()) if finite.any() else None,
            "coverage_mc_of_bounded": float(cov_mc[finite].mean()) if finite.any() else None,
            # s_min(A~) / the identification test's threshold per release (> 1: identified)
            "separation_quantiles_0_10_50_90_100": (np.quantile(sep, [0, .1, .5, .9, 1]).tolist()
                                                    if sep.size else None),
            "identified_fraction": float((sep > 1.0).mean()) if sep.size else None,
            "median_width_per_quantity": np.median(width, axis=0).tolist(),
            "median_abs_error_per_quantity": np.median(np.abs(err), axis=0).tolist(),
            "rms_error": float(np.sqrt((err ** 2).mean())),
            "median_abs_error": float(np.median(np.abs(err))),
            "quantities": setup.names, "b_factor": setup.b_factor, "seconds_all_cells_of_m": seconds,
            "estimand": np.asarray(setup.estimand, dtype=float).tolist(),
            "clipped_estimand": np.asarray(clipped, dtype=float).tolist()}


def _gpope_thetas(setup, vec, *, m, n, epsilon, delta, runs, rng) -> np.ndarray:
    """(runs, n) released thetas of ``runs`` GPOPE runs (independent noise and batches,
    vectorised) on one data set, at the operating point ``gpope evaluate`` takes from the spec's
    ``evaluation:`` block for (m, epsilon) (poisson sampling, the block's budget and schedule)."""
    from gpope.core import ssp
    from gpope.core.accounting import calibrate_sigma
    from gpope.core.gpope.operating import resolve_budget, resolve_step_offset
    from gpope.core.gpope.solver import GPOPEConfig, run_gpope_trials
    from gpope.core.statistics import TrajectoryStats
    from gpope.shell.pipeline.jobargs import load_spec

    spec = load_spec(ROOT / {"chain": "conf/specs/chain.yaml", "mountaincar": "conf/specs/mountaincar.yaml",
                             "hiv": "conf/specs/hiv_demo.yaml"}[setup.domain])
    s, _ = spec.evaluation.select(m, epsilon)
    N, q = resolve_budget(m=m, sampling="poisson", passes=s.get("passes"), batch_size=None,
                          iterations=s["iterations"], batch_rate=s.get("batch_rate"))
    sigma = calibrate_sigma(m=m, iterations=N, epsilon=epsilon, delta=delta, accountant="auto",
                            sampling="poisson", batch_rate=q)
    cfg = GPOPEConfig(
        iterations=N, step_size=s["step_size"], clip=s["clip"], noise_multiplier=sigma, delta=delta,
        sampling="poisson", batch_rate=q, step_schedule=s["step_schedule"],
        step_offset=resolve_step_offset(iterations=N, step_offset=None,
                                        step_offset_fraction=s.get("step_offset_fraction")),
        averaging=s["averaging"], tail_fraction=s["tail_fraction"])
    A, b, C = ssp.split_vector(vec, n)
    stats = TrajectoryStats.from_dense(A, b, C)
    res = run_gpope_trials(stats, cfg, rng, runs)
    return res.theta_avg if res.theta_avg is not None else res.theta


if __name__ == "__main__":
    sys.exit(main())

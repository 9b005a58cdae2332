"""The utility frontier of GPOPE (and SSP) at the issue-10 operating point, tuned on public data only.

Run (one domain per process; results are written trial by trial, so a bounded run keeps what it
finished)::

    .venv/bin/python benchmarks/frontier.py chain --spec conf/specs/chain.yaml \
        --sizes 100000 --public-size 10000 --trials 20 --methods gpope,ssp
    .venv/bin/python benchmarks/frontier.py mountaincar-on --sizes 30000 --public-size 3000 \
        --tune-epsilons 10 --epsilons 1 --truth-size 30000 --trials 20 --methods gpope,ssp
    .venv/bin/python benchmarks/frontier.py mountaincar-off --sizes 10000 --public-size 10000 \
        --epsilons 1 --trials 20 --methods gpope,ssp
    .venv/bin/python benchmarks/frontier.py hiv --pool 3000 --sizes 3000 --public-size 300 \
        --tune-epsilons 10 --epsilons 1 --clip-grid 0.03,0.1,0.3,1,3 \
        --step-grid 1,10,100,1000,10000,100000 --trials 20 --methods gpope,ssp
    .venv/bin/python benchmarks/frontier.py hiv-demo --pool-dir DIR --spec conf/specs/hiv_demo.yaml \
        --sizes 3000 --public-size 2000 --trials 20 --methods gpope,ssp

(``--trial-offset`` splits the trials of one cell over processes; the report merges them.)

What one run does (pure numpy core, no Spark; the same code as ``gpope tune --spec`` and
``gpope evaluate`` / ``gpope evaluate --estimator ssp``):

1. **public tuning** (GPOPE): either the ``evaluation:`` block of ``--spec FILE`` as shipped
   (written by ``gpope tune --spec`` on its own public cohort), or a public cohort of
   ``--public-size`` trajectories (seed ``--seed`` + 1, never used for evaluation) and
   :func:`gpope.core.tuning.public.tune_operating_point` at ``--tune-epsilons``: (clip, step size)
   per epsilon on grids set by that cohort's gradient scale and conditioning, extended at their
   edges, at the fixed operating point (Poisson, ``--passes`` passes, ``--iterations`` steps,
   q = passes / iterations, eta / (i + 0.1 N), tail averaging of the last half, PLD). SSP's one
   public setting, its clip, is the ``--ssp-quantile`` quantile of the per-trajectory norms of
   ``[A_i, b_i, C_i]`` on the public cohort (as ``gpope evaluate --estimator ssp`` does);
2. **trials**: per m and trial, a FRESH data set (its own seed) and, per epsilon and method, fresh
   noise; GPOPE's tuned point is chosen by the rule of :mod:`gpope.core.gpope.operating` (nearest
   m_pub epsilon_k to m epsilon); SSP spends the whole (epsilon, delta) on one Gaussian release
   (split with the moments release the intervals need, ``--moments-share``, as the CLI does) and
   solves plain LSTD on the noisy sums (post-processing);
3. **metrics**: relative MSPBE against the domain's ground truth (chain: exact; mountain car:
   population statistics of ``--truth-size`` independent trajectories; HIV with ``--pool``: the
   population statistics of the pool itself), RMS value error (chain: exact values), wall time of
   the estimator and its process CPU time (the honest cost on a loaded machine; GPOPE: the solver;
   SSP: clip, sum, noise and solve), trajectories touched
   (GPOPE: passes * m; SSP: m).

HIV (``--pool P``): the simulator costs about 0.1 s per patient, so ONE pool of P patients
(200 decisions each, the experiment's behaviour and target policies) is simulated once and cached
under ``--cache`` (one file per 1000 patients, so an interrupted build resumes), treated as the
population: every cohort (public and trial) is drawn iid WITH replacement from it and the truth
is the pool's population statistics.

Output: ``docs/results/frontier_<domain>.json`` or ``--out`` (every trial, the tuning, the
settings); ``benchmarks/frontier_report.py`` merges every file of a domain.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from gpope.core.evaluation.settings import SettingsLayer
from gpope.core.experiments.common import seed_seq
from gpope.core.gpope.operating import resolve_budget, resolve_step_offset
from gpope.core.gpope.solver import GPOPEConfig, run_gpope_trials
from gpope.core.statistics import TrajectoryStats
from gpope.core.tuning.public import tune_operating_point

EPSILONS = (0.1, 1.0, 10.0)
OUT = Path(__file__).resolve().parents[1] / "docs" / "results"
POOL_CHUNK = 1000


# ---------------------------------------------------------------------- problems
class PoolProblem:
    """A cohort drawn iid with replacement from a simulated pool taken as the population."""

    def __init__(self, pool: dict[str, np.ndarray], idx: np.ndarray,
                 truth: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.m = len(idx)
        self._stats = TrajectoryStats.from_dense(pool["A"][idx], pool["b"][idx], pool["C"][idx],
                                                 tau=pool["tau"][idx])
        self.truth = truth

    def stats(self, normalization: str) -> TrajectoryStats:
        return self._stats

    def rel_mspbe(self, thetas: np.ndarray) -> np.ndarray:
        from gpope.core.metrics import relative_mspbe

        return np.asarray(relative_mspbe(np.atleast_2d(thetas), *self.truth))

    def value_error(self, thetas: np.ndarray) -> np.ndarray:
        return np.full(np.atleast_2d(thetas).shape[0], np.nan)


class ChunkedProblem:
    """A mountain car data set simulated and featurised chunk by chunk (``--chunk``): only the
    per-trajectory statistics of each chunk are kept (on-policy: each episode's distinct nonzero
    entries, the sparse layout, about 5x smaller and faster than one row per transition;
    off-policy: dense), so m = 3e5 fits where one-shot generation (about 45 million transitions)
    does not. Statistically the same data set as :meth:`_Domain.problem` (iid episodes), from a
    different random stream (chunk c uses the c-th child of the trial's generator)."""

    def __init__(self, stats: TrajectoryStats,
                 truth: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        self.m = stats.m
        self._stats = stats
        self.truth = truth

    stats = PoolProblem.stats
    rel_mspbe = PoolProblem.rel_mspbe
    value_error = PoolProblem.value_error


def chunked_stats(d, m: int, rng: np.random.Generator, chunk: int,
                  dtype: str = "float64") -> TrajectoryStats:
    """Statistics of m behaviour episodes of domain ``d``, simulated ``chunk`` at a time.

    Off-policy (dense per-episode A_i, C_i): written chunk by chunk into one preallocated
    (m, n, 2n) array of ``dtype`` (``--stats-dtype float32`` halves the 6.2 GB of m = 3e5; the
    solver's arithmetic stays float64, the stored entries are rounded to single precision,
    relative error <= 6e-8), so no second copy is ever made by a concatenation."""
    from gpope.core.statistics import statistics_from_transitions

    if d.figure == "on":
        parts = []
        for child in rng.spawn(math.ceil(m / chunk)):
            tr = d.generate(min(chunk, m - len(parts) * chunk), child)
            st = statistics_from_transitions(tr, d.features, d.rho(tr), gamma=d.s.gamma,
                                             normalization="transition", length_scale=200.0,
                                             representation="tabular")
            del tr
            parts.append(st.to_sparse())
        return TrajectoryStats.concatenate(parts)
    n = d.features.n_features
    ac = np.empty((m, n, 2 * n), dtype=dtype)
    b = np.empty((m, n))
    tau = np.empty(m, dtype=np.int64)
    for c, child in enumerate(rng.spawn(math.ceil(m / chunk))):
        lo = c * chunk
        k = min(chunk, m - lo)
        tr = d.generate(k, child)
        st = statistics_from_transitions(tr, d.features, d.rho(tr), gamma=d.s.gamma,
                                         normalization="transition", length_scale=200.0,
                                         representation="compact")
        del tr
        A, b[lo:lo + k], C = st.dense()
        ac[lo:lo + k, :, :n] = A
        ac[lo:lo + k, :, n:] = C
        tau[lo:lo + k] = st.tau
        del st, A, C
    return TrajectoryStats(representation="dense", tau=tau, b=b, normalization="transition",
                           ac=ac)


def population64(stats: TrajectoryStats, block: int = 10000
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """stats.population() accumulated in float64 (also for float32 storage), block by block."""
    if stats.representation != "dense":
        return stats.population()
    n = stats.n
    ac = np.zeros((n, 2 * n))
    for lo in range(0, stats.m, block):
        ac += stats._ac[lo:lo + block].sum(axis=0, dtype=np.float64)
    ac /= stats.m
    return ac[:, :n].copy(), stats._b.mean(axis=0), ac[:, n:].copy()


def chunked_truth(d, size: int, chunk: int, log=print) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Population A, b, C of ``size`` independent behaviour episodes (the truth sample; its own
    stream, never a data set's), accumulated chunk by chunk. On-policy only: off-policy mountain
    car's truth (:func:`mountaincar.large_sample_statistics`) is already chunked."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed_seq(0, 5, 0 if d.figure == "on" else 1, size))
    sums = None
    for c, child in enumerate(rng.spawn(math.ceil(size / chunk))):
        k = min(chunk, size - c * chunk)
        pop = chunked_stats(d, k, child, k).population()
        sums = [k * x for x in pop] if sums is None else [a + k * x for a, x in zip(sums, pop,
                                                                                    strict=True)]
    log(f"truth sample of {size} trajectories in {time.perf_counter() - t0:.0f} s")
    return tuple(x / size for x in sums)  # type: ignore[return-value]


def _cached_truth(path: str | None, build, *, size: int, chunk: int):
    """The truth (A, b, C) from ``path`` (``--truth-cache``) if it holds one of ``size``
    trajectories, else built by ``build()`` and saved there (a public simulation: the same for
    every process that names the file; the chunk it was simulated with is recorded in it)."""
    if path is None:
        return build()
    f = Path(path)
    if f.exists():
        with np.load(f) as z:
            if int(z["size"]) == size:
                print(f"truth sample of {size} trajectories from {f} (simulated in chunks of "
                      f"{int(z['chunk'])})", flush=True)
                return (z["A"].copy(), z["b"].copy(), z["C"].copy())
        raise SystemExit(f"{f} holds a truth sample of {int(z['size'])}, not {size}")
    A, b, C = build()
    f.parent.mkdir(parents=True, exist_ok=True)
    np.savez(f.with_suffix(".tmp.npz"), A=A, b=b, C=C, size=size, chunk=chunk)
    f.with_suffix(".tmp.npz").rename(f)
    return A, b, C


def hiv_pool(size: int, seed: int, cache: Path, log=print) -> dict[str, np.ndarray]:
    """Per-trajectory dense statistics of ``size`` simulated HIV patients (200 decisions, the
    experiment's policies and features), built in chunks of :data:`POOL_CHUNK` cached under
    ``cache`` (an interrupted build resumes)."""
    from gpope.core.experiments.continuous import FeatureProblem, HIVSettings, _Domain

    d = _Domain("hiv", "off", HIVSettings())
    cache.mkdir(parents=True, exist_ok=True)
    parts = []
    for c in range(math.ceil(size / POOL_CHUNK)):
        f = cache / f"hiv_pool_s{seed}_{c:03d}.npz"
        k = min(POOL_CHUNK, size - c * POOL_CHUNK)
        if not f.exists():
            t0 = time.perf_counter()
            tr = d.generate(k, np.random.default_rng(seed_seq(seed, 7, c)))
            st = FeatureProblem(tr, d.features, d.rho(tr), d.s.gamma, truth=None).stats(  # type: ignore[arg-type]
                "transition")
            A, b, C = st.dense()
            np.savez(f.with_suffix(".tmp.npz"), A=A, b=b, C=C, tau=st.tau)
            f.with_suffix(".tmp.npz").rename(f)
            log(f"pool chunk {c} ({k} patients) in {time.perf_counter() - t0:.0f} s")
        with np.load(f) as z:
            parts.append({key: z[key][:k] for key in ("A", "b", "C", "tau")})
    return {key: np.concatenate([p[key] for p in parts]) for key in ("A", "b", "C", "tau")}


def _problem_factory(domain: str, delta: float, args: argparse.Namespace):
    """make(m, rng) -> problem with stats / rel_mspbe / value_error (and the public truth)."""
    if domain == "chain":
        from gpope.core.experiments.chain import ChainProblem, ChainSettings

        s = ChainSettings(length_scale=200.0, delta=delta)
        return lambda m, rng: ChainProblem.simulate(m, rng, s)
    from gpope.core.experiments.continuous import HIVSettings, MountainCarSettings, _Domain

    if args.pool_dir:  # statistics vectors [vec A, b, vec C] per patient, one .npy per chunk
        from gpope.core.ssp import split_vector, vector_features

        files = sorted(Path(args.pool_dir).glob(args.pool_glob))
        vec = np.concatenate([np.load(f) for f in files])
        n = vector_features(vec.shape[1])
        A, b, C = split_vector(vec, n)
        pool = {"A": np.ascontiguousarray(A), "b": np.ascontiguousarray(b),
                "C": np.ascontiguousarray(C), "tau": np.ones(len(vec), dtype=np.int64)}
        args.pool = len(vec)
        print(f"pool of {len(vec)} trajectories (n = {n}) from {len(files)} files", flush=True)
        truth = (pool["A"].mean(axis=0), pool["b"].mean(axis=0), pool["C"].mean(axis=0))
        return lambda m, rng: PoolProblem(pool, rng.integers(0, len(vec), m), truth)
    if domain == "hiv" and args.pool:
        pool = hiv_pool(args.pool, args.seed + 100, Path(args.cache),
                        log=lambda msg: print(msg, flush=True))
        m_pool = len(pool["b"])
        truth = (pool["A"].mean(axis=0), pool["b"].mean(axis=0), pool["C"].mean(axis=0))
        return lambda m, rng: PoolProblem(pool, rng.integers(0, m_pool, m), truth)
    extra = {} if args.truth_size is None else {"truth_trajectories": args.truth_size}
    if domain.startswith("mountaincar"):
        figure = domain.split("-")[1]
        d = _Domain("mountaincar", figure, MountainCarSettings(delta=delta, **extra))
        if args.chunk:
            cache: dict = {}

            def make_chunked(m: int, rng: np.random.Generator) -> ChunkedProblem:
                if "truth" not in cache:  # the population: computed once, shared by every trial
                    cache["truth"] = _cached_truth(
                        args.truth_cache,
                        lambda: (chunked_truth(d, d.s.truth_trajectories, args.chunk,
                                               log=lambda msg: print(msg, flush=True))
                                 if figure == "on" else d.truth(0)),
                        size=d.s.truth_trajectories, chunk=args.chunk)
                if m <= args.chunk:  # one chunk: the same cohort as without --chunk
                    from gpope.core.statistics import statistics_from_transitions

                    tr = d.generate(m, rng)
                    st = statistics_from_transitions(tr, d.features, d.rho(tr), gamma=d.s.gamma,
                                                     length_scale=200.0)
                    return ChunkedProblem(st, cache["truth"])
                return ChunkedProblem(chunked_stats(d, m, rng, args.chunk, args.stats_dtype),
                                      cache["truth"])

            return make_chunked
    else:
        d = _Domain("hiv", "off", HIVSettings(delta=delta, **extra))
    return lambda m, rng: d.problem(m, rng, 0)


# ---------------------------------------------------------------------- SSP
def _vectors(stats: TrajectoryStats, chunk: int = 2000):
    """(k, 2n^2+n) statistics vectors of consecutive trajectories, chunk by chunk."""
    from gpope.core.ssp import statistics_vectors

    for lo in range(0, stats.m, chunk):
        A, b, C = stats.dense_range(lo, min(stats.m, lo + chunk))
        yield statistics_vectors(A, b, C)


def ssp_clip(stats: TrajectoryStats, quantile: float) -> float:
    """The SSP clip bound from PUBLIC statistics: the quantile of the vector norms."""
    norms = np.concatenate([np.linalg.norm(v, axis=1) for v in _vectors(stats)])
    return float(np.quantile(norms, quantile))


def ssp_sum(stats: TrajectoryStats, clip: float) -> np.ndarray:
    """The clipped sum of the statistics vectors (the data-dependent part of the release, the
    same for every epsilon of a trial)."""
    from gpope.core.ssp import clip_statistics

    return np.asarray(sum(clip_statistics(v, clip).sum(axis=0) for v in _vectors(stats)))


def ssp_theta(stats: TrajectoryStats, total: np.ndarray, *, clip: float, sigma: float,
              moments_share: float, rng: np.random.Generator) -> np.ndarray:
    """One SSP release of the clipped sum ``total`` at total noise multiplier ``sigma`` (the
    statistics' share of it, as ``gpope evaluate --estimator ssp``) and its plain LSTD solve."""
    from gpope.core.intervals import ssp_values
    from gpope.core.ssp import release_noisy_statistics, split_sigma

    s1, _ = split_sigma(sigma, moments_share)
    noisy = release_noisy_statistics(np.asarray(total)[None, :], n=stats.n, m=stats.m, sigma=s1,
                                     clip=clip, rng=rng)
    theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
    return theta


# ---------------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("domain", choices=("chain", "mountaincar-on", "mountaincar-off", "hiv",
                                      "hiv-demo"))
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--epsilons", default="0.1,1,10")
    p.add_argument("--methods", default="gpope",
                   help="comma list of gpope, ssp, lstd (the non-private LSTD floor of each data "
                        "set, recorded at epsilon = inf)")
    p.add_argument("--spec", default=None,
                   help="use this spec's evaluation: block (public tuning as shipped) for GPOPE "
                        "instead of tuning here; its tuning.patients is m_pub")
    p.add_argument("--public-size", type=int, default=None,
                   help="public tuning cohort (default: the smallest size)")
    p.add_argument("--truth-size", type=int, default=None,
                   help="mountain car / HIV without pool: trajectories of the truth sample")
    p.add_argument("--pool", type=int, default=None,
                   help="HIV: simulate one pool of this many patients, draw cohorts from it")
    p.add_argument("--cache", default="/tmp/utility/hiv_pool")
    p.add_argument("--pool-dir", default=None,
                   help="a pool given as per-trajectory statistics vectors [vec A, b, vec C] in "
                        ".npy files (--pool-glob) of a spec's own pipeline, e.g. hiv-demo: "
                        "`gpope simulate`'s HIV episodes (40 decisions) through the hiv_demo spec")
    p.add_argument("--pool-glob", default="pool_*.npy")
    p.add_argument("--passes", type=float, default=20.0)
    p.add_argument("--iterations", type=int, default=20000)
    p.add_argument("--tune-trials", type=int, default=2)
    p.add_argument("--clip-grid", default=None,
                   help="explicit public clip grid of the tuning (default: the automatic rule)")
    p.add_argument("--step-grid", default=None,
                   help="explicit public step grid of the tuning (default: the automatic rule)")
    p.add_argument("--tune-epsilons", default=None,
                   help="epsilons of the public tuning (default: --epsilons); the rule picks the "
                        "tuned point with m_pub epsilon_k nearest to m epsilon, so a cohort of "
                        "m_pub = m / 10 tuned at epsilon 10 serves epsilon 1")
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--ssp-quantile", type=float, default=0.99)
    p.add_argument("--moments-share", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trial-offset", type=int, default=0,
                   help="first trial index (a second process continues the trial seeds)")
    p.add_argument("--out", default=None)
    p.add_argument("--tuned-points", default=None,
                   help="JSON list of {epsilon, clip, step_size} from an earlier public tuning of "
                        "this command (same seed and public size): skips the tuning")
    p.add_argument("--chunk", type=int, default=None,
                   help="mountain car: simulate and featurise data sets (and the on-policy truth "
                        "sample) this many trajectories at a time, keeping only the statistics "
                        "(needed at m = 3e5)")
    p.add_argument("--stats-dtype", default="float64", choices=("float64", "float32"),
                   help="mountain car off-policy with --chunk: storage of the dense per-episode "
                        "statistics (float32: half the memory; the solver computes in float64)")
    p.add_argument("--truth-cache", default=None,
                   help="mountain car with --chunk: load the truth (A, b, C) from this .npz if it "
                        "exists, else build it and save it there, so a later process reuses it")
    p.add_argument("--build-pool-only", action="store_true")
    p.add_argument("--label", default=None,
                   help="method label suffix in the output (e.g. a different --passes budget: "
                        "gpope-40p), so the report keeps it apart")
    args = p.parse_args()

    sizes = [int(float(x)) for x in args.sizes.split(",")]
    epsilons = tuple(float(x) for x in args.epsilons.split(","))
    methods = tuple(x.strip() for x in args.methods.split(","))
    if set(methods) - {"gpope", "ssp", "lstd"}:
        p.error(f"unknown method in {args.methods!r}")
    t0 = time.perf_counter()
    make = _problem_factory(args.domain, args.delta, args)
    if args.build_pool_only:
        return
    norm = "transition"
    fixed = {"sampling": "poisson", "accountant": "auto", "passes": args.passes,
             "iterations": args.iterations, "step_schedule": "inverse",
             "step_offset_fraction": 0.1, "averaging": "tail", "tail_fraction": 0.5}
    out = Path(args.out) if args.out else OUT / f"frontier_{args.domain}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    m_pub = args.public_size or min(sizes)
    public = None
    if "ssp" in methods or ("gpope" in methods and not (args.spec or args.tuned_points)):
        public = make(m_pub, np.random.default_rng(seed_seq(args.seed + 1, 3, m_pub)))
    ssp_public_size = m_pub if "ssp" in methods else None
    tuned_rows: list = []
    grad_scale = eta0 = float("nan")
    if "gpope" not in methods:
        block = None
    elif args.spec:
        from gpope.shell.pipeline.jobargs import load_spec

        block = load_spec(args.spec).evaluation
        fixed = {k: v for k, v in block.to_dict().items() if k not in ("tuned", "tuning")}
        m_pub = block.public_size
    else:
        from gpope.core.gpope.operating import TunedPoint
        from gpope.core.tuning.public import TuningResult

        if args.tuned_points:
            pts = tuple(TunedPoint(**dict(d)) for d in json.loads(args.tuned_points))
            tuned = TuningResult(pts, [], float("nan"), float("nan"))
        else:
            pub_stats = public.stats(norm)
            population = public.truth if hasattr(public, "truth") else pub_stats.population()
            tuned = tune_operating_point(
                pub_stats, population, settings=fixed, delta=args.delta,
                epsilons=tuple(float(x) for x in (args.tune_epsilons or args.epsilons).split(",")),
                trials=args.tune_trials, rng=np.random.default_rng(seed_seq(args.seed + 1, 4)),
                clips=[float(x) for x in args.clip_grid.split(",")] if args.clip_grid else None,
                steps=[float(x) for x in args.step_grid.split(",")] if args.step_grid else None,
                log=lambda msg: print(msg, flush=True))
        block = SettingsLayer(fixed, "spec", tuned.points, {"patients": m_pub})
        tuned_rows, grad_scale, eta0 = tuned.rows, tuned.gradient_scale, tuned.eta0
    clip_ssp = ssp_clip(public.stats(norm), args.ssp_quantile) if "ssp" in methods else None
    record = {"domain": args.domain, "methods": list(methods), "settings": fixed,
              "public_size": m_pub, "spec": args.spec,
              "tuned": [pt.to_dict() for pt in block.tuned] if block else [],
              "gradient_scale": grad_scale, "eta0": eta0, "tuning_grid": tuned_rows,
              "ssp_clip": clip_ssp, "ssp_quantile": args.ssp_quantile,
              "ssp_public_size": ssp_public_size,
              "pool": args.pool, "truth_size": args.truth_size,
              "tuning_seconds": time.perf_counter() - t0, "trials": [], "command": vars(args)}
    print(f"tuned in {record['tuning_seconds']:.0f} s: {record['tuned']}; ssp clip {clip_ssp}",
          flush=True)
    from gpope.core.accounting import calibrate_sigma
    from gpope.core.ssp import ssp_sigma

    for m in sizes:
        for t in range(args.trial_offset, args.trial_offset + args.trials):
            s_data = time.perf_counter()
            problem = make(m, np.random.default_rng(seed_seq(args.seed, 1, m, t)))
            stats = problem.stats(norm)
            data_secs = time.perf_counter() - s_data
            ssp_total, ssp_sum_secs, ssp_sum_cpu = None, 0.0, 0.0
            if "lstd" in methods:  # the NON-private floor on this data set (epsilon = inf)
                s0, c0 = time.perf_counter(), time.process_time()
                A_hat, b_hat, _ = population64(stats)
                theta = np.linalg.lstsq(A_hat, b_hat, rcond=None)[0]
                record["trials"].append({
                    "method": "lstd", "m": m, "trial": t, "epsilon": math.inf,
                    "rel_mspbe": float(problem.rel_mspbe(theta)[0]),
                    "value_error": float(problem.value_error(theta)[0]),
                    "seconds": time.perf_counter() - s0, "cpu_seconds": time.process_time() - c0,
                    "sigma": 0.0, "data_seconds": data_secs, "clip": None, "step_size": None,
                    "touched": float(m), "steps": 1})
            for k, eps in enumerate(EPSILONS):
                if eps not in epsilons:
                    continue
                for method in (x for x in methods if x != "lstd"):
                    rng = np.random.default_rng(seed_seq(args.seed, 2 if method == "gpope" else 5,
                                                         m, t, k))
                    s0, c0 = time.perf_counter(), time.process_time()
                    if method == "ssp":
                        if ssp_total is None:  # once per data set; its time counts in every cell
                            ssp_total = ssp_sum(stats, clip_ssp)
                            ssp_sum_secs = time.perf_counter() - s0
                            ssp_sum_cpu = time.process_time() - c0
                            s0, c0 = time.perf_counter(), time.process_time()
                        sigma = ssp_sigma(m=m, epsilon=eps, delta=args.delta)
                        with np.errstate(all="ignore"):
                            theta = ssp_theta(stats, ssp_total, clip=clip_ssp, sigma=sigma,
                                              moments_share=args.moments_share, rng=rng)
                        row = {"clip": clip_ssp, "step_size": None, "touched": float(m), "steps": 1}
                    else:
                        sel, point = block.select(m, eps)
                        N, q = resolve_budget(m=m, sampling=sel["sampling"],
                                              passes=sel.get("passes"),
                                              iterations=sel.get("iterations"),
                                              batch_rate=sel.get("batch_rate"),
                                              batch_size=sel.get("batch_size"))
                        sigma = float(calibrate_sigma(m=m, iterations=N, epsilon=eps,
                                                      delta=args.delta,
                                                      accountant=sel.get("accountant", "auto"),
                                                      sampling=sel["sampling"], batch_rate=q))
                        cfg = GPOPEConfig(
                            iterations=N, step_size=sel["step_size"], clip=sel["clip"],
                            noise_multiplier=sigma, sampling=sel["sampling"], batch_rate=q,
                            step_schedule=sel.get("step_schedule", "inverse"),
                            step_offset=resolve_step_offset(
                                iterations=N, step_offset=sel.get("step_offset"),
                                step_offset_fraction=sel.get("step_offset_fraction")),
                            averaging=sel.get("averaging", "tail"),
                            tail_fraction=sel.get("tail_fraction", 0.5))
                        with np.errstate(all="ignore"):
                            res = run_gpope_trials(stats, cfg, rng, 1)
                        theta = res.theta_avg if res.theta_avg is not None else res.theta
                        touched = N * q * m if q is not None else float(N)
                        row = {"clip": sel["clip"], "step_size": sel["step_size"],
                               "touched": touched, "steps": N,
                               "tuned_epsilon": None if point is None else point.epsilon}
                    secs = time.perf_counter() - s0 + (ssp_sum_secs if method == "ssp" else 0.0)
                    cpu = time.process_time() - c0 + (ssp_sum_cpu if method == "ssp" else 0.0)
                    theta = np.asarray(theta).reshape(-1)
                    ok = bool(np.isfinite(theta).all())
                    rel = float(problem.rel_mspbe(theta)[0]) if ok else math.inf
                    ve = float(problem.value_error(theta)[0]) if ok else math.inf
                    label = method + (f"-{args.label}" if args.label else "")
                    record["trials"].append({"method": label, "m": m, "trial": t, "epsilon": eps,
                                             "rel_mspbe": rel, "value_error": ve,
                                             "seconds": secs, "cpu_seconds": cpu,
                                             "sigma": sigma,
                                             "data_seconds": data_secs,
                                             "stats_mb": stats.nbytes / 2**20, **row})
                    out.write_text(json.dumps(record, indent=1, default=float))
            print(f"m={m} trial {t} done ({time.perf_counter() - t0:.0f} s)", flush=True)
    record["total_seconds"] = time.perf_counter() - t0
    out.write_text(json.dumps(record, indent=1, default=float))


if __name__ == "__main__":
    main()

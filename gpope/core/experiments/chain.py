"""Chain reproduction (paper Figures "chain"): MSPBE and value error vs m at epsilon 0.1.

Ground truth is exact: the relative MSPBE uses the population ``A, b, C`` of
:func:`gpope.core.envs.chain.population_statistics` with ``transition`` normalisation (the
per-transition on-policy expectation, whose fixed point is the exact value function), so every
method is measured against the same, true, MSPBE; the value error is the RMS error over the 39
non-absorbing states against :func:`gpope.core.envs.chain.exact_values` (Balle et al.'s
``||V - Phi theta||_rho`` with uniform rho). The absorbing state's coordinate is never visited and
is dropped from both metrics.

Methods: the three GPOPE variants of :mod:`.methods` (the paper's also at 0.1x and 10x its tuned
step size), DP-LSW and DP-LSL (Balle et al.; epsilon <= 1, the given delta; public return bound
F_max = 1 because a chain episode earns at most one reward of 1), and on-policy LSTD (non-private
floor). A step-size sweep at ``sweep_size`` gives MSPBE vs step size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np

from gpope.core.baselines import dp_lsl, dp_lsw
from gpope.core.envs import chain as chain_env
from gpope.core.experiments import common
from gpope.core.experiments.common import Log, TuningTable, seed_seq
from gpope.core.experiments.methods import GPOPEMethod, default_methods
from gpope.core.metrics import relative_mspbe, value_error
from gpope.core.statistics import TrajectoryStats, statistics_from_transitions
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_number

__all__ = ["ChainProblem", "ChainSettings", "run_chain", "tune_chain"]


@dataclass(frozen=True, kw_only=True)
class ChainSettings(common.HarnessSettings):
    """Settings of the chain experiment (defaults: the paper's; see :meth:`quick`).

    Attributes:
        epsilon: target epsilon (0.1 in the paper).
        multipliers: step multipliers of the paper variant on the m-plot.
        sweep_size: m of the step-size sweep (3e5); None skips the sweep.
        sweep_multipliers: multipliers of the sweep (paper and product variants).
        length_scale: public L of the transition normalisation.
        f_max: public return bound of DP-LSW/DP-LSL.
        chain: the chain domain.
    """

    sizes: tuple[int, ...] = (100_000, 200_000, 300_000, 400_000, 500_000)
    epsilon: float = 0.1
    trials: int = 100
    data_blocks: int = 10
    multipliers: tuple[float, ...] = (0.1, 1.0, 10.0)
    sweep_size: int | None = 300_000
    sweep_multipliers: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
    length_scale: float = 40.0
    f_max: float = 1.0
    tune_sizes: tuple[int, ...] | None = (100_000, 300_000, 500_000)
    chain: chain_env.ChainConfig = field(default_factory=chain_env.ChainConfig)

    _QUICK: ClassVar[dict[str, Any]] = dict(
        sizes=(2_000, 5_000), trials=4, data_blocks=2, iterations=2_000, sweep_size=5_000,
        sweep_multipliers=(0.1, 1.0, 10.0), tune_trials=2, tune_sizes=(5_000,), coarse_grid=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_number("ChainSettings", "epsilon", self.epsilon, gt=0.0)

    def methods(self) -> tuple[GPOPEMethod, ...]:
        """The GPOPE variants at this N and batch size."""
        methods = default_methods(self.iterations, self.batch_size)
        return tuple(m.coarse() for m in methods) if self.coarse_grid else methods


class ChainProblem:
    """One simulated chain data set with the exact ground truth."""

    def __init__(self, transitions: Transitions, settings: ChainSettings) -> None:
        self.transitions = transitions
        self.settings = settings
        self.m = transitions.n_trajectories
        self._stats: dict[str, TrajectoryStats] = {}
        cfg = settings.chain
        self.n = cfg.n_states
        self._A, self._b, self._C = chain_env.population_statistics(
            cfg, "transition", 1.0, drop_terminal=True)
        self._v = chain_env.exact_values(cfg)[: self.n - 1]
        self._phi_ref = np.eye(self.n - 1)

    @classmethod
    def simulate(cls, m: int, rng: np.random.Generator, settings: ChainSettings) -> ChainProblem:
        """Simulate m episodes."""
        return cls(chain_env.generate(m, rng, settings.chain), settings)

    def stats(self, normalization: str) -> TrajectoryStats:
        """Tabular per-trajectory statistics (cached per normalisation)."""
        if normalization not in self._stats:
            tr = self.transitions
            self._stats[normalization] = statistics_from_transitions(
                tr, chain_env.feature_map(self.settings.chain), np.ones(tr.n_transitions),
                gamma=self.settings.chain.gamma, normalization=normalization,  # type: ignore[arg-type]
                length_scale=self.settings.length_scale, representation="tabular")
        return self._stats[normalization]

    def rel_mspbe(self, thetas: np.ndarray) -> np.ndarray:
        """(R,) relative MSPBE (absorbing coordinate dropped)."""
        th = np.atleast_2d(thetas)[:, : self.n - 1]
        return np.asarray(relative_mspbe(th, self._A, self._b, self._C))

    def value_error(self, thetas: np.ndarray) -> np.ndarray:
        """(R,) RMS value error over the non-absorbing states."""
        th = np.atleast_2d(thetas)[:, : self.n - 1]
        return np.asarray(value_error(th, self._phi_ref, self._v))

    # ------------------------------------------------------------------ baselines
    def lstd_theta(self) -> np.ndarray:
        """On-policy LSTD(0) solution (n,), non-private."""
        tr = self.transitions
        s = tr.state[:, 0].astype(np.int64)
        sn = tr.next_state[:, 0].astype(np.int64)
        # Tabular LSTD without materialising one-hot rows: A = sum e_s (e_s - g e_s')^T / T.
        n, T, g = self.n, tr.n_transitions, self.settings.chain.gamma
        live = ~tr.terminal
        A = (np.bincount(s * n + s, minlength=n * n)
             - g * np.bincount(s[live] * n + sn[live], minlength=n * n)).reshape(n, n) / T
        b = np.bincount(s, weights=tr.reward, minlength=n) / T
        keep = np.arange(n) != n - 1
        theta = np.zeros(n)
        theta[keep] = np.linalg.solve(A[np.ix_(keep, keep)], b[keep])
        return theta

    def dp_ls_thetas(self, rng: np.random.Generator, trials: int, epsilon: float,
                     delta: float) -> dict[str, np.ndarray]:
        """DP-LSW and DP-LSL releases, ``trials`` fresh noise draws each on this data set.

        :func:`gpope.core.baselines.dp_lsw` / ``dp_lsl`` with ``draws=trials``: the
        data-dependent parts are computed once per estimator.
        """
        tr, n, s = self.transitions, self.n, self.settings
        rho = np.full(n, 1.0 / (n - 1))
        rho[n - 1] = 0.0
        g_w, g_l = rng.spawn(2)
        data = (tr.state[:, 0], tr.reward, tr.traj_index)
        public = dict(n_states=n, features=np.eye(n), weights=rho, gamma=s.chain.gamma,
                      f_max=s.f_max, epsilon=epsilon, delta=delta, draws=trials)
        return {"dp_lsw": dp_lsw(*data, rng=g_w, **public).theta,
                "dp_lsl": dp_lsl(*data, rng=g_l, n_trajectories=self.m, **public).theta}


# ---------------------------------------------------------------------- tuning
def tune_chain(settings: ChainSettings, *, public_seed: int | None = None,
               log: Log | None = None) -> TuningTable:
    """Tune (step size, clip) of every GPOPE variant at every m on PUBLIC simulated chain data.

    The public data come from the stream ``(public_seed, PUBLIC, ...)`` (default: the experiment
    seed + 1), disjoint from every evaluation stream. The sweep size is tuned too.
    """
    seed = settings.seed + 1 if public_seed is None else int(public_seed)
    sizes = sorted(settings.tune_sizes or (
        set(settings.sizes) | ({settings.sweep_size} if settings.sweep_size else set())))
    best, rows = {}, []
    for i, m in enumerate(sizes):
        rng = np.random.default_rng(seed_seq(seed, common.PUBLIC, common.DATA, m))
        problem = ChainProblem.simulate(m, rng, settings)
        for j, method in enumerate(settings.methods()):
            hyper, grid = common.tune_method(
                problem, method, epsilon=settings.epsilon, delta=settings.delta,
                ss=seed_seq(seed, common.PUBLIC, common.RUN, i, j), trials=settings.tune_trials,
                log=log)
            best[(method.name, m, settings.epsilon)] = hyper
            rows.extend(grid)
    return TuningTable(best=best, rows=rows, seed=seed, domain="chain")


# ---------------------------------------------------------------------- experiment
def run_chain(settings: ChainSettings, tuning: TuningTable, *, log: Log | None = None
              ) -> list[dict[str, Any]]:
    """Run the chain experiment; one record per (trial, m, method, step multiplier).

    Records carry ``figure`` = ``"m"`` (the m-plot) or ``"step"`` (the sweep at ``sweep_size``).
    """
    s = settings
    methods = s.methods()
    sizes = list(s.sizes)
    if s.sweep_size and s.sweep_size not in sizes:
        sizes.append(s.sweep_size)
    records: list[dict[str, Any]] = []
    blocks = common.block_sizes(s.trials, s.data_blocks)
    for i, m in enumerate(sizes):
        on_m_plot = m in s.sizes
        sweep = m == s.sweep_size
        trial0 = 0
        for blk, n_tr in enumerate(blocks):
            t0 = time.perf_counter()
            rng = np.random.default_rng(seed_seq(s.seed, common.DATA, i, blk))
            problem = ChainProblem.simulate(m, rng, s)
            t_data = time.perf_counter() - t0
            trial_ids = list(range(trial0, trial0 + n_tr))
            trial0 += n_tr
            base = {"domain": "chain", "m": m, "epsilon": s.epsilon, "delta": s.delta,
                    "block": blk}
            add = partial(common.add_records, records, problem, problem.n, trial_ids, base)

            if on_m_plot:
                t1 = time.perf_counter()
                theta = problem.lstd_theta()
                add("lstd", "LSTD (non-private)", theta, figure="m",
                    extra={"seconds": time.perf_counter() - t1})
                t1 = time.perf_counter()
                rng = np.random.default_rng(seed_seq(s.seed, common.BASELINE, i, blk))
                dp = problem.dp_ls_thetas(rng, n_tr, s.epsilon, s.delta)
                dt = (time.perf_counter() - t1) / 2
                add("dp_lsw", "DP-LSW", dp["dp_lsw"], figure="m", extra={"seconds": dt})
                add("dp_lsl", "DP-LSL", dp["dp_lsl"], figure="m", extra={"seconds": dt})
            for j, method in enumerate(methods):
                mults: set[float] = set()
                if on_m_plot:
                    mults |= set(s.multipliers) if method.name == "gpope_paper" else {1.0}
                if sweep and method.name in ("gpope_paper", "gpope_product"):
                    mults |= set(s.sweep_multipliers)
                hyper = tuning.get(method.name, m, s.epsilon)
                for k, mult in enumerate(sorted(mults)):
                    with np.errstate(all="ignore"):
                        thetas, info = common.run_gpope_method(
                            problem, method, epsilon=s.epsilon, delta=s.delta, hyper=hyper,
                            multiplier=mult,
                            ss=seed_seq(s.seed, common.RUN, i, blk, j, k, round(mult * 1e6)),
                            trials=n_tr)
                    extra = {"sigma": info["sigma"], "steps": info["steps"],
                             "step_size": hyper.step_size * mult, "clip": hyper.clip,
                             "accountant": method.accountant, "sampling": method.sampling,
                             "seconds": info["seconds"] / n_tr}
                    on_m = on_m_plot and ((method.name == "gpope_paper" and mult in s.multipliers)
                                          or mult == 1.0)
                    in_sweep = sweep and mult in s.sweep_multipliers and method.name in (
                        "gpope_paper", "gpope_product")
                    label = method.label if mult == 1.0 else f"{method.label} x{mult:g} step"
                    if on_m:
                        add(method.name, label, thetas, figure="m", multiplier=mult, extra=extra)
                    if in_sweep:
                        add(method.name, method.label, thetas, figure="step", multiplier=mult,
                            extra=extra)
            if log is not None:
                log(f"chain m={m} block {blk + 1}/{len(blocks)} done "
                    f"(data {t_data:.1f}s, total {time.perf_counter() - t0:.1f}s)")
    return records

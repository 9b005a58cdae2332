"""Mountain car and HIV experiments (continuous states; ground truth from large independent samples).

Mountain car (``gymnasium`` dynamics, gamma 0.99, the Q-learned policy of artifact
``mountaincar_q_v1`` used epsilon-greedily with epsilon 0.1):

* on-policy (``figure="on"``): the learned policy evaluated from its own data on an aggregated
  ``grid x grid`` state grid (public bounds; one-hot cell features), so that DP-LSW (finite states
  only, BASELINES.md 1.9) applies: GPOPE variants vs DP-LSW (rewards negated to costs in [0, 1],
  F_max = (1 - gamma^200) / (1 - gamma); the estimate is negated back, a public transformation) vs
  on-policy LSTD. Weights rho uniform over cells.
* off-policy (``figure="off"``): target uniform random, behaviour the learned policy; order-5
  Fourier features (36); GPOPE variants at several epsilon vs WIS-LSTD (non-private floor).

HIV (``figure="off"``): target greedy in the fitted-Q artifact ``hiv_q_v1``, behaviour softmax over
the same Q (its stored temperature), 73 Fourier features of the log10 state, gamma 0.98,
200-decision episodes; GPOPE variants at several epsilon vs WIS-LSTD.

Rewards are multiplied by a public ``reward_scale`` (mountain car 0.01, HIV 1e-6) for every
method, so that values are O(1) relative to the clip bounds; the relative MSPBE is invariant to it.

Ground truth: the population A, b, C (``transition`` normalisation, L = 200) of a large independent
behaviour sample (``truth_trajectories``), the same for every method; metric = relative MSPBE.
Value errors are not computed here (NaN): Monte Carlo values are expensive for HIV; the chain
has exact value errors.

The truth of a (domain, figure, seed, truth settings) is computed once per process and shared by
tuning and trials. The HIV data sets of a phase (the truth sample, then the data sets in order)
are simulated together in cohorts of at most :data:`HIV_COHORT` patients
(:func:`gpope.core.envs.hiv.generate_many`), each exactly as a separate simulation would give it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import numpy as np

from gpope.core.experiments import common
from gpope.core.experiments.common import Log, TuningTable, seed_seq
from gpope.core.experiments.methods import GPOPEMethod, default_methods
from gpope.core.metrics import relative_mspbe
from gpope.core.statistics import TrajectoryStats, statistics_from_transitions
from gpope.core.trajectories.transitions import Transitions
from gpope.core.validation import check_number

__all__ = ["HIVSettings", "MountainCarSettings", "run_continuous", "tune_continuous"]

#: Largest HIV cohort simulated at once (beyond it the simulator is compute-bound; it is also the
#: chunk of :func:`gpope.core.envs.train_hiv.large_sample_statistics`, so a truth sample of at most
#: this size is the same whether simulated alone or with other data sets).
HIV_COHORT = 1_000
_TRUTH_CACHE: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


@dataclass(frozen=True, kw_only=True)
class _ContinuousSettings(common.HarnessSettings):
    """Fields, validation and methods shared by the mountain car and HIV settings."""

    epsilons: tuple[float, ...] = (0.1, 1.0, 10.0)
    gamma: float
    reward_scale: float
    truth_trajectories: int

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "epsilons", tuple(float(e) for e in self.epsilons))
        for e in self.epsilons:
            check_number(type(self).__name__, "epsilons", e, gt=0.0)

    def methods(self) -> tuple[GPOPEMethod, ...]:
        """GPOPE variants (coarse grids in quick presets)."""
        return _methods(self)


@dataclass(frozen=True, kw_only=True)
class MountainCarSettings(_ContinuousSettings):
    """Mountain car experiment settings (the paper gives no sizes; these are stated choices)."""

    sizes: tuple[int, ...] = (1_000, 3_000, 10_000, 30_000)
    grid: int = 8
    gamma: float = 0.99
    behavior_epsilon: float = 0.1
    reward_scale: float = 0.01
    truth_trajectories: int = 10_000

    _QUICK: ClassVar[dict[str, Any]] = dict(
        sizes=(300, 1_000), epsilons=(1.0,), trials=2, data_blocks=1, iterations=1_000,
        truth_trajectories=1_000, coarse_grid=True, tune_sizes=(1_000,))


@dataclass(frozen=True, kw_only=True)
class HIVSettings(_ContinuousSettings):
    """HIV experiment settings (the paper gives no sizes; these are stated choices)."""

    sizes: tuple[int, ...] = (300, 1_000, 3_000)
    gamma: float = 0.98
    reward_scale: float = 1e-6
    truth_trajectories: int = 2_000

    _QUICK: ClassVar[dict[str, Any]] = dict(
        sizes=(30, 60), epsilons=(1.0,), trials=2, data_blocks=1, iterations=1_000,
        truth_trajectories=60, coarse_grid=True, tune_sizes=(60,))


def _methods(s: Any) -> tuple[GPOPEMethod, ...]:
    out = []
    for m in default_methods(s.iterations, s.batch_size):
        grid = {"gpope_product": (1.0, 10.0, 1e2, 1e3, 1e4)}.get(m.name,
                                                                (1e-4, 1e-3, 1e-2, 0.1, 1.0))
        m = replace(m, step_grid=grid, clip_grid=(0.01, 0.1, 1.0))
        out.append(m.coarse() if s.coarse_grid else m)
    return tuple(out)


# ---------------------------------------------------------------------- problems
@dataclass(eq=False)
class FeatureProblem:
    """A data set with a feature map, importance ratios and ground-truth population statistics
    (``truth``: the population ``A, b, C``); ``m`` is the number of trajectories."""

    transitions: Transitions
    features: Any
    rho: np.ndarray
    gamma: float
    truth: tuple[np.ndarray, np.ndarray, np.ndarray]
    length_scale: float = 200.0
    m: int = field(init=False)
    _stats: dict[str, TrajectoryStats] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.m = self.transitions.n_trajectories

    def stats(self, normalization: str) -> TrajectoryStats:
        """Per-trajectory statistics (cached)."""
        if normalization not in self._stats:
            self._stats[normalization] = statistics_from_transitions(
                self.transitions, self.features, self.rho, gamma=self.gamma,
                normalization=normalization,  # type: ignore[arg-type]
                length_scale=self.length_scale)
        return self._stats[normalization]

    def rel_mspbe(self, thetas: np.ndarray) -> np.ndarray:
        """(R,) relative MSPBE against the truth."""
        return np.asarray(relative_mspbe(np.atleast_2d(thetas), *self.truth))

    def value_error(self, thetas: np.ndarray) -> np.ndarray:
        """Not computed for continuous domains (NaN)."""
        return np.full(np.atleast_2d(thetas).shape[0], np.nan)

    def lstd_theta(self, weighted: bool) -> np.ndarray:
        """LSTD (on-policy) or WIS-LSTD (off-policy) solution, non-private."""
        from gpope.core.baselines import lstd_from_transitions, wis_lstd_from_transitions

        if weighted:
            return wis_lstd_from_transitions(self.transitions, self.features, self.rho,
                                             gamma=self.gamma).theta
        return lstd_from_transitions(self.transitions, self.features, None, gamma=self.gamma).theta


def _grid_transitions(tr: Transitions, grid: int) -> Transitions:
    """Replace (x, v) states by their cell index on a grid x grid aggregation (public bounds)."""
    from gpope.core.envs import mountaincar as mc

    def cell(s: np.ndarray) -> np.ndarray:
        lo, hi = np.array(mc.LOW), np.array(mc.HIGH)
        ij = np.clip(((s - lo) / (hi - lo) * grid).astype(np.int64), 0, grid - 1)
        return (ij[:, 0] * grid + ij[:, 1]).astype(np.float64)[:, None]

    return replace(tr, state=cell(tr.state), next_state=cell(tr.next_state))


class _Domain:
    """Simulation and truth of one (domain, figure) pair."""

    def __init__(self, domain: str, figure: str, s: Any) -> None:
        from gpope.core.features import TabularFeatures

        self.domain, self.figure, self.s = domain, figure, s
        if domain == "mountaincar":
            from gpope.core.envs import mountaincar as mc

            self.behavior = mc.learned_policy("epsilon_greedy", epsilon=s.behavior_epsilon)
            self.target = self.behavior if figure == "on" else mc.uniform_policy()
            self.features = TabularFeatures(s.grid * s.grid) if figure == "on" else mc.feature_map()
        else:
            from gpope.core.envs import hiv, train_hiv

            self.behavior = train_hiv.behavior_policy()
            self.target = train_hiv.target_policy()
            self.features = hiv.hiv_feature_map()

    def _simulate(self, m: int, rng: np.random.Generator) -> Transitions:
        """m behaviour episodes, raw rewards (on-policy mountain car: grid-cell states)."""
        if self.domain == "mountaincar":
            from gpope.core.envs import mountaincar as mc

            tr = mc.generate(m, rng, self.behavior)
            return _grid_transitions(tr, self.s.grid) if self.figure == "on" else tr
        from gpope.core.envs import hiv

        return hiv.generate(m, rng, self.behavior)

    def generate(self, m: int, rng: np.random.Generator) -> Transitions:
        """Simulate m episodes; rewards multiplied by the public ``reward_scale``."""
        tr = self._simulate(m, rng)
        return replace(tr, reward=tr.reward * self.s.reward_scale)

    def rho(self, tr: Transitions) -> np.ndarray:
        if self.figure == "on":
            return np.ones(tr.n_transitions)
        from gpope.core.policies import importance_ratios

        return importance_ratios(self.target, tr)

    def _truth_key(self, seed: int) -> tuple[Any, ...]:
        s = self.s
        return (self.domain, self.figure, int(seed), s.truth_trajectories, s.gamma, s.reward_scale,
                getattr(s, "grid", None), getattr(s, "behavior_epsilon", None))

    def _truth_rng(self, seed: int) -> np.random.Generator:
        return np.random.default_rng(seed_seq(seed, common.TRUTH, 0 if self.figure == "on" else 1))

    def truth(self, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Population A, b, C from a large independent sample (cached per process)."""
        key = self._truth_key(seed)
        if key not in _TRUTH_CACHE:
            rng = self._truth_rng(seed)
            n = self.s.truth_trajectories
            if self.domain == "mountaincar" and self.figure == "off":
                from gpope.core.envs import mountaincar as mc

                A, b, C = mc.large_sample_statistics(
                    self.behavior, self.target, rng, gamma=self.s.gamma, length_scale=200.0,
                    n_trajectories=n)
                truth = (A, b * self.s.reward_scale, C)
            elif self.domain == "hiv":
                from gpope.core.envs import train_hiv

                A, b, C = train_hiv.large_sample_statistics(
                    self.behavior, self.target, rng, gamma=self.s.gamma, length_scale=200.0,
                    n_trajectories=n, chunk=HIV_COHORT)
                truth = (A, b * self.s.reward_scale, C)
            else:
                tr = self.generate(n, rng)
                st = statistics_from_transitions(tr, self.features, np.ones(tr.n_transitions),
                                                 gamma=self.s.gamma, length_scale=200.0,
                                                 representation="tabular")
                truth = st.population()
            _TRUTH_CACHE[key] = truth
        return _TRUTH_CACHE[key]

    def _hiv_truth_from(self, sample: Transitions, seed: int) -> None:
        from gpope.core.envs import train_hiv

        A, b, C = train_hiv.sample_statistics(sample, self.target, gamma=self.s.gamma,
                                              length_scale=200.0, features=self.features)
        _TRUTH_CACHE[self._truth_key(seed)] = (A, b * self.s.reward_scale, C)

    def problem(self, m: int, rng: np.random.Generator, seed: int) -> FeatureProblem:
        return self._problem(self.generate(m, rng), seed)

    def _problem(self, tr: Transitions, seed: int) -> FeatureProblem:
        return FeatureProblem(tr, self.features, self.rho(tr), self.s.gamma, self.truth(seed))

    def problems(self, requests: Sequence[tuple[int, np.random.SeedSequence]], seed: int
                 ) -> Iterator[FeatureProblem]:
        """The problems of ``requests`` (m, data stream), in order, each simulated from its own
        stream exactly as :meth:`problem` would; HIV data sets (and the truth sample, if not yet
        cached and at most :data:`HIV_COHORT` patients) are simulated in shared cohorts."""
        if self.domain != "hiv":
            for m, ss in requests:
                yield self.problem(m, np.random.default_rng(ss), seed)
            return
        from gpope.core.envs import hiv

        n_truth = self.s.truth_trajectories
        need_truth = self._truth_key(seed) not in _TRUTH_CACHE and n_truth <= HIV_COHORT
        j = 0
        while j < len(requests) or need_truth:
            sizes: list[int] = [n_truth] if need_truth else []
            rngs = [self._truth_rng(seed)] if need_truth else []
            while j < len(requests) and (not sizes or sum(sizes) + requests[j][0] <= HIV_COHORT):
                sizes.append(int(requests[j][0]))
                rngs.append(np.random.default_rng(requests[j][1]))
                j += 1
            sims = hiv.generate_many(sizes, rngs, self.behavior)
            if need_truth:
                self._hiv_truth_from(sims.pop(0), seed)
                need_truth = False
            for tr in sims:
                yield self._problem(replace(tr, reward=tr.reward * self.s.reward_scale), seed)


def _figures(domain: str) -> tuple[str, ...]:
    return ("on", "off") if domain == "mountaincar" else ("off",)


# ---------------------------------------------------------------------- tuning and runs
def tune_continuous(domain: str, settings: Any, *, public_seed: int | None = None,
                    log: Log | None = None) -> TuningTable:
    """Tune every GPOPE variant per (figure, m, epsilon) on PUBLIC simulated data."""
    seed = settings.seed + 1 if public_seed is None else int(public_seed)
    best, rows = {}, []
    for f, figure in enumerate(_figures(domain)):
        dom = _Domain(domain, figure, settings)
        sizes = settings.tune_sizes or settings.sizes
        requests = [(m, seed_seq(seed, common.PUBLIC, common.DATA, f, m)) for m in sizes]
        for i, (m, problem) in enumerate(zip(sizes, dom.problems(requests, settings.seed),
                                             strict=True)):
            for e, eps in enumerate(settings.epsilons):
                for j, method in enumerate(settings.methods()):
                    hyper, grid = common.tune_method(
                        problem, method, epsilon=eps, delta=settings.delta,
                        ss=seed_seq(seed, common.PUBLIC, common.RUN, f, i, e, j),
                        trials=settings.tune_trials, log=log)
                    best[(f"{figure}:{method.name}", m, eps)] = hyper
                    rows.extend(dict(r, figure=figure) for r in grid)
    return TuningTable(best=best, rows=rows, seed=seed, domain=domain)


def run_continuous(domain: str, settings: Any, tuning: TuningTable, *, log: Log | None = None
                   ) -> list[dict[str, Any]]:
    """One record per (trial, figure, m, epsilon, method)."""
    s = settings
    records: list[dict[str, Any]] = []
    blocks = common.block_sizes(s.trials, s.data_blocks)
    for f, figure in enumerate(_figures(domain)):
        dom = _Domain(domain, figure, s)
        cells = [(i, m, blk, n_tr) for i, m in enumerate(s.sizes) for blk, n_tr in enumerate(blocks)]
        streams = [(m, seed_seq(s.seed, common.DATA, f, i, blk)) for i, m, blk, _ in cells]
        problems = dom.problems(streams, s.seed)
        trial0 = 0
        t0 = time.perf_counter()
        for (i, m, blk, n_tr), problem in zip(cells, problems, strict=True):
            trial0 = 0 if blk == 0 else trial0
            ids = list(range(trial0, trial0 + n_tr))
            trial0 += n_tr

            add = partial(common.add_records, records, problem, problem.features.n_features, ids)
            head = {"domain": domain, "figure": figure, "m": m, "epsilon": None,
                    "delta": s.delta, "block": blk}
            if figure == "on":
                add(head, "lstd", "LSTD (non-private)", problem.lstd_theta(False))
                for e, eps in enumerate(s.epsilons):
                    if eps <= 1.0:
                        rng = np.random.default_rng(seed_seq(s.seed, common.BASELINE, f, i, blk, e))
                        add({**head, "epsilon": eps}, "dp_lsw", "DP-LSW (grid)",
                            _dp_lsw_grid(problem, s, eps, rng, n_tr))
            else:
                add(head, "wis_lstd", "WIS-LSTD (non-private)", problem.lstd_theta(True))
            for e, eps in enumerate(s.epsilons):
                for j, method in enumerate(s.methods()):
                    hyper = tuning.get(f"{figure}:{method.name}", m, eps)
                    with np.errstate(all="ignore"):
                        thetas, info = common.run_gpope_method(
                            problem, method, epsilon=eps, delta=s.delta, hyper=hyper,
                            multiplier=1.0, ss=seed_seq(s.seed, common.RUN, f, i, blk, e, j),
                            trials=n_tr)
                    add({**head, "epsilon": eps}, method.name, f"{method.label} eps={eps:g}",
                        thetas, extra={"sigma": info["sigma"], "step_size": hyper.step_size,
                                       "clip": hyper.clip, "seconds": info["seconds"] / n_tr})
            if log is not None:
                log(f"{domain} [{figure}] m={m} block {blk + 1}/{len(blocks)} done "
                    f"({time.perf_counter() - t0:.1f}s)")
            t0 = time.perf_counter()
    return records


def _dp_lsw_grid(problem: FeatureProblem, s: Any, eps: float, rng: np.random.Generator,
                 trials: int) -> np.ndarray:
    """DP-LSW on the aggregated grid; costs (negated rewards) in [0, 1], estimate negated back."""
    from gpope.core.baselines import dp_lsw

    tr = problem.transitions
    n = problem.features.n_features
    cost = -tr.reward / s.reward_scale  # back to the raw costs in [0, 1] (public transformation)
    theta = dp_lsw(tr.state[:, 0], cost, tr.traj_index, n_states=n, features=np.eye(n),
                   weights=np.full(n, 1.0 / n), gamma=s.gamma,
                   f_max=(1 - s.gamma ** 200) / (1 - s.gamma), epsilon=eps, delta=s.delta,
                   rng=rng, draws=trials).theta
    return -s.reward_scale * theta

"""Shared machinery of the experiment harness: seeds, domain problems, GPOPE trial batches, tuning.

Seeds. Every random stream is a :class:`numpy.random.SeedSequence` built from the experiment seed
and a tuple of integer keys naming its role, so streams never overlap and any single cell can be
re-run: ``(seed, DATA, size_index, block)`` simulates a data block, ``(seed, RUN, size_index,
block, method, multiplier, epsilon)`` draws the sample plan and noise of a batch of trials (the
solver splits it into independent sampling and noise streams), ``(seed, PUBLIC, ...)`` simulates
the public tuning data (never the evaluation data).

Trials. ``trials`` runs are split into ``data_blocks`` blocks: each block simulates a fresh data set
of m trajectories; the trials of a block share it and differ in their sample plans and noise
(drawn independently, batched through :func:`gpope.core.gpope.solver.run_gpope_trials`). With
``data_blocks == trials`` every trial has fresh data. Non-private baselines are computed once per
block (they have no noise); output-perturbation baselines draw fresh noise per trial.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Protocol, Self

import numpy as np

from gpope.core.experiments.methods import GPOPEMethod, Hyper
from gpope.core.gpope.solver import run_gpope_trials
from gpope.core.statistics import TrajectoryStats
from gpope.core.validation import check_int, check_number

__all__ = ["BASELINE", "DATA", "PUBLIC", "RUN", "TRUTH", "HarnessSettings", "Log", "Problem",
           "TuningTable", "add_records", "block_sizes", "released", "run_gpope_method", "seed_seq",
           "summarize", "tune_method"]

DATA, RUN, PUBLIC, BASELINE, TRUTH = 1, 2, 3, 4, 5

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class HarnessSettings:
    """Settings every experiment domain shares (each domain adds its own and sets the defaults).

    Attributes:
        sizes: data sizes m.
        trials: independent trials per cell; data_blocks: fresh data sets per m (trials are
            spread over them).
        iterations: GPOPE N (uniform); Poisson steps = N / batch_size (the expected Poisson
            batch of the product default).
        tune_trials: trials per grid point when tuning; tune_sizes: sizes tuned (others use the
            nearest tuned size; None: all sizes); coarse_grid: tune on a 3 x 2 grid.
    """

    sizes: tuple[int, ...]
    delta: float = 1e-5
    trials: int = 20
    data_blocks: int = 2
    iterations: int = 20_000
    batch_size: float = 10.0
    tune_trials: int = 2
    tune_sizes: tuple[int, ...] | None = None
    coarse_grid: bool = False
    seed: int = 0

    #: Overrides of the smoke-test preset (:meth:`quick`).
    _QUICK: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        o = type(self).__name__
        sizes = tuple(check_int(o, "sizes", int(v), ge=2) for v in self.sizes)
        object.__setattr__(self, "sizes", sizes)
        if self.tune_sizes is not None:
            object.__setattr__(self, "tune_sizes", tuple(int(s) for s in self.tune_sizes))
        check_number(o, "delta", self.delta, gt=0.0, lt=1.0)
        for name in ("trials", "data_blocks", "iterations", "tune_trials"):
            check_int(o, name, getattr(self, name), ge=1)

    @classmethod
    def quick(cls, **overrides: Any) -> Self:
        """The smoke-test preset (about a minute): tiny m, few trials, short runs."""
        return cls(**{**cls._QUICK, **overrides})

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings."""
        return asdict(self)


def seed_seq(seed: int, *keys: int) -> np.random.SeedSequence:
    """The SeedSequence of the stream named by ``keys`` under experiment ``seed``."""
    return np.random.SeedSequence([int(seed), *(int(k) for k in keys)])


def block_sizes(trials: int, blocks: int) -> list[int]:
    """Split ``trials`` into ``min(blocks, trials)`` nearly equal positive block sizes."""
    b = max(1, min(int(blocks), int(trials)))
    base, extra = divmod(int(trials), b)
    return [base + (1 if i < extra else 0) for i in range(b)]


class Problem(Protocol):
    """One simulated data set of a domain with its ground truth (all a method needs)."""

    m: int

    def stats(self, normalization: str) -> TrajectoryStats:
        """Per-trajectory statistics under ``normalization`` (cached)."""

    def rel_mspbe(self, thetas: np.ndarray) -> np.ndarray:
        """(R,) relative MSPBE against the domain's ground-truth A, b, C."""

    def value_error(self, thetas: np.ndarray) -> np.ndarray:
        """(R,) RMS value error against the ground-truth values (NaN when unknown)."""


def released(res: Any, method: GPOPEMethod) -> np.ndarray:
    """The released iterate of a trials result: the average if the method averages, else theta."""
    return res.theta_avg if method.averaging != "none" else res.theta


def run_gpope_method(problem: Problem, method: GPOPEMethod, *, epsilon: float | None, delta: float,
                     hyper: Hyper, multiplier: float, ss: np.random.SeedSequence,
                     trials: int) -> tuple[np.ndarray, dict[str, float]]:
    """``trials`` independent GPOPE runs of ``method`` on one data set, batched: (released thetas
    (trials, n), info with sigma, steps, seconds)."""
    cfg = method.config(problem.m, epsilon, delta, hyper, multiplier)
    t0 = time.perf_counter()
    res = run_gpope_trials(problem.stats(method.normalization), cfg, np.random.default_rng(ss),
                           trials)
    theta = released(res, method)
    info = {"sigma": float(cfg.noise_multiplier or 0.0), "steps": float(cfg.iterations),
            "seconds": time.perf_counter() - t0}
    return theta, info


def add_records(records: list[dict[str, Any]], problem: Problem, n: int, ids: list[int],
                head: dict[str, Any], method: str, label: str, thetas: np.ndarray, *,
                multiplier: float = 1.0, extra: dict[str, Any] | None = None,
                **fields: Any) -> None:
    """Append one record per trial id: ``head``, the trial, the method, ``fields``, the step
    multiplier, the trial's relative MSPBE and value error, then ``extra``."""
    th = np.broadcast_to(np.atleast_2d(thetas), (len(ids), n))
    rm, ve = problem.rel_mspbe(th), problem.value_error(th)
    records.extend({**head, "trial": tid, "method": method, "label": label, **fields,
                    "multiplier": multiplier, "rel_mspbe": float(rm[k]),
                    "value_error": float(ve[k]), **(extra or {})} for k, tid in enumerate(ids))


def _score(values: np.ndarray) -> float:
    """Tuning criterion: mean relative MSPBE, non-finite runs count as +inf."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.mean(v)) if np.all(np.isfinite(v)) else math.inf


def tune_method(problem: Problem, method: GPOPEMethod, *, epsilon: float | None, delta: float,
                ss: np.random.SeedSequence, trials: int,
                log: Callable[[str], None] | None = None) -> tuple[Hyper, list[dict[str, Any]]]:
    """Grid search over ``method.step_grid x method.clip_grid`` on PUBLIC data.

    ``problem`` must be simulated from a public stream (never the evaluation data). Each grid point
    runs ``trials`` noisy trials; the point with the smallest mean relative MSPBE wins: (best
    Hyper, one row per grid point with its score).
    """
    rows: list[dict[str, Any]] = []
    best: tuple[float, Hyper] | None = None
    children = ss.spawn(len(method.clip_grid) * len(method.step_grid))
    k = 0
    for h in method.clip_grid:
        for eta in method.step_grid:
            hyper = Hyper(step_size=eta, clip=h)
            with np.errstate(all="ignore"):
                thetas, info = run_gpope_method(problem, method, epsilon=epsilon, delta=delta,
                                                hyper=hyper, multiplier=1.0, ss=children[k],
                                                trials=trials)
                score = _score(problem.rel_mspbe(thetas))
            k += 1
            rows.append({"method": method.name, "m": problem.m, "epsilon": epsilon,
                         "step_size": eta, "clip": h, "score": score, "sigma": info["sigma"]})
            if log is not None:
                log(f"tune {method.name} m={problem.m} eps={epsilon} h={h:g} eta={eta:g}: "
                    f"{score:.4g}")
            if best is None or score < best[0]:
                best = (score, hyper)
    if best is None:  # pragma: no cover - grids are non-empty
        raise ValueError("empty tuning grid")
    return best[1], rows


def summarize(records: Sequence[dict[str, Any]], keys: Sequence[str],
              metrics: Sequence[str] = ("rel_mspbe", "value_error")) -> list[dict[str, Any]]:
    """Group ``records`` by ``keys``; mean, std, median and count of each metric per group."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    out = []
    for key, rows in groups.items():
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        row["n"] = len(rows)
        for metric in metrics:
            v = np.array([r.get(metric, math.nan) for r in rows], dtype=np.float64)
            v = v[~np.isnan(v)]
            if len(v):
                row[f"{metric}_mean"] = float(np.mean(v))
                row[f"{metric}_std"] = float(np.std(v, ddof=1)) if len(v) > 1 else 0.0
                row[f"{metric}_median"] = float(np.median(v))
        out.append(row)
    return out


@dataclass(frozen=True)
class TuningTable:
    """Tuned hyper-parameters: ``best[(method, m, epsilon)] -> Hyper`` plus every grid score."""

    best: dict[tuple[str, int, float | None], Hyper]
    rows: list[dict[str, Any]]
    seed: int
    domain: str

    def get(self, method: str, m: int, epsilon: float | None) -> Hyper:
        """The tuned Hyper; falls back to the nearest tuned m (log distance) for this method/eps."""
        key = (method, int(m), epsilon)
        if key in self.best:
            return self.best[key]
        cands = [(abs(math.log(k[1] / m)), k) for k in self.best
                 if k[0] == method and k[2] == epsilon]
        if not cands:
            cands = [(abs(math.log(k[1] / m)), k) for k in self.best if k[0] == method]
        if not cands:
            raise KeyError(f"no tuned hyper-parameters for {method}")
        return self.best[min(cands)[1]]

    def to_dict(self) -> dict[str, Any]:
        """JSON form (``best`` as a list of rows)."""
        return {
            "domain": self.domain,
            "public_seed": self.seed,
            "best": [{"method": k[0], "m": k[1], "epsilon": k[2], "step_size": v.step_size,
                      "clip": v.clip} for k, v in sorted(self.best.items(), key=str)],
            "grid": self.rows,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TuningTable:
        """Inverse of :meth:`to_dict`."""
        best = {(r["method"], int(r["m"]), None if r["epsilon"] is None else float(r["epsilon"])):
                Hyper(step_size=float(r["step_size"]), clip=float(r["clip"])) for r in d["best"]}
        return cls(best=best, rows=list(d.get("grid", [])), seed=int(d["public_seed"]),
                   domain=str(d["domain"]))

"""Public tuning of a spec's operating point: (clip, step size) per epsilon on PUBLIC statistics.

:func:`tune_operating_point` runs GPOPE exactly as ``gpope evaluate`` would (same budget rule,
schedule, averaging, accountant; :mod:`gpope.core.gpope.operating`) on the statistics of a PUBLIC
simulated cohort, scores each candidate by the median relative MSPBE of ``trials`` noisy runs
against a public population (A, b, C), and returns the winner per epsilon as
:class:`~gpope.core.gpope.operating.TunedPoint`.

Grids (both reach each domain's own scale):

* **clip**: multiples {1, 3, 10, 30} of the median per-trajectory gradient norm of the public
  cohort at its own LSTD solution (where a converged run's gradients live), extended by factors
  of 3 (at most 4 times) while the best lies at an edge.
* **step size**: eta0 x 10^k, k = -2..2, extended by decades while the best lies at an edge (at
  most 4 times), then x{1/3, 3} around the best; eta0 = 1 / (lambda ln(1 + 1/f)) is the step whose
  inverse-schedule gradient flow covers one time constant of GTD2's slowest direction (lambda,
  the smallest eigenvalue of A^T C^+ A of the public population above 1e-8 of the largest).

Nothing here reads private data: the caller passes public statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpope.core.gpope.operating import TunedPoint, resolve_budget, resolve_step_offset
from gpope.core.gpope.solver import GPOPEConfig, run_gpope_trials
from gpope.core.metrics import relative_mspbe
from gpope.core.statistics import TrajectoryStats

__all__ = ["TuningResult", "clip_grid", "step_grid_center", "tune_operating_point"]

CLIP_MULTIPLES = (1.0, 3.0, 10.0, 30.0)
STEP_DECADES = (-2, -1, 0, 1, 2)
EXTEND = 4


@dataclass(frozen=True)
class TuningResult:
    """Winners per epsilon, every scored candidate, and the grid scales used."""

    points: tuple[TunedPoint, ...]
    rows: list[dict[str, Any]]
    gradient_scale: float
    eta0: float


def clip_grid(stats: TrajectoryStats, population: tuple[np.ndarray, np.ndarray, np.ndarray],
              *, sample: int = 5000) -> tuple[float, tuple[float, ...]]:
    """(median gradient norm at the public LSTD solution, clip grid) of public statistics."""
    A, b, _ = population
    theta = np.linalg.lstsq(A, b, rcond=None)[0]
    idx = np.arange(min(stats.m, sample))
    g = stats.gradients(idx, theta, np.zeros(stats.n))
    scale = float(np.median(np.linalg.norm(g, axis=1)))
    if not scale > 0:
        scale = float(np.median(np.linalg.norm(stats.gradients(idx, np.zeros(stats.n),
                                                               np.zeros(stats.n)), axis=1)))
    return scale, tuple(float(f"{scale * k:.3g}") for k in CLIP_MULTIPLES)


def step_grid_center(population: tuple[np.ndarray, np.ndarray, np.ndarray],
                     step_offset_fraction: float | None) -> float:
    """eta0 of the module docstring (1/lambda for a constant schedule)."""
    A, _, C = population
    H = A.T @ np.linalg.pinv(C, hermitian=True) @ A
    ev = np.linalg.eigvalsh((H + H.T) / 2.0)
    top = float(ev[-1])
    pos = ev[ev > 1e-8 * top] if top > 0 else ev[:0]
    lam = float(pos[0]) if len(pos) else 1.0
    f = step_offset_fraction
    horizon = math.log(1.0 + 1.0 / f) if f is not None and f > 0 else 1.0
    return float(f"{1.0 / (lam * horizon):.3g}")


def tune_operating_point(stats: TrajectoryStats,
                         population: tuple[np.ndarray, np.ndarray, np.ndarray], *,
                         settings: dict[str, Any], epsilons: Sequence[float], delta: float,
                         trials: int, rng: np.random.Generator,
                         clips: Sequence[float] | None = None, steps: Sequence[float] | None = None,
                         refine: bool = True,
                         log: Callable[[str], None] | None = None) -> TuningResult:
    """Tune (clip, step size) per epsilon on public ``stats`` (the public cohort), scored by the
    median relative MSPBE of ``trials`` noisy runs against the public ``population`` (A, b, C).
    ``settings`` holds the fixed solver settings as in an evaluation block; ``clips`` / ``steps``
    give explicit grids (None: the module docstring's rule); ``refine`` extends the automatic grids
    at an edge and tries x{1/3, 3} around the best step size."""
    from gpope.core.accounting import calibrate_sigma

    m = stats.m
    sampling = settings.get("sampling", "poisson")
    N, q = resolve_budget(m=m, sampling=sampling, passes=settings.get("passes"),
                          batch_size=settings.get("batch_size"),
                          iterations=settings.get("iterations"),
                          batch_rate=settings.get("batch_rate"))
    offset = resolve_step_offset(iterations=N, step_offset=settings.get("step_offset"),
                                 step_offset_fraction=settings.get("step_offset_fraction"))
    scale, auto_clips = clip_grid(stats, population)
    schedule = settings.get("step_schedule", "inverse")
    eta0 = step_grid_center(population, settings.get("step_offset_fraction")
                            if schedule == "inverse" else None)
    explicit_clips = bool(clips)
    clips = tuple(clips) if clips else auto_clips
    coarse = tuple(steps) if steps else tuple(float(f"{eta0 * 10.0 ** k:.3g}") for k in STEP_DECADES)
    rows: list[dict[str, Any]] = []
    points = []
    for eps in epsilons:
        sigma = float(calibrate_sigma(m=m, iterations=N, epsilon=float(eps), delta=delta,
                                      accountant=settings.get("accountant", "auto"),
                                      sampling=sampling, batch_rate=q))

        def score(h: float, eta: float, eps: float = float(eps), sigma: float = sigma) -> float:
            cfg = GPOPEConfig(iterations=N, step_size=eta, clip=h, noise_multiplier=sigma,
                              sampling=sampling, batch_rate=q, step_schedule=schedule,
                              step_offset=offset, averaging=settings.get("averaging", "tail"),
                              tail_fraction=settings.get("tail_fraction", 0.5))
            with np.errstate(all="ignore"):
                res = run_gpope_trials(stats, cfg, rng, trials)
                theta = res.theta_avg if res.theta_avg is not None else res.theta
                if not np.isfinite(theta).all():
                    s = math.inf
                else:
                    s = float(np.median(relative_mspbe(theta, *population)))
            rows.append({"epsilon": eps, "clip": h, "step_size": eta, "score": s,
                         "sigma": sigma})
            if log is not None:
                log(f"tune eps={eps:g} clip={h:g} step={eta:g}: relative MSPBE {s:.4g}")
            return s

        results = {(h, eta): score(h, eta) for h in clips for eta in coarse}
        if refine and not explicit_clips:
            # the clip grid must contain the optimum too: while the best clip is at an edge of the
            # tried ones, extend by factors of 3 in that direction at the best step size
            for _ in range(EXTEND):
                h_best, _ = min(results, key=results.get)  # type: ignore[arg-type]
                new = _past_edge(h_best, [h for (h, _) in results], 3.0)
                if new is None:
                    break
                for eta in coarse:
                    results[(new, eta)] = score(new, eta)
        if refine and not steps:
            # the grid must contain the optimum: while the best step size is at an edge of the
            # tried ones, extend by decades in that direction (at most EXTEND times)
            for _ in range(EXTEND):
                h_best, eta_best = min(results, key=results.get)  # type: ignore[arg-type]
                new = _past_edge(eta_best, [eta for (h, eta) in results if h == h_best], 10.0)
                if new is None:
                    break
                results[(h_best, new)] = score(h_best, new)
            h_best, eta_best = min(results, key=results.get)  # type: ignore[arg-type]
            for eta in (float(f"{eta_best / 3:.3g}"), float(f"{eta_best * 3:.3g}")):
                if (h_best, eta) not in results:
                    results[(h_best, eta)] = score(h_best, eta)
        (h, eta), s = min(results.items(), key=lambda kv: (kv[1], kv[0]))
        points.append(TunedPoint(epsilon=float(eps), clip=h, step_size=eta,
                                 score=s if math.isfinite(s) else None))
    return TuningResult(tuple(points), rows, scale, eta0)


def _past_edge(best: float, tried: list[float], factor: float) -> float | None:
    """The next grid value beyond ``best`` when it is the smallest (``best / factor``) or the
    largest (``best * factor``) of ``tried``, to 3 significant digits; None when it is inside."""
    ordered = sorted(set(tried))
    if best == ordered[0]:
        return float(f"{best / factor:.3g}")
    if best == ordered[-1]:
        return float(f"{best * factor:.3g}")
    return None

"""The GPOPE variants compared in the experiments, as public data (no private input).

Three variants appear on every plot where they apply:

* ``gpope_paper`` ("paper accounting"): the paper's Algorithm 1 as published: one trajectory drawn
  uniformly per step, statistics averaged per trajectory (``trajectory_mean``), constant step
  size, last iterate released, sigma from the paper's closed-form moments bound (NOT a valid
  upper bound on epsilon; reproduction only).
* ``gpope_rdp`` ("uniform + RDP"): the same mechanism, sigma from a rigorous RDP accountant under
  replace-one adjacency (sensitivity 2h): the price of rigorous accounting of the paper's sampling.
* ``gpope_product`` ("product default"): Poisson sampling (expected batch ``batch_size``) with the
  PLD accountant, ``transition`` normalisation, an ``inverse`` (eta / (i + i0)) step schedule
  and tail averaging. Its hyper-parameters are tuned on public data like the others.

A :class:`GPOPEMethod` holds the structural choices; the step size and clip bound are tuned per
data size (:func:`gpope.core.experiments.common.tune_method`) and passed in as a :class:`Hyper`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from gpope.core.accounting.registry import accountant_names
from gpope.core.gpope.solver import GPOPEConfig
from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError

__all__ = ["GPOPEMethod", "Hyper", "cached_sigma", "default_methods", "paper_method",
           "product_method", "rdp_method"]


@dataclass(frozen=True)
class Hyper:
    """Tuned public step size eta > 0 (before any step multiplier) and clip h > 0 of one GPOPE
    method at one data size."""

    step_size: float
    clip: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "step_size", check_number("Hyper", "step_size", self.step_size, gt=0.0))
        object.__setattr__(self, "clip", check_number("Hyper", "clip", self.clip, gt=0.0))


@dataclass(frozen=True, kw_only=True)
class GPOPEMethod:
    """Structural settings of one GPOPE variant (public).

    Attributes:
        name: identifier used in CSV/JSON (``gpope_paper``...); label: legend label.
        iterations: N for uniform sampling; for Poisson the number of steps is
            ``max(1, round(iterations / batch_size))`` so both touch about N trajectories.
        batch_size: expected Poisson batch q m (Poisson only).
        step_offset: i0 of the inverse schedule, as a fraction of the number of steps.
        averaging: the released iterate is the average when not "none".
        step_grid, clip_grid: what the tuner tries.
    """

    name: str
    label: str
    sampling: Literal["uniform", "poisson"] = "uniform"
    accountant: str = "paper"
    normalization: Literal["trajectory_mean", "transition"] = "trajectory_mean"
    iterations: int = 20_000
    batch_size: float = 1.0
    step_schedule: Literal["constant", "inverse"] = "constant"
    step_offset: float = 0.0
    averaging: Literal["none", "uniform", "tail"] = "none"
    tail_fraction: float = 0.5
    step_grid: tuple[float, ...] = (0.03, 0.1, 0.3, 1.0, 3.0)
    clip_grid: tuple[float, ...] = (0.001, 0.003, 0.01)

    def __post_init__(self) -> None:
        o = "GPOPEMethod"
        check_choice(o, "sampling", self.sampling, ("uniform", "poisson"))
        check_choice(o, "accountant", self.accountant, accountant_names())
        check_choice(o, "normalization", self.normalization, ("trajectory_mean", "transition"))
        check_int(o, "iterations", self.iterations, ge=1)
        check_number(o, "batch_size", self.batch_size, ge=1.0)
        check_number(o, "step_offset", self.step_offset, ge=0.0)
        object.__setattr__(self, "step_grid", tuple(float(x) for x in self.step_grid))
        object.__setattr__(self, "clip_grid", tuple(float(x) for x in self.clip_grid))
        if not self.step_grid or not self.clip_grid:
            raise ConfigError("The 'step_grid' and 'clip_grid' parameters of GPOPEMethod must be "
                              f"non-empty. Got {self.step_grid!r} and {self.clip_grid!r} instead.")

    def steps(self) -> int:
        """Number of noisy steps N of the run."""
        if self.sampling == "poisson":
            return max(1, round(self.iterations / self.batch_size))
        return self.iterations

    def batch_rate(self, m: int) -> float | None:
        """Poisson rate q = batch_size / m (capped at 1), None for uniform sampling."""
        return min(1.0, self.batch_size / m) if self.sampling == "poisson" else None

    def sigma(self, m: int, epsilon: float, delta: float) -> float:
        """Noise multiplier for (epsilon, delta) at m trajectories (cached)."""
        return cached_sigma(m, self.steps(), float(epsilon), float(delta), self.accountant,
                            self.sampling, self.batch_rate(m))

    def config(self, m: int, epsilon: float | None, delta: float, hyper: Hyper,
               multiplier: float = 1.0) -> GPOPEConfig:
        """The solver configuration; ``epsilon=None`` gives the non-private run (sigma = 0)."""
        N = self.steps()
        sigma = 0.0 if epsilon is None else self.sigma(m, epsilon, delta)
        return GPOPEConfig(
            iterations=N, step_size=hyper.step_size * multiplier, clip=hyper.clip,
            noise_multiplier=sigma, sampling=self.sampling, batch_rate=self.batch_rate(m),
            step_schedule=self.step_schedule, step_offset=self.step_offset * N,
            averaging=self.averaging, tail_fraction=self.tail_fraction)

    def coarse(self) -> GPOPEMethod:
        """Copy with a 3 x 2 grid (the middle step sizes and clip bounds) for quick presets."""
        k = len(self.step_grid) // 2
        c = len(self.clip_grid) // 2
        return replace(self, step_grid=self.step_grid[max(0, k - 1): k + 2],
                       clip_grid=self.clip_grid[max(0, c - 1): c + 1])

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings."""
        d = asdict(self)
        d["steps"] = self.steps()
        return d


@functools.lru_cache(maxsize=1024)
def cached_sigma(m: int, steps: int, epsilon: float, delta: float, accountant: str, sampling: str,
                 batch_rate: float | None) -> float:
    """``calibrate_sigma`` cached by its arguments (calibration costs up to seconds with PLD)."""
    from gpope.core.accounting import calibrate_sigma

    if math.isinf(epsilon):
        return 0.0
    return float(calibrate_sigma(m=m, iterations=steps, epsilon=epsilon, delta=delta,
                                 accountant=accountant, sampling=sampling, batch_rate=batch_rate))


def paper_method(iterations: int = 20_000) -> GPOPEMethod:
    """GPOPE as in the paper (uniform, trajectory_mean, constant step, paper accountant)."""
    return GPOPEMethod(name="gpope_paper", label="GPOPE (paper accounting: not a valid bound)",
                       iterations=iterations)


def rdp_method(iterations: int = 20_000) -> GPOPEMethod:
    """The paper's mechanism with the rigorous RDP accountant (replace-one, sensitivity 2h)."""
    return GPOPEMethod(name="gpope_rdp", label="GPOPE uniform + RDP", accountant="rdp",
                       iterations=iterations)


def product_method(iterations: int = 20_000, batch_size: float = 10.0) -> GPOPEMethod:
    """The product default: Poisson + PLD, transition normalisation, inverse steps, tail averaging."""
    return GPOPEMethod(name="gpope_product", label="GPOPE product (Poisson + PLD)",
                       sampling="poisson", accountant="pld", normalization="transition",
                       iterations=iterations, batch_size=batch_size, step_schedule="inverse",
                       step_offset=0.1, averaging="tail", tail_fraction=0.5,
                       step_grid=(1e3, 3e3, 1e4, 3e4, 1e5), clip_grid=(0.003, 0.01, 0.03))


def default_methods(iterations: int = 20_000, batch_size: float = 10.0) -> tuple[GPOPEMethod, ...]:
    """(paper, rdp, product) with N = ``iterations``."""
    return (paper_method(iterations), rdp_method(iterations),
            product_method(iterations, batch_size))

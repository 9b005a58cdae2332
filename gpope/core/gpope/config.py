"""The settings of one GPOPE run: :class:`GPOPEConfig`, validated once when it is built; every
field is public (it may be logged and released) and its readers never re-validate it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpope.core.accounting.registry import accountant_choices
from gpope.core.gpope.steps import STEP_SCHEDULES
from gpope.core.validation import check_choice, check_int, check_number, check_probability
from gpope.errors import ConfigError

__all__ = ["GPOPEConfig"]

_SAMPLINGS = ("uniform", "poisson")
_AVERAGING = ("none", "uniform", "tail")


@dataclass(frozen=True, kw_only=True)
class GPOPEConfig:
    """Settings of one GPOPE run (all public).

    Attributes:
        clip: h > 0, the L2 clip bound of each trajectory's gradient; None = no clipping.
        noise_multiplier: sigma >= 0 (noise std = h sigma); None = calibrate from epsilon/delta.
        delta: with a given sigma, used to report the spent epsilon.
        accountant: "auto" (tightest rigorous for the sampling) or a registered accountant.
        sampling: "uniform" (one trajectory per step, the paper) or "poisson" with rate
            ``batch_rate`` q (required for, and only for, it).
        step_schedule: "constant" (beta_i = eta) or "inverse" (beta_i = eta / (i + step_offset)).
        averaging: "none", "uniform" (mean of all N post-update iterates) or "tail" (mean of the
            last ceil(tail_fraction N)).
        trace_every: None, or k >= 1 to record the iterate at steps 0, k, 2k, ... and N.
        secure_noise: draw the noise from the OS CSPRNG as a discrete Gaussian on the public
            grid ``noise_grid`` and round released iterates to it (:mod:`gpope.core.mechanisms.secure_noise`);
            refuses a seed. Opt-in (slower: a numpy loop per step).
        noise_grid: the public grid gamma > 0 of secure noise (None: noise std * 2^-12).
        normalizing_size: poisson only: the PUBLIC size M in the step's normalisation
            ``(sum + noise) / (q M)``; None: the number of trajectories m of the statistics.
            Set it when m itself is not public, e.g. ``gpope evaluate --interval-groups K`` runs
            each group with M = m / K, the expected group size, so the group's actual size is
            never used (nor released through the iterates).
    """

    iterations: int
    step_size: float
    clip: float | None = None
    noise_multiplier: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    accountant: str = "auto"
    sampling: Literal["uniform", "poisson"] = "uniform"
    batch_rate: float | None = None
    step_schedule: Literal["constant", "inverse"] = "constant"
    step_offset: float = 1.0
    averaging: Literal["none", "uniform", "tail"] = "none"
    tail_fraction: float = 0.5
    trace_every: int | None = None
    secure_noise: bool = False
    noise_grid: float | None = None
    normalizing_size: float | None = None

    def __post_init__(self) -> None:
        o = "GPOPEConfig"
        object.__setattr__(self, "normalizing_size", check_number(
            o, "normalizing_size", self.normalizing_size, gt=0.0, allow_none=True))
        if self.normalizing_size is not None and self.sampling != "poisson":
            raise ConfigError("The 'normalizing_size' parameter of GPOPEConfig applies to "
                              "sampling='poisson' only. Got "
                              f"normalizing_size={self.normalizing_size!r} with sampling="
                              f"{self.sampling!r}.")
        if not isinstance(self.secure_noise, bool):
            raise ConfigError("The 'secure_noise' parameter of GPOPEConfig must be a bool. Got "
                              f"{self.secure_noise!r} instead.")
        object.__setattr__(self, "noise_grid", check_number(
            o, "noise_grid", self.noise_grid, gt=0.0, allow_none=True))
        if self.secure_noise and self.clip is None:
            raise ConfigError("The 'secure_noise' parameter of GPOPEConfig needs a clip bound "
                              "(secure noise is calibrated to it). Got clip=None.")
        set_ = object.__setattr__
        set_(self, "iterations", check_int(o, "iterations", self.iterations, ge=1))
        set_(self, "step_size", check_number(o, "step_size", self.step_size, gt=0.0))
        set_(self, "clip", check_number(o, "clip", self.clip, gt=0.0, allow_none=True))
        set_(self, "noise_multiplier",
             check_number(o, "noise_multiplier", self.noise_multiplier, ge=0.0, allow_none=True))
        set_(self, "epsilon", check_number(o, "epsilon", self.epsilon, gt=0.0, allow_none=True))
        set_(self, "delta",
             check_number(o, "delta", self.delta, gt=0.0, lt=1.0, allow_none=True))
        check_choice(o, "accountant", self.accountant, accountant_choices())
        check_choice(o, "sampling", self.sampling, _SAMPLINGS)
        check_choice(o, "step_schedule", self.step_schedule, STEP_SCHEDULES)
        set_(self, "step_offset", check_number(o, "step_offset", self.step_offset, ge=0.0))
        check_choice(o, "averaging", self.averaging, _AVERAGING)
        set_(self, "tail_fraction",
             check_number(o, "tail_fraction", self.tail_fraction, gt=0.0, le=1.0))
        set_(self, "trace_every",
             check_int(o, "trace_every", self.trace_every, ge=1, allow_none=True))
        if self.sampling == "poisson":
            if self.batch_rate is None:
                raise ConfigError("The 'batch_rate' parameter of GPOPEConfig must be a number in "
                                  "(0, 1] when sampling='poisson' (the probability q that a "
                                  "trajectory joins a step's batch). Got None instead.")
            set_(self, "batch_rate", check_probability(o, "batch_rate", self.batch_rate))
        elif self.batch_rate is not None:
            raise ConfigError("The 'batch_rate' parameter of GPOPEConfig must be None when "
                              "sampling='uniform' (it applies only to sampling='poisson'). Got "
                              f"{self.batch_rate!r} instead.")
        if self.noise_multiplier is None:
            if self.epsilon is None or self.delta is None or self.clip is None:
                raise ConfigError("The 'noise_multiplier' parameter of GPOPEConfig is None, so "
                                  "sigma is calibrated: 'epsilon', 'delta' and 'clip' must all be "
                                  f"given. Got epsilon={self.epsilon!r}, delta={self.delta!r}, "
                                  f"clip={self.clip!r} instead. For a non-private run set "
                                  "noise_multiplier=0.")
        else:
            if self.epsilon is not None:
                raise ConfigError("The 'epsilon' parameter of GPOPEConfig must be None when "
                                  "'noise_multiplier' is given (epsilon is then reported, not "
                                  f"targeted). Got epsilon={self.epsilon!r} with noise_multiplier="
                                  f"{self.noise_multiplier!r}; give only one of them.")
            if self.noise_multiplier > 0 and self.clip is None:
                raise ConfigError("The 'clip' parameter of GPOPEConfig must be > 0 when "
                                  "noise_multiplier > 0: noise without clipping gives no privacy "
                                  "(the noise std is clip * sigma). Got clip=None with "
                                  f"noise_multiplier={self.noise_multiplier!r}.")

    def secure_grid(self, noise_std: float) -> float:
        """The public grid of secure noise for noise of std ``noise_std`` (``noise_grid``, by
        default :func:`gpope.core.mechanisms.secure_noise.default_grid`: ``noise_std * 2^-12``)."""
        if self.noise_grid is not None:
            return float(self.noise_grid)
        from gpope.core.mechanisms.secure_noise import default_grid

        return default_grid(noise_std, float(self.clip or 1.0))

    @property
    def is_private(self) -> bool:
        """True when the mechanism adds calibrated or given noise to clipped gradients."""
        return self.clip is not None and (
            self.noise_multiplier is None or self.noise_multiplier > 0
        )

    @property
    def averaged_iterations(self) -> int:
        """How many final iterates the average covers (``averaging`` "tail": ceil(tail_fraction
        N), at least 1; otherwise all N)."""
        if self.averaging == "tail":
            return max(1, math.ceil(self.tail_fraction * self.iterations))
        return self.iterations

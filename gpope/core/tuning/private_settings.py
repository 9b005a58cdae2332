"""The public rules of ``gpope evaluate --tune private`` (conf ``evaluation.private_tuning``): a
light module the settings resolver reads without importing the tuning itself
(:mod:`gpope.core.tuning.private`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpope.errors import ConfigError

__all__ = ["PrivateTuningSettings"]


@dataclass(frozen=True)
class PrivateTuningSettings:
    """Public rules of ``gpope evaluate --tune private``: generic rules, not values tuned to a data
    set, each documented where it is set (``conf/default.yaml``, ``evaluation.private_tuning``)."""

    clip_quantile: float = 0.5
    statistics_quantile: float = 0.9
    quantile_share: float = 0.02
    statistics_share: float = 0.1
    step_multipliers: tuple[float, ...] = (1.0, 4.0, 16.0, 64.0)
    clip_multipliers: tuple[float, ...] = (1.0,)
    score_z: float = 1.0
    norm_low: float = 1e-6
    norm_high: float = 1e3
    bins_per_decade: int = 4

    def __post_init__(self) -> None:
        import math

        from gpope.core.validation import check_int, check_number, check_probability

        o = "PrivateTuningSettings"
        check_probability(o, "clip_quantile", self.clip_quantile)
        check_probability(o, "statistics_quantile", self.statistics_quantile)
        check_number(o, "quantile_share", self.quantile_share, gt=0.0, lt=0.5)
        check_number(o, "statistics_share", self.statistics_share, gt=0.0, lt=0.5)
        check_number(o, "score_z", self.score_z, ge=0.0)
        check_number(o, "norm_low", self.norm_low, gt=0.0)
        check_number(o, "norm_high", self.norm_high, gt=self.norm_low)
        check_int(o, "bins_per_decade", self.bins_per_decade, ge=1)
        if 2 * self.quantile_share + self.statistics_share >= 0.9:
            raise ConfigError("The shares of PrivateTuningSettings must leave at least 10% of the "
                              "budget to GPOPE: 2 * quantile_share + statistics_share < 0.9. Got "
                              f"quantile_share={self.quantile_share!r}, "
                              f"statistics_share={self.statistics_share!r}.")
        for name in ("step_multipliers", "clip_multipliers"):
            vals = tuple(float(v) for v in getattr(self, name))
            if not vals or any(not (math.isfinite(v) and v > 0) for v in vals):
                raise ConfigError(f"The '{name}' parameter of PrivateTuningSettings must be a "
                                  f"non-empty list of numbers > 0. Got {getattr(self, name)!r} "
                                  "instead.")
            object.__setattr__(self, name, vals)

    @property
    def grid(self) -> Any:
        """The public log grid of both histograms (:class:`gpope.core.mechanisms.quantile.LogGrid`)."""
        from gpope.core.mechanisms.quantile import LogGrid

        return LogGrid(lo=self.norm_low, hi=self.norm_high, bins_per_decade=self.bins_per_decade)

    @property
    def n_candidates(self) -> int:
        """K, the number of GPOPE runs."""
        return len(self.step_multipliers) * len(self.clip_multipliers)

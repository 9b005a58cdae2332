"""The public settings of the policy value release (conf ``evaluation.policy_value``), read by
the release, the run's settings and the audit; it imports nothing heavy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpope.core.validation import check_choice, check_fields, check_int
from gpope.errors import ConfigError

__all__ = ["METHODS", "PolicyValueSettings"]

#: The interval methods of the release.
METHODS = ("bernstein", "normal")


@dataclass(frozen=True)
class PolicyValueSettings:
    """Public settings of the release (conf ``evaluation.policy_value``).

    Attributes:
        share: share of the run's (epsilon, delta) spent on this release, in (0, 1): in a run
            the configuration's ``evaluation.policy_value_share`` (not a key of this block).
        clip_share: share of the release's 1/sigma^2 spent on the clip histograms.
        moments_share: share of 1/sigma^2 spent on the second moments.
        behaviour_weight: off-policy, the behaviour return's weight in the first moments and in
            its own second moment, relative to the target's terms.
        false_alarm: probability that noise alone stops a walk over an empty grid (the walk
            stops at the first bin whose noisy count exceeds z = Phi^-1(1 - false_alarm / bins)
            noise stds, Bonferroni over the bins).
        max_clipped: the return g is not clipped (nor floored) when z noise standard deviations
            of a bin count exceed this fraction of m (the histogram cannot resolve so few patients).
        bins_per_decade: resolution of the clip grid (a clip is at most a factor
            10^(1/bins_per_decade) above the largest term it keeps).
        grid_decades: the grid spans this many decades below each term's public bound.
        method: ``bernstein`` (finite-sample, valid at every m) or ``normal`` (CLT).
        variance_share / noise_share: parts of each end's alpha spent on the variance's upper
            bound and on the privacy noise (the rest goes to the sampling bound).
        clamp_share: part of an end's alpha spent on bounding what the return clamp moves
            (:mod:`gpope.core.policy_value_clamp`), on the ends the clamp can move; taken first.
        clamp_rule_level: the level at which the release compares J(behaviour)'s predicted width
            with and without the histogram's return clamp to pick one (a ranking: either choice's
            interval holds at the run's level).
        first_state_share: share (zCDP, of 1/sigma^2) of the first states' feature moments that
            the direct method's J(target) needs (:mod:`gpope.core.policy_value_direct`).
        first_state_alpha: share of the direct J(target)'s alpha on the first-state mean's
            error (noise and sampling); the rest goes to the estimator's interval of mu . theta.
        count_alpha: part of each row's alpha spent on the released count m~ the means divide
            by (:mod:`gpope.core.mechanisms.count`); unused where the exact m is public.
    """

    share: float = 0.3
    clip_share: float = 0.2
    moments_share: float = 0.2
    behaviour_weight: float = 2.0
    false_alarm: float = 0.05
    max_clipped: float = 0.1
    bins_per_decade: int = 4
    grid_decades: float = 6.0
    method: Literal["bernstein", "normal"] = "bernstein"
    variance_share: float = 0.25
    noise_share: float = 0.25
    clamp_share: float = 0.1
    clamp_rule_level: float = 0.95
    first_state_share: float = 0.3
    first_state_alpha: float = 0.2
    count_alpha: float = 0.05

    def __post_init__(self) -> None:
        within_0_1 = ("share", "clip_share", "moments_share", "false_alarm", "max_clipped",
                      "variance_share", "noise_share", "clamp_share", "clamp_rule_level",
                      "first_state_share", "first_state_alpha", "count_alpha")
        check_fields(self, within_0_1, gt=0.0, lt=1.0)
        check_fields(self, ("behaviour_weight", "grid_decades"), gt=0.0)
        check_int("PolicyValueSettings", "bins_per_decade", self.bins_per_decade, ge=1)
        check_choice("PolicyValueSettings", "method", self.method, METHODS)
        if self.clip_share + self.moments_share >= 1.0:
            raise ConfigError(
                "PolicyValueSettings.clip_share + moments_share must be < 1 (the rest is the "
                f"means' share). Got {self.clip_share} + {self.moments_share}.")
        if self.variance_share + self.noise_share >= 1.0:
            raise ConfigError("PolicyValueSettings.variance_share + noise_share must be < 1.")

    def sub_sigmas(self, sigma: float) -> tuple[float, float, float]:
        """(clip, means, moments) noise multipliers whose composition is Gaussian(sigma)."""
        means = 1.0 - self.clip_share - self.moments_share
        return (sigma / math.sqrt(self.clip_share), sigma / math.sqrt(means),
                sigma / math.sqrt(self.moments_share))

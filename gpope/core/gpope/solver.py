"""The GPOPE solver: differentially private stochastic GTD2 over per-trajectory statistics.

Algorithm 1 of Xie, Thomas and Miklau ("Privacy Preserving Off-Policy Evaluation"), with
x = [theta; w] (2n,), x_1 = 0 and, for i = 1..N:

* ``sampling="uniform"`` (the paper): draw j uniformly from 0..m-1,
  B = clip_h([-A_j^T w ; A_j theta + C_j w - b_j]) + h sigma z, z ~ N(0, I_2n),
  x <- x - beta_i B.
* ``sampling="poisson"``: every trajectory joins the batch independently with probability q;
  B = (sum_{j in batch} clip_h(B_j) + h sigma z) / (q m), x <- x - beta_i B.

clip_h(v) = v / max(1, ||v||_2 / h). Without clipping (``clip=None``) and with sigma = 0 this is
plain stochastic GTD2 (non-private). Poisson batches are drawn as Binomial(m, q) sizes and then
uniform members without replacement, in chunks, so a step costs O(batch), not O(m).

Randomness: ``rng`` (Generator, int seed or None) is split into independent sampling and noise
streams. ``rng=None`` draws both from OS entropy; the result is marked private only then (and only
with clipping and sigma > 0). The sample plan is as secret as the data and is never returned.

Privacy: sigma is calibrated with :func:`gpope.core.accounting.calibrate_sigma` when
``noise_multiplier`` is None; otherwise epsilon is reported with ``epsilon_spent`` (if delta given).

Test-only hook (privacy audit): :func:`run_gpope` and :func:`run_gpope_trials` accept the private
keyword ``_mechanism_override``, a mapping with ``"noise_scale"`` (float multiplying the noise
std; e.g. 0.1 divides the noise by 10), ``"clip"`` (False skips clipping) and/or
``"sensitivity": "h"`` (the sigma-for-sigma/2 trap: uniform sampling calibrated as if a record
moved the sum by h instead of 2h; Poisson: sigma / 2). Such runs have ``private=False``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpope.core.gpope.config import GPOPEConfig
from gpope.core.gpope.iterate import iterate, iterate_secure
from gpope.core.gpope.sample_plan import SeedLike, split_streams
from gpope.core.mechanisms.secure_noise import check_no_seed, round_to_grid
from gpope.core.statistics import TrajectoryStats
from gpope.core.validation import check_int
from gpope.errors import ConfigError

__all__ = ["GPOPEConfig", "GPOPEResult", "GPOPETrialsResult", "run_gpope", "run_gpope_trials"]


@dataclass(frozen=True)
class _RunOutput:
    """The fields every GPOPE output carries, in this order (see :class:`GPOPEResult`)."""

    theta: np.ndarray
    w: np.ndarray
    theta_avg: np.ndarray | None
    sigma: float
    epsilon: float | None
    delta: float | None
    accountant: str
    sampling: str
    iterations: int
    clip: float | None
    private: bool
    privacy_note: str


@dataclass(frozen=True)
class GPOPEResult(_RunOutput):
    """Output of one run.

    Attributes:
        theta, w: (n,) final primal and dual iterates; theta_avg: (n,) averaged iterate, None
            when averaging="none".
        epsilon: of the run (target, reported, inf when non-private, None if no delta).
        accountant: resolved accountant name, "none" when non-private.
        private: True only with OS-entropy randomness, clipping, sigma > 0 and no override;
            privacy_note says why (not).
        trace_steps: (k,) step numbers of the trace; trace_theta, trace_w: (k, n) iterates at
            those steps; None without a trace.
    """

    trace_steps: np.ndarray | None = None
    trace_theta: np.ndarray | None = None
    trace_w: np.ndarray | None = None


@dataclass(frozen=True)
class GPOPETrialsResult(_RunOutput):
    """Output of R independent trials; arrays carry a leading trial axis.

    Attributes:
        theta: (R, n); w: (R, n); theta_avg: (R, n) or None; trace_theta, trace_w: (R, k, n)
        or None; trials: R; the rest as in :class:`GPOPEResult`.
    """

    trials: int
    trace_steps: np.ndarray | None = None
    trace_theta: np.ndarray | None = None
    trace_w: np.ndarray | None = None

    def trial(self, r: int) -> GPOPEResult:
        """The r-th trial as a :class:`GPOPEResult`."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[r]

        return GPOPEResult(theta=self.theta[r], w=self.w[r], theta_avg=pick(self.theta_avg),
                           sigma=self.sigma, epsilon=self.epsilon, delta=self.delta,
                           accountant=self.accountant, sampling=self.sampling,
                           iterations=self.iterations, clip=self.clip, private=self.private,
                           privacy_note=self.privacy_note, trace_steps=self.trace_steps,
                           trace_theta=pick(self.trace_theta), trace_w=pick(self.trace_w))


def _privacy(config: GPOPEConfig, m: int) -> tuple[float, float | None, float | None, str]:
    """(sigma, epsilon, delta, accountant name) of the run."""
    if config.noise_multiplier is not None and (config.noise_multiplier == 0 or config.clip is None):
        return float(config.noise_multiplier), math.inf, config.delta, "none"
    from gpope.core.accounting import calibrate_sigma, epsilon_spent, resolve_accountant

    name = resolve_accountant(config.accountant, config.sampling)
    common = dict(m=m, iterations=config.iterations, delta=config.delta,
                  accountant=config.accountant, sampling=config.sampling,
                  batch_rate=config.batch_rate)
    if config.noise_multiplier is None:
        sigma = calibrate_sigma(epsilon=config.epsilon, **common)
        return float(sigma), config.epsilon, config.delta, name
    sigma = float(config.noise_multiplier)
    if config.delta is None:
        return sigma, None, None, name
    return sigma, float(epsilon_spent(sigma=sigma, **common)), config.delta, name


def run_privacy(config: GPOPEConfig, seeded: bool, *, override: bool = False,
                noise_std: float = 0.0) -> tuple[bool, str]:
    """(private, why) of a run: private only with clipping and noise, OS entropy and no override."""
    if override:
        return False, "mechanism override (test-only): not private"
    if not config.is_private:
        return False, "no clipping or no noise: not private"
    if seeded:
        return False, "fixed seed: not private"
    if config.secure_noise:
        return True, (f"secure noise: OS-CSPRNG discrete Gaussian on the grid "
                      f"{config.secure_grid(noise_std):.3g}, releases rounded to it")
    return True, "OS-entropy noise and sampling"


def run_gpope(stats: TrajectoryStats, config: GPOPEConfig, rng: SeedLike = None, *,
              _mechanism_override: Mapping[str, Any] | None = None) -> GPOPEResult:
    """One GPOPE run (Algorithm 1, or its Poisson-sampled extension):
    ``run_gpope_trials(stats, config, rng, 1).trial(0)``; ``rng`` a Generator or int seed
    (reproducible, not private) or None (OS entropy)."""
    res = run_gpope_trials(stats, config, rng, 1, _mechanism_override=_mechanism_override)
    return res.trial(0)


def run_gpope_trials(stats: TrajectoryStats, config: GPOPEConfig, rng: SeedLike, trials: int, *,
                     _mechanism_override: Mapping[str, Any] | None = None) -> GPOPETrialsResult:
    """R >= 1 independent GPOPE runs vectorised over a leading trial axis; each trial has its
    own sample plan and noise (drawn from the same two streams)."""
    if not isinstance(stats, TrajectoryStats):
        raise ConfigError(f"run_gpope needs a TrajectoryStats; got {type(stats).__name__}. Build "
                          "one with gpope.core.statistics.trajectory_statistics or "
                          "TrajectoryStats.from_dense.")
    if not isinstance(config, GPOPEConfig):
        raise ConfigError(f"run_gpope needs a GPOPEConfig; got {type(config).__name__}.")
    R = check_int("run_gpope_trials", "trials", trials, ge=1)
    override = dict(_mechanism_override or {})
    unknown = set(override) - {"noise_scale", "clip", "sensitivity"}
    if unknown:
        raise ConfigError(
            f"_mechanism_override accepts 'noise_scale', 'clip' and 'sensitivity'; got {unknown}."
        )
    if config.secure_noise:
        check_no_seed(rng, "run_gpope with secure_noise")
        if override:
            raise ConfigError("secure_noise runs refuse _mechanism_override.")
    sigma, epsilon, delta, accountant = _privacy(config, stats.m)
    gen_plan, gen_noise, seeded = split_streams(rng)

    h = config.clip if override.get("clip", True) else None
    sigma_used = sigma
    if override.get("sensitivity") == "h":  # the sigma-for-sigma/2 trap (audit only)
        sigma_used = _trap_sigma(config, stats.m, sigma)
    noise_std = 0.0 if config.clip is None else config.clip * sigma_used
    noise_std *= float(override.get("noise_scale", 1.0))
    if config.secure_noise:
        x, acc, trace_steps, trace = iterate_secure(stats, config, gen_plan, R, noise_std)
    else:
        x, acc, trace_steps, trace = iterate(stats, config, gen_plan, gen_noise, R, h,
                                             noise_std)

    n = stats.n
    private, note = run_privacy(config, seeded, override=bool(override), noise_std=noise_std)
    avg = None
    if config.averaging != "none":
        avg = acc / config.averaged_iterations
    if config.secure_noise:  # released values on the public grid (post-processing)
        grid = config.secure_grid(noise_std)
        x = round_to_grid(x, grid)
        avg = None if avg is None else round_to_grid(avg, grid)
        trace = None if trace is None else round_to_grid(trace, grid)
    return GPOPETrialsResult(theta=x[:, :n].copy(), w=x[:, n:].copy(), theta_avg=avg, sigma=sigma,
                             epsilon=epsilon, delta=delta, accountant=accountant,
                             sampling=config.sampling, iterations=config.iterations,
                             clip=config.clip, private=private, privacy_note=note, trials=R,
                             trace_steps=trace_steps,
                             trace_theta=None if trace is None else trace[:, :, :n].copy(),
                             trace_w=None if trace is None else trace[:, :, n:].copy())


def _trap_sigma(config: GPOPEConfig, m: int, sigma: float) -> float:
    """The noise multiplier of the sigma-for-sigma/2 trap (a deliberately broken solver).

    Uniform sampling: sigma calibrated as if one record moved the sum by h (add/remove, Poisson
    rate 1/m: what a DP-SGD library computes) although replace-one moves it by 2h; about half
    the sigma needed. Poisson sampling: sigma / 2 literally.
    """
    if config.sampling == "poisson":
        return sigma / 2.0
    from gpope.core.accounting import calibrate_sigma, resolve_accountant

    if config.noise_multiplier is not None:
        return sigma / 2.0
    return float(calibrate_sigma(
        m=m, iterations=config.iterations, epsilon=config.epsilon, delta=config.delta,
        accountant=resolve_accountant("auto", "poisson"), sampling="poisson", batch_rate=1.0 / m,
    ))


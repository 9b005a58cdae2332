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
moved the sum by h instead of 2h; Poisson: sigma / 2). It exists only
to build deliberately broken solvers for the audit; results of such runs have ``private=False``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from gpope.core.clipping import clip_rows
from gpope.core.kernels import dense_steps, poisson_steps
from gpope.core.secure_noise import (
    check_no_seed,
    round_to_grid,
    rounding_inflation,
    secure_gaussian_noise,
)
from gpope.core.statistics import TrajectoryStats
from gpope.core.steps import STEP_SCHEDULES, step_sizes
from gpope.core.validation import (
    check_choice,
    check_int,
    check_number,
    check_probability,
)
from gpope.errors import ConfigError

__all__ = [
    "GPOPEConfig",
    "GPOPEResult",
    "GPOPETrialsResult",
    "PlanChunk",
    "clip_rows",
    "draw_plan",
    "plan_chunk_steps",
    "run_gpope",
    "run_gpope_trials",
    "split_streams",
]

_ACCOUNTANTS = ("auto", "paper", "rdp", "pld")
_SAMPLINGS = ("uniform", "poisson")
_AVERAGING = ("none", "uniform", "tail")
_CHUNK_STEPS = 4096
_CHUNK_BYTES = 32 * 2**20
_POISSON_MASK_RATE = 0.05  # above this q, membership is drawn as an (m,) mask per step

SeedLike = np.random.Generator | int | None


@dataclass(frozen=True, kw_only=True)
class GPOPEConfig:
    """Settings of one GPOPE run (all public).

    Attributes:
        iterations: N >= 1 steps.
        clip: h > 0, the L2 clip bound of each trajectory's gradient; None = no clipping.
        noise_multiplier: sigma >= 0 (noise std = h sigma); None = calibrate from epsilon/delta.
        epsilon: target epsilon > 0 (with noise_multiplier None).
        delta: delta in (0, 1); with a given sigma, used to report the spent epsilon.
        accountant: "auto" (tightest rigorous for the sampling), "paper", "rdp" or "pld".
        sampling: "uniform" (one trajectory per step, the paper) or "poisson".
        batch_rate: q in (0, 1], required for (and only for) "poisson".
        step_size: eta > 0.
        step_schedule: "constant" (beta_i = eta) or "inverse" (beta_i = eta / (i + step_offset)).
        step_offset: i0 >= 0.
        averaging: "none", "uniform" (mean of all N post-update iterates) or "tail" (mean of the
            last ceil(tail_fraction N)).
        tail_fraction: in (0, 1].
        trace_every: None, or k >= 1 to record the iterate at steps 0, k, 2k, ... and N.
        secure_noise: draw the noise from the OS CSPRNG as a discrete Gaussian on the public
            grid ``noise_grid`` and round released iterates to it (:mod:`gpope.core.secure_noise`);
            refuses a seed. Opt-in (slower: a numpy loop per step).
        noise_grid: the public grid gamma > 0 of secure noise (None: clip * 2^-20).
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
    accountant: Literal["auto", "paper", "rdp", "pld"] = "auto"
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
            raise ConfigError(
                "The 'normalizing_size' parameter of GPOPEConfig applies to sampling='poisson' "
                f"only. Got normalizing_size={self.normalizing_size!r} with sampling="
                f"{self.sampling!r}."
            )
        if not isinstance(self.secure_noise, bool):
            raise ConfigError(
                "The 'secure_noise' parameter of GPOPEConfig must be a bool. Got "
                f"{self.secure_noise!r} instead."
            )
        object.__setattr__(self, "noise_grid", check_number(
            o, "noise_grid", self.noise_grid, gt=0.0, allow_none=True))
        if self.secure_noise and self.clip is None:
            raise ConfigError(
                "The 'secure_noise' parameter of GPOPEConfig needs a clip bound (secure noise "
                "is calibrated to it). Got clip=None."
            )
        set_ = object.__setattr__
        set_(self, "iterations", check_int(o, "iterations", self.iterations, ge=1))
        set_(self, "step_size", check_number(o, "step_size", self.step_size, gt=0.0))
        set_(self, "clip", check_number(o, "clip", self.clip, gt=0.0, allow_none=True))
        set_(self, "noise_multiplier",
             check_number(o, "noise_multiplier", self.noise_multiplier, ge=0.0, allow_none=True))
        set_(self, "epsilon", check_number(o, "epsilon", self.epsilon, gt=0.0, allow_none=True))
        set_(self, "delta",
             check_number(o, "delta", self.delta, gt=0.0, lt=1.0, allow_none=True))
        check_choice(o, "accountant", self.accountant, _ACCOUNTANTS)
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
                raise ConfigError(
                    "The 'batch_rate' parameter of GPOPEConfig must be a number in (0, 1] when "
                    "sampling='poisson' (the probability q that a trajectory joins a step's "
                    "batch). Got None instead."
                )
            set_(self, "batch_rate", check_probability(o, "batch_rate", self.batch_rate))
        elif self.batch_rate is not None:
            raise ConfigError(
                "The 'batch_rate' parameter of GPOPEConfig must be None when sampling='uniform' "
                f"(it applies only to sampling='poisson'). Got {self.batch_rate!r} instead."
            )
        if self.noise_multiplier is None:
            if self.epsilon is None or self.delta is None or self.clip is None:
                raise ConfigError(
                    "The 'noise_multiplier' parameter of GPOPEConfig is None, so sigma is "
                    "calibrated: 'epsilon', 'delta' and 'clip' must all be given. Got "
                    f"epsilon={self.epsilon!r}, delta={self.delta!r}, clip={self.clip!r} "
                    "instead. For a non-private run set noise_multiplier=0."
                )
        else:
            if self.epsilon is not None:
                raise ConfigError(
                    "The 'epsilon' parameter of GPOPEConfig must be None when "
                    "'noise_multiplier' is given (epsilon is then reported, not targeted). "
                    f"Got epsilon={self.epsilon!r} with noise_multiplier="
                    f"{self.noise_multiplier!r}; give only one of them."
                )
            if self.noise_multiplier > 0 and self.clip is None:
                raise ConfigError(
                    "The 'clip' parameter of GPOPEConfig must be > 0 when noise_multiplier > 0: "
                    "noise without clipping gives no privacy (the noise std is clip * sigma). "
                    f"Got clip=None with noise_multiplier={self.noise_multiplier!r}."
                )

    @property
    def grid(self) -> float:
        """The public grid of secure noise (``noise_grid``, default clip * 2^-20)."""
        if self.noise_grid is not None:
            return float(self.noise_grid)
        return float(self.clip or 1.0) * 2.0**-20

    @property
    def is_private(self) -> bool:
        """True when the mechanism adds calibrated or given noise to clipped gradients."""
        return self.clip is not None and (
            self.noise_multiplier is None or self.noise_multiplier > 0
        )


@dataclass(frozen=True)
class GPOPEResult:
    """Output of one run.

    Attributes:
        theta: (n,) final primal iterate theta_{N+1}.
        w: (n,) final dual iterate.
        theta_avg: (n,) averaged iterate, None when averaging="none".
        sigma: noise multiplier used.
        epsilon: epsilon of the run (target, reported, inf when non-private, None if no delta).
        delta: delta or None.
        accountant: resolved accountant name, "none" when non-private.
        sampling: "uniform" or "poisson".
        iterations: N.
        clip: h or None.
        private: True only with OS-entropy randomness, clipping, sigma > 0 and no override.
        privacy_note: why the run is (not) private.
        trace_steps: (k,) step numbers of the trace, or None.
        trace_theta: (k, n) theta at those steps, or None.
        trace_w: (k, n) w at those steps, or None.
    """

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
    trace_steps: np.ndarray | None = None
    trace_theta: np.ndarray | None = None
    trace_w: np.ndarray | None = None


@dataclass(frozen=True)
class GPOPETrialsResult:
    """Output of R independent trials; arrays carry a leading trial axis.

    Attributes:
        theta: (R, n); w: (R, n); theta_avg: (R, n) or None; trace_theta, trace_w: (R, k, n)
        or None; the rest as in :class:`GPOPEResult`.
    """

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
    trials: int
    trace_steps: np.ndarray | None = None
    trace_theta: np.ndarray | None = None
    trace_w: np.ndarray | None = None

    def trial(self, r: int) -> GPOPEResult:
        """The r-th trial as a :class:`GPOPEResult`."""

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[r]

        return GPOPEResult(
            theta=self.theta[r], w=self.w[r], theta_avg=pick(self.theta_avg), sigma=self.sigma,
            epsilon=self.epsilon, delta=self.delta, accountant=self.accountant,
            sampling=self.sampling, iterations=self.iterations, clip=self.clip,
            private=self.private, privacy_note=self.privacy_note, trace_steps=self.trace_steps,
            trace_theta=pick(self.trace_theta), trace_w=pick(self.trace_w),
        )


# ---------------------------------------------------------------------- mechanism pieces
def split_streams(rng: SeedLike) -> tuple[np.random.Generator, np.random.Generator, bool]:
    """(sampling generator, noise generator, seeded?) as independent child streams.

    Every GPOPE loop (the core's and the pipeline's streamed driver) splits ``rng`` with this
    function, so equal seeds give equal plans and noise on every path.
    """
    if rng is None:
        a, b = np.random.SeedSequence().spawn(2)
        return np.random.default_rng(a), np.random.default_rng(b), False
    if isinstance(rng, np.random.Generator):
        a, b = rng.spawn(2)
        return a, b, True
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        a, b = np.random.SeedSequence(int(rng)).spawn(2)
        return np.random.default_rng(a), np.random.default_rng(b), True
    raise ConfigError(
        "The 'rng' argument of run_gpope must be a numpy.random.Generator, an int seed or None "
        f"(OS entropy, required for a private run). Got {type(rng).__name__} instead."
    )



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


def _poisson_plan(
    gen: np.random.Generator, m: int, q: float, steps: int, trials: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Poisson batches for `steps` x `trials` (step-major): (members, owner trial, step offsets).

    Each trajectory joins each (step, trial) batch independently with probability q. For small q
    the size is drawn from Binomial(m, q) and the members uniformly without replacement (draw with
    replacement, redraw duplicates: the procedure is label-symmetric, so the set is uniform).
    """
    groups = steps * trials
    if q >= _POISSON_MASK_RATE:
        mask = gen.random((groups, m)) < q
        grp, members = np.nonzero(mask)
    else:
        sizes = gen.binomial(m, q, size=groups)
        grp = np.repeat(np.arange(groups, dtype=np.int64), sizes)
        members = gen.integers(0, m, size=len(grp))
        while True:
            order = np.lexsort((members, grp))
            members = members[order]
            grp = grp[order]
            dup = np.zeros(len(grp), dtype=bool)
            dup[1:] = (members[1:] == members[:-1]) & (grp[1:] == grp[:-1])
            k = int(dup.sum())
            if k == 0:
                break
            members[dup] = gen.integers(0, m, size=k)
    counts = np.bincount(grp // trials, minlength=steps)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return members.astype(np.int64), (grp % trials).astype(np.int64), offsets


@dataclass(frozen=True)
class PlanChunk:
    """The sampled trajectories of steps ``start .. start + steps - 1`` for R trials (secret).

    Attributes:
        start: first step (0-based).
        steps: number of steps L.
        ids: (k,) trajectory ids, step-major (uniform: k = L * R, ids of step s at s*R .. s*R+R-1).
        owner: (k,) trial of each id.
        offsets: (L + 1,) step s uses ids[offsets[s]:offsets[s + 1]].
    """

    start: int
    steps: int
    ids: np.ndarray
    owner: np.ndarray
    offsets: np.ndarray


def plan_chunk_steps(n: int, trials: int, dense: bool) -> int:
    """Steps per chunk of plan and noise draws (bounds the chunk's memory to ~32 MB).

    The chunking decides how the plan stream is consumed (Poisson sizes are drawn per chunk), so
    every loop that must reproduce a run uses this function.
    """
    per_step = trials * 2 * n * 8 + (n * 2 * n * 8 if dense else 0)
    return max(1, min(_CHUNK_STEPS, _CHUNK_BYTES // max(per_step, 1)))


def draw_plan(
    gen: np.random.Generator, *, m: int, config: GPOPEConfig, chunk: int, trials: int = 1,
    start: int = 0,
) -> Iterator[PlanChunk]:
    """The sample plan of ``trials`` runs, ``chunk`` steps at a time, from the plan stream ``gen``.

    Lazily drawn: chunk c is drawn when the consumer asks for it, so a loop that interleaves
    other draws from ``gen``'s sibling streams stays reproducible.
    """
    N = config.iterations
    R = trials
    for c0 in range(start, N, chunk):
        L = min(chunk, N - c0)
        if config.sampling == "poisson":
            members, owner, offs = _poisson_plan(gen, m, float(config.batch_rate), L, R)
            yield PlanChunk(c0, L, members, owner, offs)
        else:
            idx = gen.integers(0, m, size=(L, R)).astype(np.int64, copy=False)
            yield PlanChunk(c0, L, idx.reshape(-1), np.tile(np.arange(R, dtype=np.int64), L),
                            np.arange(0, (L + 1) * R, R, dtype=np.int64))


# ---------------------------------------------------------------------- solver
def run_gpope(
    stats: TrajectoryStats,
    config: GPOPEConfig,
    rng: SeedLike = None,
    *,
    _mechanism_override: Mapping[str, Any] | None = None,
) -> GPOPEResult:
    """One GPOPE run (Algorithm 1, or its Poisson-sampled extension).

    Args:
        stats: per-trajectory statistics (m trajectories, n features).
        config: the run's settings.
        rng: Generator or int seed (reproducible, not private) or None (OS entropy).
        _mechanism_override: test-only, see the module docstring.

    Returns:
        GPOPEResult; identical to ``run_gpope_trials(stats, config, rng, 1).trial(0)`` up to
        floating-point rounding.
    """
    res = run_gpope_trials(stats, config, rng, 1, _mechanism_override=_mechanism_override)
    return res.trial(0)


def run_gpope_trials(
    stats: TrajectoryStats,
    config: GPOPEConfig,
    rng: SeedLike,
    trials: int,
    *,
    _mechanism_override: Mapping[str, Any] | None = None,
) -> GPOPETrialsResult:
    """R independent GPOPE runs vectorised over a leading trial axis.

    Each trial has its own sample plan and noise (drawn from the same two streams). Costs N steps
    of O(R * per-trajectory gradient) each.

    Args:
        stats: per-trajectory statistics.
        config: the run's settings.
        rng: Generator, int seed or None (OS entropy).
        trials: R >= 1.
        _mechanism_override: test-only, see the module docstring.

    Returns:
        GPOPETrialsResult with theta (R, n).
    """
    if not isinstance(stats, TrajectoryStats):
        raise ConfigError(
            f"run_gpope needs a TrajectoryStats; got {type(stats).__name__}. Build one with "
            "gpope.core.statistics.trajectory_statistics or TrajectoryStats.from_dense."
        )
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
        x, acc, trace_steps, trace = _iterate_secure(stats, config, gen_plan, R, noise_std)
    else:
        x, acc, trace_steps, trace = _iterate(stats, config, gen_plan, gen_noise, R, h,
                                              noise_std)

    n = stats.n
    if override:
        private, note = False, "mechanism override (test-only): not private"
    elif not config.is_private:
        private, note = False, "no clipping or no noise: not private"
    elif seeded:
        private, note = False, "fixed seed: not private"
    elif config.secure_noise:
        private, note = True, (f"secure noise: OS-CSPRNG discrete Gaussian on the grid "
                               f"{config.grid:.3g}, releases rounded to it")
    else:
        private, note = True, "OS-entropy noise and sampling"
    avg = None
    if config.averaging != "none":
        avg = acc / _avg_count(config)
    if config.secure_noise:  # released values on the public grid (post-processing)
        x = round_to_grid(x, config.grid)
        avg = None if avg is None else round_to_grid(avg, config.grid)
        trace = None if trace is None else round_to_grid(trace, config.grid)
    return GPOPETrialsResult(
        theta=x[:, :n].copy(), w=x[:, n:].copy(), theta_avg=avg, sigma=sigma, epsilon=epsilon,
        delta=delta, accountant=accountant, sampling=config.sampling,
        iterations=config.iterations, clip=config.clip, private=private, privacy_note=note,
        trials=R, trace_steps=trace_steps,
        trace_theta=None if trace is None else trace[:, :, :n].copy(),
        trace_w=None if trace is None else trace[:, :, n:].copy(),
    )


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


def _avg_count(config: GPOPEConfig) -> int:
    if config.averaging == "tail":
        return max(1, math.ceil(config.tail_fraction * config.iterations))
    return config.iterations


def _iterate(
    stats: TrajectoryStats,
    config: GPOPEConfig,
    gen_plan: np.random.Generator,
    gen_noise: np.random.Generator,
    R: int,
    h: float | None,
    noise_std: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The N steps. Returns (x (R, 2n), sum of averaged thetas (R, n), trace steps, trace)."""
    n, m, N = stats.n, stats.m, config.iterations
    betas = step_sizes(N, config.step_size, config.step_schedule, config.step_offset)
    avg_from = N - _avg_count(config) if config.averaging != "none" else N
    every = config.trace_every
    if every is not None:
        trace_steps = np.unique(np.append(np.arange(0, N + 1, every), N))
        trace = np.zeros((R, len(trace_steps), 2 * n))
        t_pos = 1
    else:
        trace_steps = trace = None
        t_pos = 0
    x = np.zeros((R, 2 * n))
    acc = np.zeros((R, n))
    poisson = config.sampling == "poisson"
    q = float(config.batch_rate) if poisson else 1.0
    div = q * (config.normalizing_size or m) if poisson else 1.0
    chunk = plan_chunk_steps(n, R, stats.representation == "dense")
    fast = (R == 1 and not poisson and every is None
            and stats.representation in ("dense", "tabular"))
    clip_h = math.inf if h is None else float(h)
    compiled_poisson = poisson
    for plan in draw_plan(gen_plan, m=m, config=config, chunk=chunk, trials=R):
        c0, L = plan.start, plan.steps
        beta = betas[c0 : c0 + L]
        if poisson:
            members, owner, offs = plan.ids, plan.owner, plan.offsets
        else:
            idx = plan.ids.reshape(L, R)
        if noise_std > 0:
            z = gen_noise.standard_normal((L, R, 2 * n))
            z *= (beta * (noise_std / div))[:, None, None]
        else:
            z = None
        if fast and stats.representation == "tabular":
            _fast_tabular_chunk(stats, idx[:, 0], x[0], acc[0], beta, clip_h,
                                None if z is None else z[:, 0], c0, avg_from)
            continue
        if fast:
            _fast_dense_chunk(stats, idx[:, 0], x[0], acc[0], beta, clip_h,
                              None if z is None else z[:, 0], c0, avg_from)
            continue
        if poisson and compiled_poisson:
            s0 = 0
            while s0 < L:
                s1 = L if every is None else min(L, every - (c0 + s0) % every + s0)
                compiled_poisson = poisson_steps(stats, members, owner, offs, s0, s1, x, acc,
                                                 beta, div, clip_h, z, c0, avg_from)
                if not compiled_poisson:
                    break
                if every is not None and (c0 + s1) % every == 0:
                    trace[:, t_pos] = x
                    t_pos += 1
                s0 = s1
            if compiled_poisson:
                continue
        for s in range(L):
            if poisson:
                lo, hi = offs[s], offs[s + 1]
                tr = owner[lo:hi]
                g = clip_rows(stats._grad_x(members[lo:hi], x[tr]), h)
                upd = np.zeros((R, 2 * n))
                np.add.at(upd, tr, g)
                x -= (beta[s] / div) * upd
            else:
                x -= beta[s] * clip_rows(stats._grad_x(idx[s], x), h)
            if z is not None:
                x -= z[s]
            if c0 + s >= avg_from:
                acc += x[:, :n]
            if every is not None and (c0 + s + 1) % every == 0:
                trace[:, t_pos] = x
                t_pos += 1
    if every is not None:
        trace[:, -1] = x
    return x, acc, trace_steps, trace


def _iterate_secure(
    stats: TrajectoryStats,
    config: GPOPEConfig,
    gen_plan: np.random.Generator,
    R: int,
    noise_std: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The N steps with secure noise: per step, the clipped sum is rounded to the public grid,
    discrete Gaussian noise (OS CSPRNG, std raised by :func:`rounding_inflation`) is added on the
    grid, then the iterate moves by ``beta / d`` times the noisy sum. Same plan as :func:`_iterate`.
    """
    n, m, N = stats.n, stats.m, config.iterations
    grid = config.grid
    std = noise_std * rounding_inflation(float(config.clip), grid, 2 * n)
    betas = step_sizes(N, config.step_size, config.step_schedule, config.step_offset)
    avg_from = N - _avg_count(config) if config.averaging != "none" else N
    every = config.trace_every
    if every is not None:
        trace_steps = np.unique(np.append(np.arange(0, N + 1, every), N))
        trace = np.zeros((R, len(trace_steps), 2 * n))
        t_pos = 1
    else:
        trace_steps = trace = None
        t_pos = 0
    x = np.zeros((R, 2 * n))
    acc = np.zeros((R, n))
    poisson = config.sampling == "poisson"
    div = float(config.batch_rate) * (config.normalizing_size or m) if poisson else 1.0
    chunk = plan_chunk_steps(n, R, stats.representation == "dense")
    for plan in draw_plan(gen_plan, m=m, config=config, chunk=chunk, trials=R):
        noise = secure_gaussian_noise((plan.steps, R, 2 * n), std, grid) if std > 0 else None
        for s in range(plan.steps):
            lo, hi = plan.offsets[s], plan.offsets[s + 1]
            tr = plan.owner[lo:hi]
            g = clip_rows(stats._grad_x(plan.ids[lo:hi], x[tr]), config.clip)
            total = np.zeros((R, 2 * n))
            np.add.at(total, tr, g)
            total = round_to_grid(total, grid)
            if noise is not None:
                total += noise[s]
            x -= (betas[plan.start + s] / div) * total
            if plan.start + s >= avg_from:
                acc += x[:, :n]
            if every is not None and (plan.start + s + 1) % every == 0:
                trace[:, t_pos] = x
                t_pos += 1
    if every is not None:
        trace[:, -1] = x
    return x, acc, trace_steps, trace


def _fast_dense_chunk(
    stats: TrajectoryStats,
    idx: np.ndarray,
    x: np.ndarray,
    acc: np.ndarray,
    beta: np.ndarray,
    h: float,
    z: np.ndarray | None,
    c0: int,
    avg_from: int,
) -> None:
    """Single-trial uniform steps on dense stats, updating x (2n,) and acc (n,) in place.

    Gathers the chunk's [A_j | C_j] blocks once (the read floor), then runs the sequential steps on
    views with a handful of small BLAS calls each.
    """
    n = stats.n
    blocks = stats._ac[idx]  # (L, n, 2n)
    bs = stats._b[idx]  # (L, n)
    if dense_steps(blocks, bs, x, acc, beta, h, z, c0, avg_from):
        return
    theta = x[:n]
    w = x[n:]
    gw = np.empty(n)
    gt = np.empty(n)
    sqrt = math.sqrt
    inf = math.inf
    for s in range(len(idx)):
        blk = blocks[s]
        np.matmul(blk, x, out=gw)
        gw -= bs[s]
        np.matmul(w, blk[:, :n], out=gt)  # A^T w; the theta gradient is -gt
        nrm = sqrt(float(gt @ gt) + float(gw @ gw))
        if nrm <= h:
            f = beta[s]
        elif nrm < inf:
            f = beta[s] * h / nrm
        else:  # overflow, inf or NaN: the total clip (gpope.core.clipping)
            gt, gw, f = _total_clip_pair(gt, gw, h, beta[s])
        theta += f * gt
        w -= f * gw
        if z is not None:
            x -= z[s]
        if c0 + s >= avg_from:
            acc += theta


def _fast_tabular_chunk(
    stats: TrajectoryStats,
    idx: np.ndarray,
    x: np.ndarray,
    acc: np.ndarray,
    beta: np.ndarray,
    h: float,
    z: np.ndarray | None,
    c0: int,
    avg_from: int,
) -> None:
    """Single-trial uniform steps on tabular stats: rows of the chunk gathered once, O(tau) a step.

    Same arithmetic as ``TrajectoryStats._grad_x`` for one trajectory at a time.
    """
    n = stats.n
    lens = stats.tau[idx]
    ends = np.cumsum(lens)
    seg = ends - lens
    rows = np.repeat(stats._offsets[idx] - seg, lens) + np.arange(int(ends[-1]))
    s_all = stats._s[rows]
    sn_all = stats._sn[rows]
    gn_all = stats._gn[rows]
    norms = stats._norm[idx]
    rw_all = np.repeat(norms, lens)
    if stats._rho is not None:
        rw_all *= stats._rho[rows]
    bs = stats._b[idx]
    theta = x[:n]
    w = x[n:]
    sqrt = math.sqrt
    inf = math.inf
    bincount = np.bincount
    for k in range(len(idx)):
        lo, hi = seg[k], ends[k]
        s = s_all[lo:hi]
        sn = sn_all[lo:hi]
        gn = gn_all[lo:hi]
        rw = rw_all[lo:hi]
        pw = w[s]
        et = theta[s] - gn * theta[sn]
        q = rw * pw
        gt = bincount(sn, q * gn, n) - bincount(s, q, n)  # theta gradient -A^T w
        gw = bincount(s, rw * et + norms[k] * pw, n) - bs[k]
        nrm = sqrt(float(gt @ gt) + float(gw @ gw))
        if nrm <= h:
            f = beta[k]
        elif nrm < inf:
            f = beta[k] * h / nrm
        else:  # overflow, inf or NaN: the total clip (gpope.core.clipping)
            gt, gw, f = _total_clip_pair(-gt, gw, h, beta[k])
            gt = -gt
        theta -= f * gt
        w -= f * gw
        if z is not None:
            x -= z[k]
        if c0 + k >= avg_from:
            acc += theta


def _total_clip_pair(
    g_theta: np.ndarray, g_w: np.ndarray, h: float, beta: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """The fast loops' rare path: clip [g_theta; g_w] totally; returns (parts, step factor).

    Called only when the squared norm overflowed or is NaN; the result equals
    ``clip_rows([g_theta, g_w], h)`` split back in two, with the step factor ``beta``.
    """
    n = len(g_theta)
    with np.errstate(all="ignore"):
        g = clip_rows(np.concatenate([g_theta, g_w])[None, :], h)[0]
    return g[:n], g[n:], beta

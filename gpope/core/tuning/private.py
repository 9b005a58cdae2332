"""Private tuning of GPOPE on the private data itself (``gpope evaluate --tune private``).

With no public cohort to tune the clip bound and step size on, they are tuned on the private
data and charged to the same run, in four DP releases:

1. **Statistics clip.** A private quantile (:mod:`gpope.core.mechanisms.quantile`) of the norms of
   the per-trajectory statistics ``(A_i, b_i, C_i)``.
2. **Noisy statistics.** The clipped sums plus Gaussian noise (the SSP release,
   :mod:`gpope.core.tuning.scoring`). Post-processing of it: the AdaSSP LSTD solution
   ``theta_hat``, the spectral norm ``L`` of the GTD2 operator ``[[0, -A^T], [A, C]]`` and the
   private MSPBE of any theta.
3. **Gradient clip.** A private quantile of the per-trajectory GTD2 gradient norms at
   ``(theta_hat, w = 0)`` (Andrew et al. 2021, adaptive clipping at a private quantile; here
   one-shot, at a private estimate of the solution).
4. **Selection.** K GPOPE runs, one per candidate (step size ``c * base``, clip ``d * h``),
   ``base = i0 / L`` (inverse schedule) or ``1 / L`` (constant); the released theta is the
   candidate with the smallest pessimistic private MSPBE under release 2 (post-processing).

Accounting (add/remove-one, Poisson sampling; m public): the run is the adaptive composition
``ComposedDpEvent([Gaussian(s_q), Gaussian(s_s), Gaussian(s_q), SelfComposedDpEvent(gpope_event,
K)])``, whose epsilon dp-accounting's RDP (Mironov 2017, Prop. 1; Mironov, Talwar and Zhang 2019)
or PLD accountant certifies, so the run's (epsilon, delta) covers the tuning; releasing the best
candidate and the scores is post-processing (Dwork and Roth 2014, Prop. 2.1). The ledger stores
and charges this event once, before anything is drawn.

Budget split (all public): release j's noise is ``sigma_total / sqrt(share_j)``, ``sigma_total``
the multiplier of ONE Gaussian mechanism meeting (epsilon, delta) (a zCDP share: Bun and Steinke
2016, Prop. 1.6); the GPOPE multiplier is then calibrated so the composed event meets the target
as the accountant certifies it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import dp_accounting
import numpy as np

from gpope.core.accounting import RDP_ORDERS, gpope_dp_event
from gpope.core.accounting.registry import REFERENCE, composing_accountants, implementation
from gpope.core.gpope.solver import GPOPEConfig, GPOPEResult, run_gpope
from gpope.core.mechanisms.quantile import private_quantile, quantile_dp_event
from gpope.core.ssp import NoisyStatistics, private_mspbe, solve_ssp, ssp_dp_event
from gpope.core.statistics import TrajectoryStats
from gpope.core.tuning.private_settings import PrivateTuningSettings
from gpope.core.tuning.scoring import noisy_statistics, selection_relative_mspbe, statistics_norms
from gpope.core.validation import check_choice, check_int, check_number, check_probability
from gpope.errors import AccountingError, ConfigError

__all__ = ["Candidate", "PrivateTuningPlan", "PrivateTuningResult", "PrivateTuningSettings",
           "gaussian_sigma", "operator_norm", "plan_private_tuning",
           "tune_privately"]

_XTOL = 2e-3  # relative precision of the sigma bisections
_SIGMA_MAX = 1e5


# ---------------------------------------------------------------------- accounting
def _epsilon(event: dp_accounting.DpEvent, delta: float, accountant: str) -> float:
    return implementation(accountant).event_epsilon(
        event, delta, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)


def _bisect(f: Callable[[float], float], target: float, lo: float, hi: float) -> float:
    """Smallest sigma in [lo, hi] (to _XTOL) with f(sigma) <= target; f decreasing."""
    if f(hi) > target:
        raise AccountingError(f"No noise multiplier up to {hi:g} meets epsilon <= {target!r} for "
                              "the private tuning. Raise epsilon, or use fewer candidates or "
                              "iterations.")
    while f(lo) <= target:
        lo /= 4.0
        if lo < 1e-6:
            return hi if f(hi) <= target else lo
    while hi / lo > 1.0 + _XTOL:
        mid = math.sqrt(lo * hi)
        if f(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


@functools.lru_cache(maxsize=256)
def gaussian_sigma(epsilon: float, delta: float) -> float:
    """Noise multiplier of one Gaussian mechanism certified (epsilon, delta)-DP by RDP."""
    e = check_number("gaussian_sigma", "epsilon", epsilon, gt=0.0)
    d = check_number("gaussian_sigma", "delta", delta, gt=0.0, lt=1.0)
    return _bisect(lambda s: _epsilon(dp_accounting.GaussianDpEvent(s), d, REFERENCE), e, 0.1, 1e5)


@dataclass(frozen=True)
class PrivateTuningPlan:
    """Noise multipliers and the composed event of one privately tuned run (all public): the run's
    size, N and q, the target (epsilon, delta), the certifying accountant, the multipliers of each
    histogram, of the statistics and of every one of the K candidate runs, and ``epsilon_spent``
    (of :attr:`dp_event` at delta)."""

    m: int
    iterations: int
    batch_rate: float
    epsilon: float
    delta: float
    accountant: str
    quantile_sigma: float
    statistics_sigma: float
    gpope_sigma: float
    candidates: int
    epsilon_spent: float

    @property
    def dp_event(self) -> dp_accounting.DpEvent:
        """The composed event of the whole run (what the ledger stores)."""
        return _event(self.m, self.iterations, self.batch_rate, self.quantile_sigma,
                      self.statistics_sigma, self.gpope_sigma, self.candidates)

    def to_dict(self) -> dict[str, float | int | str]:
        """Plain form for logs (all public)."""
        return dict(self.__dict__)


def _event(m: int, n: int, q: float, s_q: float, s_s: float, s_g: float, k: int
           ) -> dp_accounting.DpEvent:
    run = gpope_dp_event(m=m, iterations=n, sigma=s_g, sampling="poisson", batch_rate=q)
    return dp_accounting.ComposedDpEvent([quantile_dp_event(s_q), ssp_dp_event(s_s),
                                          quantile_dp_event(s_q),
                                          dp_accounting.SelfComposedDpEvent(run, k)])


def _rdp_curve(event_parts: tuple[float, float, float, int, int, int, float]) -> np.ndarray:
    """RDP at RDP_ORDERS of :func:`_event`, composed additively (Mironov 2017, Prop. 1): Gaussian
    releases ``alpha / (2 s^2)`` (Prop. 7), plus ``K N`` GPOPE steps (dp-accounting's curve)."""
    from gpope.core.accounting.rdp import rdp_step as _rdp_step

    s_q, s_s, s_g, m, n, k, q = event_parts
    alpha = np.asarray(RDP_ORDERS, dtype=np.float64)
    gauss = alpha / 2.0 * (2.0 / s_q**2 + 1.0 / s_s**2)
    return gauss + k * n * np.asarray(_rdp_step(m, s_g, "poisson", q))


def plan_private_tuning(*, m: int, iterations: int, batch_rate: float, epsilon: float, delta: float,
                        settings: PrivateTuningSettings,
                        accountant: str = REFERENCE) -> PrivateTuningPlan:
    """Calibrate every noise multiplier so the composed run meets (epsilon, delta).

    Guarantee: the epsilon ``accountant`` certifies for ``plan.dp_event`` is at most ``epsilon``
    (the GPOPE sigma to 0.2 %); a tighter accountant searches below the RDP answer.

    Raises:
        ConfigError: invalid inputs.
        AccountingError: no GPOPE sigma up to 1e5 meets the target.
    """
    from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

    from gpope.core.accounting import calibrate_sigma

    o = "plan_private_tuning"
    m_ = check_int(o, "m", m, ge=1)
    n_ = check_int(o, "iterations", iterations, ge=1)
    q = check_probability(o, "batch_rate", batch_rate)
    eps = check_number(o, "epsilon", epsilon, gt=0.0)
    d = check_number(o, "delta", delta, gt=0.0, lt=1.0)
    acc = check_choice(o, "accountant", accountant, composing_accountants())
    if not isinstance(settings, PrivateTuningSettings):
        raise ConfigError(f"{o} needs PrivateTuningSettings; got {type(settings).__name__}.")
    total = gaussian_sigma(eps, d)
    s_q = total / math.sqrt(settings.quantile_share)
    s_s = total / math.sqrt(settings.statistics_share)
    k = settings.n_candidates

    def f_rdp(s: float) -> float:
        rdp = _rdp_curve((s_q, s_s, s, m_, n_, k, q))
        return float(compute_epsilon(RDP_ORDERS, rdp, d)[0])

    # One run alone needs less noise than K runs plus the releases: a valid lower end.
    lo = calibrate_sigma(m=m_, iterations=n_, epsilon=eps, delta=d, accountant=REFERENCE,
                         sampling="poisson", batch_rate=q)
    hi = lo * 2.0
    while f_rdp(hi) > eps and hi < _SIGMA_MAX:
        lo, hi = hi, min(hi * 2.0, _SIGMA_MAX)
    s_g = _bisect(f_rdp, eps, lo, hi)
    e_g = f_rdp(s_g)
    if acc != REFERENCE:  # a tighter accountant searches below the reference's answer

        def f_acc(s: float) -> float:
            return _epsilon(_event(m_, n_, q, s_q, s_s, s, k), d, acc)

        if f_acc(s_g) <= eps:
            s_g = _bisect(f_acc, eps, s_g / 1.5, s_g)
            e_g = f_acc(s_g)
        else:  # pragma: no cover - PLD is tighter than RDP for these events
            acc = REFERENCE
    return PrivateTuningPlan(
        m=m_, iterations=n_, batch_rate=q, epsilon=eps, delta=d, accountant=acc,
        quantile_sigma=s_q, statistics_sigma=s_s, gpope_sigma=s_g, candidates=k, epsilon_spent=e_g)


# ---------------------------------------------------------------------- the tuning itself
@dataclass(frozen=True)
class Candidate:
    """One candidate setting, its score (private relative MSPBE of its theta plus ``score_z``
    noise std) and its theta: DP outputs, safe to log."""

    step_size: float
    clip: float
    score: float
    theta: np.ndarray


@dataclass(frozen=True)
class PrivateTuningResult:
    """What a privately tuned run releases (every field a DP output or public): the chosen
    candidate's run and config, every candidate, the private clips (``statistics_clip``, the
    gradient clip ``h``), the step base, the noisy statistics, the plan, and ``private`` (True only
    when every draw used OS entropy)."""

    result: GPOPEResult
    config: GPOPEConfig
    candidates: tuple[Candidate, ...]
    chosen: int
    statistics_clip: float
    gradient_clip: float
    base_step: float
    noisy: NoisyStatistics
    plan: PrivateTuningPlan
    private: bool

    @property
    def theta(self) -> np.ndarray:
        """The released theta (the averaged iterate when the run averages)."""
        r = self.result
        return r.theta_avg if r.theta_avg is not None else r.theta

    @property
    def private_relative_mspbe(self) -> float:
        """Relative MSPBE of the released theta under the noisy statistics, by
        :func:`gpope.core.ssp.private_mspbe` (post-processing; the guard's function)."""
        return float(private_mspbe(self.theta, self.noisy)[1])


def operator_norm(noisy: NoisyStatistics) -> float:
    """Spectral norm L of the GTD2 operator [[0, -A^T], [A, C]] at the noisy mean statistics."""
    A, _, C = noisy.pooled()
    n = noisy.n
    G = np.zeros((2 * n, 2 * n))
    G[:n, n:] = -A.T
    G[n:, :n] = A
    G[n:, n:] = C
    return float(np.linalg.norm(G, 2)) / noisy.m


def _gradient_norms(stats: TrajectoryStats, theta: np.ndarray, block: int = 20_000) -> np.ndarray:
    out = np.empty(stats.m)
    w = np.zeros(stats.n)
    for lo in range(0, stats.m, block):
        ids = np.arange(lo, min(stats.m, lo + block), dtype=np.int64)
        out[ids] = np.linalg.norm(stats.gradients(ids, theta, w), axis=1)
    return out


def tune_privately(stats: TrajectoryStats, base: GPOPEConfig, plan: PrivateTuningPlan,
                   settings: PrivateTuningSettings,
                   rng: np.random.Generator | int | None = None) -> PrivateTuningResult:
    """Run the four releases of the module docstring and return the best candidate's run.

    ``base`` holds the run's public solver settings (Poisson, with ``plan``'s N and q; step size,
    clip and noise are replaced by the tuned ones); reserve ``plan.epsilon`` before calling.
    ``rng``: None (OS entropy for every draw: private) or a seed/Generator (reproducible, NOT
    private).

    Raises:
        ConfigError: the base config or the plan does not match the statistics.
    """
    if not isinstance(stats, TrajectoryStats):
        raise ConfigError(f"tune_privately needs TrajectoryStats; got {type(stats).__name__}.")
    # the plan's m is the run's public count: the rows held, or the released m~ the steps
    # normalise by (``base.normalizing_size``)
    if plan.m not in (stats.m, base.normalizing_size) or base.sampling != "poisson" or base.iterations != plan.iterations \
            or base.batch_rate != plan.batch_rate:
        raise ConfigError(f"tune_privately: the plan was made for m={plan.m}, "
                          f"N={plan.iterations}, q={plan.batch_rate} with Poisson sampling; got "
                          f"m={stats.m}, N={base.iterations}, q={base.batch_rate}, "
                          f"sampling={base.sampling!r}. Plan with the run's own settings.")
    if settings.n_candidates != plan.candidates:
        raise ConfigError(f"tune_privately: the plan accounts for {plan.candidates} candidates "
                          f"but the settings give {settings.n_candidates}. Plan with the same "
                          "settings.")
    seeded = rng is not None
    if rng is None:
        gen = np.random.default_rng()
        run_rngs: list[np.random.Generator | None] = [None] * plan.candidates
    else:
        gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
        run_rngs = list(gen.spawn(plan.candidates))
    g_q1, g_s, g_q2 = gen.spawn(3)

    # 1-2: statistics clip and noisy statistics.
    h_s = private_quantile(statistics_norms(stats), settings.statistics_quantile,
                           grid=settings.grid, noise_multiplier=plan.quantile_sigma, rng=g_q1)
    noisy = noisy_statistics(stats, clip=h_s, noise_multiplier=plan.statistics_sigma, rng=g_s,
                             m=plan.m)
    A, b, C = noisy.pooled()  # the AdaSSP LSTD solution of the release (post-processing)
    theta_hat = solve_ssp(A, b, noise_std=noisy.pooled_noise_std(), C=C)[0]
    L = operator_norm(noisy)
    # 3: gradient clip at the private estimate of the solution.
    h = private_quantile(_gradient_norms(stats, theta_hat), settings.clip_quantile,
                         grid=settings.grid, noise_multiplier=plan.quantile_sigma, rng=g_q2)
    base_step = (base.step_offset if base.step_schedule == "inverse" else 1.0) / max(L, 1e-300)
    base_step = max(base_step, 1e-300)
    # 4: candidates, scored by the private MSPBE (post-processing).
    candidates: list[Candidate] = []
    best: tuple[float, int, GPOPEResult, GPOPEConfig] | None = None
    k = 0
    for d in settings.clip_multipliers:
        for c in settings.step_multipliers:
            cfg = replace(base, step_size=c * base_step, clip=d * h,
                          noise_multiplier=plan.gpope_sigma, epsilon=None, delta=None)
            with np.errstate(all="ignore"):
                res = run_gpope(stats, cfg, run_rngs[k])
                theta = res.theta_avg if res.theta_avg is not None else res.theta
                ok = bool(np.all(np.isfinite(theta)))
                score = (float(selection_relative_mspbe(theta, noisy, z=settings.score_z)[0])
                         if ok else math.inf)
            candidates.append(Candidate(step_size=cfg.step_size, clip=cfg.clip, score=score,
                                        theta=np.asarray(theta, dtype=np.float64)))
            if best is None or score < best[0]:
                best = (score, k, res, cfg)
            k += 1
    assert best is not None  # n_candidates >= 1
    _, chosen, res, cfg = best
    return PrivateTuningResult(result=res, config=cfg, candidates=tuple(candidates), chosen=chosen,
                               statistics_clip=h_s, gradient_clip=h, base_step=base_step,
                               noisy=noisy, plan=plan, private=not seeded and bool(res.private))


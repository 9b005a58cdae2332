"""The tuning-free private default: an accurate release for a spec nobody tuned.

A spec without an ``evaluation:`` block (own data: no public simulator to tune on) gets this
release. Every data-dependent choice is made privately inside the run's (epsilon, delta), from
the spec's public bounds and four Gaussian releases over ``v_i = [vec A_i, b_i, vec C_i]``:

1. **Clip by a private quantile** of the norms of ``[vec A_i, b_i, w vec C_i]`` (``w =
   second_moment_weight``): one noisy histogram on a public log grid topped by the worst-case
   norm the spec's bounds allow (:func:`statistics_norm_bound`).
2. **SSP**: the clipped weighted sums plus Gaussian noise, C divided by w again (noise ``sigma c``
   on A and b, ``sigma c / w`` on C, which only decides the support); ``theta^`` = the
   unregularised LSTD solve on the supported features.
3. **Residual clip by a private quantile** of ``||b_i - A_i theta^||`` on the grid topped by
   ``statistics_norm_bound * sqrt(1 + ||theta^||^2)``, leaving at most ``min((1 -
   residual_quantile) m, residual_tail_stds sigma_q)`` rows above (:func:`residual_quantile`): the
   rows cut bias the refinement, so their number is tied to the noise, not to m.
4. **Refinement.** The clipped residuals' sum and outer products (the moments) plus Gaussian
   noise. The residual sum is ``R = A (theta_LSTD - theta^)``, so ``theta_1 = theta^ + d``, ``d =
   A~^-1 R~``, removes the first-order error the noise on A leaves in ``theta^``; what remains is
   at the scale ``c_r``, far below ``c ||theta||``.
5. **Probe.** Where the statistics clip shrank A (one state's patients most of the clipped ones:
   a few long, costly stays), ``A~`` is too small there and ``d`` overshoots. The clipped
   residual sum at ``theta_1`` plus Gaussian noise gives the secant ``R~ - R~_1 = A d``; where it
   shows the overshoot beyond the noise (``secant_z`` stds), ``theta = theta_1 + s A~^-1 R~_1``
   with ``s = ||d||^2 / d . A~^-1 (R~ - R~_1)``, the rank-one inverse update exact along ``d``
   (:func:`_secant`); elsewhere ``theta = theta_1``.

The interval is the delta method, ``A~^-1 (Sigma_r + s_R^2 I + s_A^2 ||theta - theta^||^2 I)
A~^-T`` (where the probe's step is taken, the Jacobians of ``theta`` in the two residual sums carry
their noises and the residuals' sampling covariance ``Sigma_r``), each end moved out by
:func:`second_order_widths` (what the delta method leaves out);
unbounded where the identification test cannot separate the noisy A from a singular one or that
bound fails, judged per value under tabular features (:mod:`gpope.core.untuned.weak`). The bias
of clipping the largest residuals is not bounded in the interval (the spec's worst case is far
above the clip); step 3 keeps it on the noise's scale. Values and finite ends are clamped into
:func:`value_range`.

Every step reads the statistics only through an ``aggregate(kernel, width)`` callback: the
pipeline passes a Spark aggregate, :func:`release_untuned_rows` the rows in memory, so both run
the very same arithmetic.

Accounting (add/remove-one; m public): the histograms have sensitivity 1, the SSP sums ``c``,
each residual sum ``c_r`` and the moments ``c_r^2``; their composition is exactly one Gaussian
mechanism (``1/sigma^2 = sum_j 1/sigma_j^2``), so one multiplier is calibrated by the run's
accountant and each release takes a share of its privacy loss ``mu^2`` (:func:`plan_untuned`,
:func:`untuned_dp_event`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.untuned.settings import UntunedSettings
from gpope.core.untuned.weak import second_order_widths
from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.core.intervals import Interval
    from gpope.core.spec import EvaluationSpec

__all__ = ["Aggregate", "UntunedRelease", "UntunedSettings", "UntunedSigmas", "clamp_interval",
           "feature_norm_bound", "plan_untuned", "plan_untuned_component", "quantile_grid",
           "release_residuals", "release_untuned", "release_untuned_rows", "release_weighted_sums",
           "residual_quantile", "second_order_widths", "split_untuned", "statistics_norm_bound",
           "untuned_dp_event", "upper_quantile", "value_range"]

#: ``aggregate(kernel, width) -> (width,)``: the sum over all statistics rows of
#: ``kernel(traj_index (k,), rows (k, 2n^2+n)) -> (1, width)``.
Aggregate = Callable[[Callable[[np.ndarray, np.ndarray], np.ndarray], int], np.ndarray]


def feature_norm_bound(feature_map: Any) -> float:
    """A public bound on ``||phi(s)||`` for every state: ``sqrt(p)`` for a one-hot map with at
    most p ones (tabular: 1), ``sqrt(1 + d)`` (``[1, x]`` with x in [0, 1]^d), ``sqrt(n)``
    (cosine features, each in [-1, 1])."""
    from gpope.core.features import ConstantIdentityFeatures
    from gpope.core.state_action import StateActionFeatures

    if isinstance(feature_map, StateActionFeatures):  # ||phi(s) (x) e_a|| = ||phi(s)||
        return feature_norm_bound(feature_map.base)
    p = getattr(feature_map, "max_active", None)  # one-hot maps: at most p ones per state
    if isinstance(p, int) and p >= 1:
        return math.sqrt(float(p))
    if isinstance(feature_map, ConstantIdentityFeatures):
        return math.sqrt(1.0 + len(feature_map.low))
    return math.sqrt(float(feature_map.n_features))


def statistics_norm_bound(spec: EvaluationSpec) -> float:
    """The largest ``||[A_i, b_i, C_i]||`` the spec's public bounds allow for a trajectory of
    ``length_scale`` steps: ``F^2 sqrt((W (1 + gamma))^2 + 1) + W R F`` with F
    :func:`feature_norm_bound`, W the importance-weight bound (absent: 1e3; a state-action fit: 1)
    and R the largest |scaled reward| (absent: 1e3); longer trajectories fall into the overflow bin.
    """
    from gpope.core.state_action import is_state_action

    F = feature_norm_bound(spec.feature_map)
    W = 1.0 if is_state_action(spec) else float(spec.importance_weight_bound or 1e3)
    R = (max(abs(x) for x in spec.reward_bounds) * spec.reward_scale
         if spec.reward_bounds is not None else 1e3)
    return float(F * F * math.hypot(W * (1.0 + spec.gamma), 1.0) + W * R * F)


def value_range(spec: EvaluationSpec) -> tuple[float, float]:
    """The range of any state's value the spec's public bounds imply (raw reward units): with
    rewards in ``[lo, hi]`` and ``gamma < 1``, ``[min(lo, lo / (1 - gamma)), max(hi, hi / (1 -
    gamma))]``; without reward bounds, or with ``gamma = 1``, the unbounded side is infinite."""
    if spec.reward_bounds is None:
        return (-math.inf, math.inf)
    lo, hi = (float(x) for x in spec.reward_bounds)
    if spec.gamma >= 1.0:
        return (lo if lo >= 0 else -math.inf, hi if hi <= 0 else math.inf)
    h = 1.0 / (1.0 - spec.gamma)
    return (min(lo, lo * h), max(hi, hi * h))


def clamp_interval(iv: Interval, bounds: tuple[float, float]) -> Interval:
    """``iv`` with its value and finite ends clamped into ``bounds`` (post-processing); an unbounded
    end stays unbounded."""
    lo, hi = bounds

    def clamp(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        return np.where(np.isfinite(x), np.clip(x, lo, hi), x)

    return replace(iv, value=clamp(iv.value), lower=clamp(iv.lower), upper=clamp(iv.upper),
                   lower_bound=clamp(iv.lower_bound))


def quantile_grid(spec: EvaluationSpec, settings: UntunedSettings) -> Any:
    """The public log grid of the clip quantile: ``grid_decades`` below the worst-case norm."""
    from gpope.core.mechanisms.quantile import LogGrid

    hi = statistics_norm_bound(spec)
    return LogGrid(lo=hi * 10.0 ** -settings.grid_decades, hi=hi,
                   bins_per_decade=settings.bins_per_decade)


@dataclass(frozen=True)
class UntunedSigmas:
    """Noise multipliers (std / sensitivity) of the default's releases: each histogram
    (``quantile``), the SSP sums (``statistics``), the probe's residual sum (``probe``) and the
    residual release (``residual``, split with its moments by ``moments_share``). Their
    composition is exactly the Gaussian mechanism with multiplier ``total``: ``2/quantile^2 +
    1/statistics^2 + 1/probe^2 + 1/residual^2 = 1/total^2``."""

    quantile: float
    statistics: float
    residual: float
    total: float
    probe: float


def split_untuned(sigma: float, settings: UntunedSettings) -> UntunedSigmas:
    """The default's multipliers as zCDP shares of one Gaussian mechanism with multiplier
    ``sigma``: each histogram ``quantile_share``, the residual release ``refine_share``, the SSP
    sums the rest, the probe ``probe_share``."""
    return UntunedSigmas(quantile=float(sigma / math.sqrt(settings.quantile_share)),
                         statistics=float(sigma / math.sqrt(settings.statistics_share)),
                         residual=float(sigma / math.sqrt(settings.refine_share)),
                         total=float(sigma), probe=float(sigma / math.sqrt(settings.probe_share)))


def plan_untuned(*, m: int, epsilon: float, delta: float, settings: UntunedSettings,
                 accountant: str = "auto", share: float = 1.0) -> UntunedSigmas:
    """The default's multipliers when its releases take ``share`` of the privacy loss of one
    Gaussian mechanism calibrated to (epsilon, delta) (add/remove-one); ``share = 1``: the default
    alone meets (epsilon, delta)."""
    from gpope.core.ssp import ssp_sigma

    if not 0.0 < share <= 1.0:
        raise ConfigError(f"plan_untuned: share must be in (0, 1]. Got {share!r}.")
    total = float(ssp_sigma(m=m, epsilon=epsilon, delta=delta, accountant=accountant))
    return split_untuned(total / math.sqrt(share), settings)


def untuned_dp_event(sigmas: UntunedSigmas, moments_share: float) -> Any:
    """The run's dp-accounting event, in release order: histogram, SSP sums, histogram, residual sum
    with its moments (``moments_share`` of the residual release), the probe's residual sum."""
    import dp_accounting

    from gpope.core.mechanisms.quantile import quantile_dp_event
    from gpope.core.ssp import ssp_release_event

    return dp_accounting.ComposedDpEvent([
        quantile_dp_event(sigmas.quantile), ssp_release_event(sigmas.statistics, 0.0),
        quantile_dp_event(sigmas.quantile), ssp_release_event(sigmas.residual, moments_share),
        ssp_release_event(sigmas.probe, 0.0)])


@dataclass(frozen=True)
class UntunedRelease:
    """What the default releases (all of it covered by :func:`untuned_dp_event`): the refined
    ``theta`` (0 off the ``supported`` features), the reference values' interval clamped into
    :func:`value_range`, the private clips, the released noisy sums and residual moments, and the
    intervals of the public ``functionals`` asked of it (same arithmetic, supported features only;
    None when none were asked); ``probe_scale``: the secant's scale where the probe moved the
    refined estimate (step 5), else None."""

    theta: np.ndarray
    interval: Interval
    clip: float
    residual_clip: float
    noisy: Any
    moments: Any
    functionals: Interval | None = None
    supported: np.ndarray | None = None
    probe_scale: float | None = None


def _histogram_kernel(edges: np.ndarray, transform: Callable[[np.ndarray], np.ndarray]):
    """(idx, rows) -> (1, bins) counts of ``||transform(rows)||`` on the grid's bins."""
    def kernel(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(transform(rows), axis=1)
        norms = np.where(np.isfinite(norms), norms, np.inf)  # non-finite rows: the top bin
        return np.bincount(np.searchsorted(edges, norms, side="right"),
                           minlength=len(edges) + 1).astype(np.float64)[None, :]

    return kernel


def upper_quantile(noisy_counts: np.ndarray, edges: np.ndarray, quantile: float, m: int) -> float:
    """The smallest grid edge above which the noisy counts hold at most ``(1 - quantile) m`` rows
    (post-processing; read from the top, so its error is the tail bins' only); the top edge when
    even the overflow bin holds more."""
    above = np.cumsum(np.asarray(noisy_counts, dtype=np.float64)[::-1])[::-1]  # rows >= edge
    ok = np.nonzero(above[1:] <= (1.0 - quantile) * m)[0]  # above[i + 1]: rows >= edges[i]
    return float(edges[ok[0]]) if len(ok) else float(edges[-1])


def _private_quantile(aggregate: Aggregate, grid: Any, transform: Callable[[np.ndarray], np.ndarray],
                      quantile: float, *, m: int, sigma: float, rng: np.random.Generator,
                      secure_noise: bool = False,
                      cap: tuple[float, float] | None = None) -> float:
    """One noisy histogram of ``||transform(row)||`` (sensitivity 1) and its upper quantile
    (``secure_noise``: the OS-CSPRNG discrete Gaussian, ``rng`` unused); ``cap = (q0, ratio)``:
    at most ``ratio`` times the same histogram's ``q0`` quantile."""
    edges = grid.edges()
    counts = aggregate(_histogram_kernel(edges, transform), len(edges) + 1)
    if secure_noise:
        from gpope.core.mechanisms.secure_noise import secure_perturb

        noisy, _ = secure_perturb(counts, sigma, 1.0)
    else:
        noisy = counts + sigma * rng.standard_normal(len(counts))
    out = upper_quantile(noisy, edges, quantile, m)
    if cap is not None:
        out = min(out, cap[1] * upper_quantile(noisy, edges, cap[0], m))
    return out


def _sum_kernel(clip: float, weights: np.ndarray):
    """(idx, rows) -> (1, 2n^2+n): the sum of the weighted rows clipped to ``clip``."""
    def kernel(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        from gpope.core.ssp import clip_statistics

        return clip_statistics(rows * weights, clip).sum(axis=0, keepdims=True)

    return kernel


def release_weighted_sums(sums: np.ndarray, *, n: int, m: int, sigma: float, clip: float,
                          weight: float, rng: np.random.Generator) -> Any:
    """The default's SSP release: ``sums`` (K, 2n^2+n) of the weighted rows clipped to ``clip``, C
    divided by ``weight`` again, plus ``N(0, (sigma clip)^2)`` on A and b and ``N(0, (sigma clip /
    weight)^2)`` on C: ``GaussianDpEvent(sigma)`` on the weighted sums, then post-processing.
    K > 1 rows are independent releases (the audit)."""
    from gpope.core.ssp import c_block_scale, release_noisy_statistics

    return release_noisy_statistics(
        np.asarray(sums, dtype=np.float64) / c_block_scale(n, weight), n=n, m=m,
        sigma=sigma, clip=clip, rng=rng, c_noise_scale=1.0 / weight)


def _residual_kernel(theta: np.ndarray, n: int, bound: float, moments: bool = True):
    """(idx, rows) -> (1, n + n(n+1)/2): clipped residuals' sum and their moment vectors' sum
    (``moments=False``: (1, n), the sum only)."""
    theta = np.asarray(theta, dtype=np.float64).copy()

    def kernel(idx: np.ndarray, rows: np.ndarray) -> np.ndarray:
        from gpope.core.mechanisms.clipping import clip_rows
        from gpope.core.ssp import moment_vectors, residuals

        r = clip_rows(residuals(rows, theta, n), bound)
        if not moments:
            return r.sum(axis=0)[None, :]
        return np.concatenate([r.sum(axis=0), moment_vectors(r).sum(axis=0)])[None, :]

    return kernel


def residual_quantile(settings: UntunedSettings, sigmas: UntunedSigmas, m: int) -> float:
    """The quantile of the residual norms the refinement clips at (public):
    ``max(residual_quantile, 1 - residual_tail_stds sigma_q / m)``, i.e. at most
    ``residual_tail_stds sigma_q`` rows above the clip, a count that does not grow with m."""
    return float(max(settings.residual_quantile,
                     1.0 - settings.residual_tail_stds * sigmas.quantile / m))


def release_residuals(parts: np.ndarray, *, n: int, bound: float, sigma: float,
                      moments_share: float, rng: np.random.Generator
                      ) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The refinement's release: ``parts`` (..., n + n(n+1)/2), the sums of the clipped residuals
    and of their moment vectors, plus ``N(0, (s_sum bound)^2)`` on the residual sum and
    ``N(0, (s_mom bound^2)^2)`` on the moments, ``(s_sum, s_mom)`` the zCDP split of ``sigma``:
    together ``GaussianDpEvent(sigma)`` under add/remove-one (``moments_share = 0``: ``parts`` (...,
    n), the sum alone, as the probe releases it). Leading rows are independent releases (the audit). Returns (noisy residual sums, noisy moment vectors, s_sum, s_mom)."""
    from gpope.core.ssp import split_sigma

    s_sum, s_mom = split_sigma(sigma, moments_share)
    parts = np.asarray(parts, dtype=np.float64)
    r_sum = parts[..., :n] + s_sum * bound * rng.standard_normal(parts[..., :n].shape)
    mom = parts[..., n:] + s_mom * bound * bound * rng.standard_normal(parts[..., n:].shape)
    return r_sum, mom, s_sum, s_mom


@dataclass(frozen=True)
class _Secant:
    """The probe's step ``s A~^-1 r1`` (supported features; 0 where the secant does not apply) and
    how ``theta`` moves with the residual release's noise (``t0``), the probe's (``t1``) and a
    shift common to both sums (``ts``: the residuals' sampling error, which the probe also sees
    through ``theta_1``)."""

    step: np.ndarray
    t0: np.ndarray
    t1: np.ndarray
    ts: np.ndarray
    scale: float | None


def _secant(A: np.ndarray, inv: np.ndarray, r0: np.ndarray, r1: np.ndarray, *, noise0: float,
            noise1: float, noise_a: float, z: float) -> _Secant:
    """The refinement's last step (module docstring, step 5). ``d = P r0`` (``P = inv``) is the
    refinement's step, ``r1`` the probe at ``theta_1 = theta^ + d``; the secant ``y = r0 - r1 = A
    d`` measures A along d. The step overshot where ``D = d . P y`` exceeds ``N = ||d||^2``
    (``A~`` too small along d) by more than ``z`` noise stds of ``d . P (y - A~ d)`` when it did
    not (``||P^T d|| (noise_a^2 N + noise0^2 + noise1^2)^1/2``, the sums' noise stds ``noise0``,
    ``noise1`` and A~'s entries' ``noise_a``); there ``theta = theta_1 + s P r1``, ``s = N / D``,
    the rank-one inverse update that makes the step exact along d. Elsewhere ``theta = theta_1``
    (the probe unused). The Jacobians take ``r1``'s dependence on ``r0`` through ``theta_1``
    (``-A P``) with A estimated by the secant update ``A_s = A~ + (y - A~ d) d^T / N``.
    Post-processing of released sums only."""
    d, p1 = inv @ r0, inv @ r1
    N = float(d @ d)
    D = N - float(d @ p1)
    Pd = inv.T @ d
    sd = float(np.linalg.norm(Pd)) * math.sqrt(noise_a ** 2 * N + noise0 ** 2 + noise1 ** 2)
    if not (N > 0.0 and D - N > z * sd):
        return _Secant(step=np.zeros_like(d), t0=inv, t1=np.zeros_like(inv), ts=inv, scale=None)
    s = N / D
    j0 = inv + np.outer(p1, (N * (inv.T @ p1) - 2.0 * float(d @ p1) * Pd) / (D * D))
    j1 = s * inv + np.outer(p1, s * s / N * Pd)
    A_s = A + np.outer(r0 - r1 - A @ d, d) / N
    back = np.eye(len(d)) - A_s @ inv  # d r1 / d (shift common to r0 and r1)
    return _Secant(step=s * p1, t0=j0 - j1 @ A_s @ inv, t1=j1, ts=j0 + j1 @ back, scale=s)


def _ridge_solve(A: np.ndarray, b: np.ndarray, keep: np.ndarray, lam: float) -> np.ndarray:
    """(n,) ``argmin ||A_k theta - b_k||^2 + lam ||theta||^2`` over the features ``keep`` (0
    elsewhere)."""
    theta = np.zeros(b.shape[0])
    k = int(keep.sum())
    if k:
        M = np.vstack([A[np.ix_(keep, keep)], math.sqrt(lam) * np.eye(k)])
        theta[keep] = np.linalg.lstsq(M, np.concatenate([b[keep], np.zeros(k)]), rcond=None)[0]
    return theta


def release_untuned(aggregate: Aggregate, spec: EvaluationSpec, *, m: int, sigmas: UntunedSigmas,
                    moments_share: float, settings: UntunedSettings, rng: np.random.Generator,
                    level: float = 0.95, identification: bool = True,
                    functionals: tuple[np.ndarray, np.ndarray] | None = None) -> UntunedRelease:
    """The default release (module docstring), reading the statistics only through ``aggregate``;
    ``rng`` draws every noise. ``functionals``: public rows G_f (k', n) and their two-sided levels
    (k',) whose intervals are released like the reference values'.

    Raises:
        DataError: the aggregate returned non-finite sums.
    """
    from scipy.stats import norm

    from gpope.core.features import TabularFeatures
    from gpope.core.intervals import Interval, separation
    from gpope.core.mechanisms.quantile import LogGrid
    from gpope.core.ssp import (
        NoisyMoments,
        c_block_scale,
        moments_matrix,
        noise_norm_bound,
        residuals,
        supported_features,
    )

    n = spec.n_features
    width = 2 * n * n + n
    weights = c_block_scale(n, settings.second_moment_weight)  # [A_i, b_i, w C_i]
    clip = _private_quantile(aggregate, quantile_grid(spec, settings),
                             lambda rows: rows * weights, settings.clip_quantile, m=m,
                             sigma=sigmas.quantile, rng=rng)
    noisy = release_weighted_sums(aggregate(_sum_kernel(clip, weights), width)[None, :], n=n, m=m,
                                  sigma=sigmas.statistics, clip=clip,
                                  weight=settings.second_moment_weight, rng=rng)
    A, b, C = noisy.pooled()
    std = noisy.pooled_noise_std()
    keep = supported_features(C, noise_std=std * noisy.c_noise_scale)
    # a sparse A~ (tabular features): a feature whose A_jj stands out of the noise is supported
    sparse = float(np.mean(np.abs(A) > settings.sparse_z * std)) < settings.sparse_fraction
    if sparse:
        keep = keep | (np.diag(A) > settings.sparse_z * std)
    Ak = A[np.ix_(keep, keep)]
    theta0 = np.zeros(n)
    theta0[keep] = np.linalg.lstsq(Ak, b[keep], rcond=None)[0]
    top = float(statistics_norm_bound(spec) * math.sqrt(1.0 + float(theta0 @ theta0)))
    grid = LogGrid(lo=top * 10.0 ** -settings.grid_decades, hi=top,
                   bins_per_decade=settings.bins_per_decade)
    c_r = _private_quantile(aggregate, grid, lambda rows: residuals(rows, theta0, n),
                            residual_quantile(settings, sigmas, m), m=m,
                            sigma=sigmas.quantile, rng=rng,
                            cap=(settings.residual_quantile, settings.residual_clip_ratio))
    inv = np.linalg.pinv(Ak)
    r_sum, mom, s_sum, s_mom = release_residuals(
        aggregate(_residual_kernel(theta0, n, c_r), n + n * (n + 1) // 2), n=n, bound=c_r,
        sigma=sigmas.residual, moments_share=moments_share, rng=rng)
    moments = NoisyMoments(matrix=moments_matrix(mom, n), theta=theta0, sigma=float(s_mom),
                           bound=float(c_r))
    theta1 = theta0.copy()
    theta1[keep] += inv @ r_sum[keep]
    probe = release_residuals(aggregate(_residual_kernel(theta1, n, c_r, moments=False), n), n=n,
                              bound=c_r, sigma=sigmas.probe, moments_share=0.0, rng=rng)[0]
    sec = _secant(Ak, inv, r_sum[keep], probe[keep], noise0=s_sum * c_r,
                  noise1=sigmas.probe * c_r, noise_a=std, z=settings.secant_z)
    theta = theta1.copy()
    theta[keep] += sec.step
    values = spec.reference_values(theta)
    G_all = np.array([spec.reference_values(e) for e in np.eye(n)]).T  # (k, n): linear in theta
    G = G_all[:, keep]
    # a value that depends on a feature the noisy statistics leave unsupported is not identified
    unsupported = np.any(G_all[:, ~keep] != 0.0, axis=1)
    moved = (theta - theta0)[keep]
    cov = (sec.ts @ (moments.covariance()[np.ix_(keep, keep)]
                     + std ** 2 * float(moved @ moved) * np.eye(int(keep.sum()))) @ sec.ts.T
           + (s_sum * c_r) ** 2 * sec.t0 @ sec.t0.T + (sigmas.probe * c_r) ** 2 * sec.t1 @ sec.t1.T)
    meat = Ak @ cov @ Ak.T  # inv meat inv^T = cov: the second-order bound reads A~^-1 and cov
    se = np.sqrt(np.maximum(np.einsum("ki,ij,kj->k", G, cov, G), 0.0))
    extra, contraction = second_order_widths(G, inv, meat, std, level=level)
    sep = separation(Ak, std, level=level) if identification and keep.any() else math.inf
    identified = bool(keep.any()) and sep > 1.0 and contraction < 1.0
    z2, z1 = float(norm.ppf(0.5 + level / 2.0)), float(norm.ppf(level))
    if not identified and settings.unidentified_ridge > 0.0:
        A_solve = np.where(np.abs(A) > settings.sparse_z * std, A, 0.0) if sparse else A
        theta = _ridge_solve(A_solve, b, keep, settings.unidentified_ridge * noise_norm_bound(
            int(keep.sum()), std) ** 2)
        values = spec.reference_values(theta)
    bounded = identified & ~unsupported
    weak = None
    if not identified and identification and isinstance(spec.feature_map, TabularFeatures):
        from gpope.core.untuned.weak import strong_block

        weak = strong_block(A=A, C=C, keep=keep, theta0=theta0, r_sum=r_sum,
                            meat_r=moments.covariance(), G_all=G_all, noise_std=std,
                            residual_noise=float(s_sum * c_r), value_bounds=value_range(spec),
                            level=level)
    centre = values
    if weak is not None:  # identification judged per value: a weak state bounds the others
        centre = np.where(weak.bounded, weak.values, values)
        se = np.where(weak.bounded, weak.se, se)
        extra = np.where(weak.bounded, weak.extra, extra)
        lo_v, hi_v = value_range(spec)  # an interval wider than the range says nothing: unbounded
        bounded = weak.bounded & (z2 * se + extra < (hi_v - lo_v) / 2.0)
    extra_iv = None
    if functionals is not None:
        rows = np.atleast_2d(np.asarray(functionals[0], dtype=np.float64))
        f_levels = np.broadcast_to(np.asarray(functionals[1], dtype=np.float64), rows.shape[:1])
        f_se = np.sqrt(np.maximum(np.einsum("ki,ij,kj->k", rows[:, keep], cov, rows[:, keep]),
                                  0.0))
        f_extra = np.array([second_order_widths(rows[j:j + 1, keep], inv, meat, std,
                                                level=float(lv))[0][0]
                            for j, lv in enumerate(f_levels)])
        f_ok = np.full(len(rows), identified)
        f_val, f_z = rows[:, keep] @ theta[keep], norm.ppf(0.5 + f_levels / 2.0)
        extra_iv = Interval(
            value=f_val, lower=np.where(f_ok, f_val - f_z * f_se - f_extra, -np.inf),
            upper=np.where(f_ok, f_val + f_z * f_se + f_extra, np.inf),
            lower_bound=np.where(f_ok, f_val - norm.ppf(f_levels) * f_se - f_extra, -np.inf),
            se=f_se, level=float(f_levels.min()), df=0, unidentified=not identified)
    iv = Interval(
        value=values,
        lower=np.where(bounded, np.minimum(centre - z2 * se - extra, values), -np.inf),
        upper=np.where(bounded, np.maximum(centre + z2 * se + extra, values), np.inf),
        lower_bound=np.where(bounded, np.minimum(centre - z1 * se - extra, values), -np.inf),
        se=se, level=level,
        df=0, unidentified=not identified, separation=float(sep) if identification else None)
    return UntunedRelease(theta=theta, interval=clamp_interval(iv, value_range(spec)), clip=clip,
                          residual_clip=float(c_r), noisy=noisy, moments=moments,
                          functionals=extra_iv, supported=keep, probe_scale=sec.scale)


def release_untuned_rows(rows: np.ndarray, spec: EvaluationSpec, **kwargs: Any) -> UntunedRelease:
    """:func:`release_untuned` on statistics rows (m, 2n^2+n) held in memory."""
    vec = np.asarray(rows, dtype=np.float64)
    idx = np.arange(vec.shape[0])

    def aggregate(kernel: Callable[[np.ndarray, np.ndarray], np.ndarray], width: int) -> np.ndarray:
        out = kernel(idx, vec)[0]
        if out.shape != (width,):
            raise ConfigError(f"kernel returned shape {out.shape}, expected ({width},)")
        return out

    return release_untuned(aggregate, spec, m=vec.shape[0], **kwargs)


def plan_untuned_component(*, m: int, sigma: float, delta: float, accountant: str,
                           moments_share: float, settings: UntunedSettings
                           ) -> tuple[dict[str, Any], UntunedSigmas]:
    """The estimator component of a default run's release plan when its releases compose to the
    Gaussian mechanism with multiplier ``sigma``: ``sigma`` (of the SSP sums), ``event``,
    ``epsilon_spent`` (certified for it alone at ``delta``, add/remove-one), ``label`` and
    ``releases``; and the multipliers of its releases. Nothing is drawn or read.

    Raises:
        ConfigError: an accountant that is not a valid bound, or m < 1.
    """
    import dp_accounting

    from gpope.core.accounting import resolve_accountant
    from gpope.core.accounting.registry import implementation, not_a_valid_bound

    if not_a_valid_bound(accountant):
        raise ConfigError(
            f"The tuning-free default is accounted rigorously; the {accountant!r} accountant is "
            "not a valid bound. Use --accountant auto, rdp or pld.")
    if m < 1:
        raise ConfigError(f"The tuning-free default needs m >= 1 trajectories. Got m={m}.")
    resolved = resolve_accountant(accountant, "poisson")
    sig = split_untuned(sigma, settings)
    event = untuned_dp_event(sig, moments_share)
    label = (f"untuned(clip at a private {settings.clip_quantile:g} quantile, residual clip at a "
             f"private {residual_quantile(settings, sig, m):.6g} quantile, "
             f"moments_share={moments_share:g})")
    return {"sigma": sig.statistics, "event": event,
            "epsilon_spent": float(implementation(resolved).event_epsilon(
                event, delta, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)), "label": label,
            "releases": ("theta", "values", "intervals", "private_mspbe")}, sig

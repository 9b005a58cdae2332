"""Empirical privacy audit of the policy value release (:mod:`gpope.core.policy_value_release`).

The release is one Gaussian mechanism at ``sigma`` split into three sub-releases (clip
histograms, first moments, second moments) under add/remove-one adjacency. The audit runs the
real pieces (the clip histograms, the exact sums and their noise, sigma from
:func:`~gpope.core.policy_value_release.policy_value_sigma`) on two neighbouring data sets of an
off-policy spec:

* D0: ``m`` base patients whose terms are 0 (every clipped component at the bottom of its range);
* D1: the same plus a canary patient whose terms are the public maxima (it lands in each
  histogram's top bin and at the clip of each sum).

The statistic is the log-likelihood ratio of D1 against D0 under the CLAIMED noise (the
histograms' canary bins plus the sums given the released clips: a function of the release);
thresholds and Clopper-Pearson bounds as in :mod:`gpope.core.audit.gpope`. ``_noise_scale``
(test-only) scales every noise draw: 0.5 is the factor-2 error the audit must catch.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from gpope.core.audit.gpope import AuditClaim, AuditResult
from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
from gpope.core.policy_value_clamp import clip_histograms, clips_from_histograms, public_limits
from gpope.core.policy_value_release import (
    PolicyValueSettings,
    add_histogram_noise,
    add_sum_noise,
    exact_sums,
    noise_scales,
    policy_value_sigma,
    sum_noise_stds,
)
from gpope.core.validation import check_int

__all__ = ["PolicyValueAuditConfig", "run_policy_value_audit"]


@dataclass(frozen=True, kw_only=True)
class PolicyValueAuditConfig(AuditClaim):
    """Settings of one policy value audit (all public).

    Attributes:
        m: base patients; epsilon, delta: the run's claim (the release gets
            ``settings.share`` of it, :func:`policy_value_sigma`); runs: runs per world (half
            choose the threshold); alpha: Clopper-Pearson level.
    """

    epsilon: float = 16.0
    runs: int = 100_000
    m: int = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int("PolicyValueAuditConfig", "m", self.m, ge=1)


#: The audited spec's public bounds (off-policy: every component released).
AUDIT_BOUNDS = PolicyValueBounds(gamma=0.9, horizon=10, weight_clip=5.0, reward_bounds=(0.0, 1.0))


def _worlds(m: int) -> tuple[PolicyValueTerms, PolicyValueTerms]:
    tops = public_limits(AUDIT_BOUNDS)
    zeros = np.zeros(m)
    d0 = PolicyValueTerms(g=zeros, a=zeros, n=zeros)
    d1 = PolicyValueTerms(g=np.append(zeros, tops[0]), a=np.append(zeros, tops[1]),
                          n=np.append(zeros, tops[2]))
    return d0, d1


def run_policy_value_audit(config: PolicyValueAuditConfig, rng: np.random.Generator | int, *,
                           settings: PolicyValueSettings | None = None,
                           _noise_scale: float = 1.0) -> AuditResult:
    """Audit the policy value release (both worlds, ``config.runs`` runs each) with the
    release's ``settings`` (a configuration's
    :meth:`~gpope.core.evaluation.settings.RunSettings.policy_value_settings`; None: the packaged
    defaults)."""
    t_start = time.perf_counter()
    g0, g1 = np.random.default_rng(rng).spawn(2)
    settings = settings if settings is not None else PolicyValueSettings()
    b = AUDIT_BOUNDS
    # the claimed share of the run: what the accountant certifies for this release
    claim = settings.share * config.epsilon
    sigma = policy_value_sigma(m=config.m + 1, epsilon=config.epsilon, delta=config.delta,
                               settings=settings)
    hist_std, s_mean, s_mom = noise_scales(sigma, settings, b)
    d0, d1 = _worlds(config.m)
    grids, c0 = clip_histograms(d0, b, settings)
    _, c1 = clip_histograms(d1, b, settings)
    R = config.runs

    def world(terms: PolicyValueTerms, counts: list[np.ndarray], g: np.random.Generator):
        noisy = add_histogram_noise(counts, _noise_scale * hist_std, g, size=R)
        # the histograms' part of the likelihood ratio: the canary's bins under the claim
        stat = sum(((y - c) @ (d - c) - 0.5 * float((d - c) @ (d - c))) / hist_std**2
                   for y, c, d in zip(noisy, c0, c1, strict=True))
        clips = np.stack(np.broadcast_arrays(*clips_from_histograms(
            noisy, grids, b, settings, hist_std=hist_std, m=config.m + 1)), axis=1)
        uniq, inverse = np.unique(clips, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for u, cl in enumerate(uniq):
            rows = np.flatnonzero(inverse == u)
            f_t, m_t, _, half = exact_sums(terms, b, tuple(cl))
            f0, m0, _, _ = exact_sums(d0, b, tuple(cl))
            f1, m1, _, _ = exact_sums(d1, b, tuple(cl))
            active = half > 0
            f_std, m_std = sum_noise_stds(active, settings, s_mean=s_mean, s_mom=s_mom)
            yf, ym = add_sum_noise(f_t, m_t, _noise_scale * f_std, _noise_scale * m_std, active,
                                   rng=g, size=len(rows))
            vf, vm = np.where(active, f_std, 1.0) ** 2, np.where(m_std > 0, m_std, 1.0) ** 2
            df, dm = f1 - f0, m1 - m0
            stat[rows] += ((yf - f0) / vf) @ df - 0.5 * float(df @ (df / vf))
            stat[rows] += ((ym - m0) / vm) @ dm - 0.5 * float(dm @ (dm / vm))
        return stat

    t0, t1 = world(d0, c0, g0), world(d1, c1, g1)
    return config.verdict(
        t0, t1, started=t_start, sigma=sigma, epsilon_claimed=claim,
        delta=config.delta * settings.share,
        override=None if _noise_scale == 1.0 else {"noise_scale": float(_noise_scale)},
        sampling="policy value (add/remove)", share=settings.share, policy_value=asdict(settings))

"""Empirical privacy audit of the tuning-free default's releases (:mod:`gpope.core.untuned`).

The SSP release: the sums of the weighted rows ``[A_i, b_i, w C_i]`` clipped to ``c``, plus
Gaussian noise, C divided by ``w`` again (noise ``sigma c`` on A and b, ``sigma c / w`` on C). The
audit runs the real pieces (the multipliers of :func:`~gpope.core.untuned.release.plan_untuned`
at the claim, the release's summing kernel and noise step) on two add/remove neighbours: D0 =
base records that never visit the last feature plus an all-zero record; D1 = the same plus a
canary whose only entry is ``C_kk = G = canary_scale * c``, released as ``c / w`` on ``C_kk``, so
a release that noised C as if unweighted shows at once. The clip is public here (given the
privately released clip, the SSP step is this Gaussian mechanism); the claim is the whole
default run's.

The refinement (``release="residual"``): the clipped residuals' sum and moment vectors, noise
``s_sum c_r`` and ``s_mom c_r^2``, ``theta^`` (a fixed public draw) and ``c_r`` (``clip``) public.
The canary is ``b_k = G``: its residual is ``G e_k`` whatever ``theta^``. This release carries too
little of a run's mu^2 for a factor-2 error in it to break the run's claim measurably, so its
claim is its own: the epsilon certified for ``GaussianDpEvent(s_residual)`` alone.

Both statistics are Neyman-Pearson log-likelihood ratios under the CLAIMED noise; thresholds and
Clopper-Pearson bounds as in :mod:`gpope.core.audit.gpope`. Broken mechanisms (test-only):
``_noise_scale`` scales the noise; ``_unweighted_c_noise`` (SSP only) draws C's noise at
``sigma c`` instead of ``sigma c / w``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gpope.core.audit.gpope import AuditResult, CanaryClaim, base_records
from gpope.core.ssp import (
    c_block_scale,
    release_noisy_statistics,
    split_sigma,
    ssp_epsilon,
    statistics_vectors,
)
from gpope.core.untuned.release import (
    _residual_kernel,
    _sum_kernel,
    plan_untuned,
    release_residuals,
    release_weighted_sums,
)
from gpope.core.untuned.settings import UntunedSettings
from gpope.core.validation import check_choice, check_number

__all__ = ["UntunedAuditConfig", "run_untuned_audit"]


@dataclass(frozen=True, kw_only=True)
class UntunedAuditConfig(CanaryClaim):
    """Settings of one audit of the default's SSP or residual release (all public): the claim
    (a default run at epsilon, delta), ``clip`` (the SSP clip, or the residual clip c_r), the
    default's public rules, ``release`` ("ssp" or "residual") and the run's ``moments_share``."""

    runs: int = 400_000
    settings: UntunedSettings = field(default_factory=UntunedSettings)
    release: Literal["ssp", "residual"] = "ssp"
    moments_share: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("UntunedAuditConfig", "release", self.release, ("ssp", "residual"))
        check_number("UntunedAuditConfig", "moments_share", self.moments_share, gt=0.0, lt=1.0)

    @classmethod
    def preset(cls, release: str, **overrides: Any) -> UntunedAuditConfig:
        """The documented settings of ``release``: ssp, a default run at epsilon 4; residual,
        at epsilon 10 with residual clip 2 (its own claim 3.84, module docstring)."""
        base: dict[str, Any] = {"release": release}
        if release == "residual":
            base.update(epsilon=10.0, clip=2.0)
        return cls(**{**base, **overrides})


def _worlds(config: UntunedAuditConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Statistics rows of D0 and D1 ((m + 1, 2n^2 + n) each) and the canary's coordinate."""
    m, n = config.m, config.n_features
    A, b, C = base_records(config, rng)
    v0 = statistics_vectors(A, b, C)
    C1 = C.copy()
    C1[m, n - 1, n - 1] = config.canary_scale * config.clip
    coord = n * n + n + (n - 1) * n + (n - 1)  # C_kk in [vec A, b, vec C]
    return v0, statistics_vectors(A, b, C1), coord


def _residual_audit(config: UntunedAuditConfig, gens: list[np.random.Generator], *,
                    started: float, noise_scale: float) -> AuditResult:
    """The refinement's audit (module docstring)."""
    g_data, g0, g1 = gens
    m, n, c, R, ms = config.m, config.n_features, config.clip, config.runs, config.moments_share
    A, b, C = base_records(config, g_data)
    theta = g_data.normal(size=n)  # theta^: public post-processing of the SSP release
    v0 = statistics_vectors(A, b, C)
    b1 = b.copy()
    b1[m, n - 1] = config.canary_scale * c
    v1 = statistics_vectors(A, b1, C)
    sigma = plan_untuned(m=m + 1, epsilon=config.epsilon, delta=config.delta,
                         settings=config.settings).residual
    s_sum, s_mom = split_sigma(sigma, ms)  # the claimed split

    def world(rows: np.ndarray, g: np.random.Generator) -> np.ndarray:
        exact = _residual_kernel(theta, n, c)(np.arange(len(rows)), rows)
        r_sum, mom, _, _ = release_residuals(np.broadcast_to(exact, (R, exact.shape[1])), n=n,
                                             bound=c, sigma=sigma * noise_scale,
                                             moments_share=ms, rng=g)
        y1, y2 = r_sum[:, n - 1], mom[:, -1]  # r_k and (r r^T)_kk (the last upper-triangle entry)
        return ((y1 * c - 0.5 * c**2) / (s_sum * c) ** 2
                + (y2 * c**2 - 0.5 * c**4) / (s_mom * c * c) ** 2)

    t0, t1 = world(v0, g0), world(v1, g1)
    return config.verdict(
        t0, t1, started=started, sigma=sigma,
        override={"noise_scale": float(noise_scale)} if noise_scale != 1.0 else None,
        epsilon_claimed=ssp_epsilon(m=m + 1, sigma=sigma, delta=config.delta),
        sampling="untuned residual (add/remove)")


def run_untuned_audit(config: UntunedAuditConfig, rng: np.random.Generator | int, *,
                      _noise_scale: float = 1.0, _unweighted_c_noise: bool = False
                      ) -> AuditResult:
    """Audit the default's SSP release or its residual release (``config.release``; both
    worlds, ``config.runs`` runs each); see the module docstring."""
    t_start = time.perf_counter()
    if config.release == "residual":
        return _residual_audit(config, np.random.default_rng(rng).spawn(3), started=t_start,
                               noise_scale=_noise_scale)
    g_data, g0, g1 = np.random.default_rng(rng).spawn(3)
    v0, v1, coord = _worlds(config, g_data)
    st, n, c, R = config.settings, config.n_features, config.clip, config.runs
    sigma = plan_untuned(m=config.m + 1, epsilon=config.epsilon, delta=config.delta,
                         settings=st).statistics
    used = sigma * _noise_scale
    w = st.second_moment_weight
    weights = c_block_scale(n, w)

    def world(rows: np.ndarray, g: np.random.Generator) -> np.ndarray:
        exact = _sum_kernel(c, weights)(np.arange(len(rows)), rows)  # (1, 2n^2+n)
        sums = np.broadcast_to(exact, (R, exact.shape[1]))
        if _unweighted_c_noise:  # broken: C divided by w, its noise not
            noisy = release_noisy_statistics(sums / weights, n=n, m=config.m + 1, sigma=used,
                                             clip=c, rng=g)
        else:
            noisy = release_weighted_sums(sums, n=n, m=config.m + 1, sigma=used, clip=c,
                                          weight=w, rng=g)
        y = noisy.sums[:, coord]
        shift, s = c / w, sigma * c / w  # the canary's move and the claimed noise std on C
        return (y * shift - 0.5 * shift**2) / s**2

    t0, t1 = world(v0, g0), world(v1, g1)
    override: dict[str, Any] = {}
    if _noise_scale != 1.0:
        override["noise_scale"] = float(_noise_scale)
    if _unweighted_c_noise:
        override["c_noise"] = "unweighted"
    return config.verdict(t0, t1, started=t_start, sigma=sigma, override=override or None,
                          sampling="untuned ssp (add/remove)")

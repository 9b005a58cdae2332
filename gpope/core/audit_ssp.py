"""Empirical privacy audit of the SSP estimator's release (:mod:`gpope.core.ssp`).

The SSP mechanism releases the grouped sums of jointly clipped per-trajectory statistics plus
Gaussian noise once (``GaussianDpEvent(sigma)`` under add/remove). The audit runs the real
mechanism pieces (:func:`~gpope.core.ssp.statistics_vectors`,
:func:`~gpope.core.ssp.clip_statistics`, :func:`~gpope.core.ssp.assign_groups` with a fresh key
per run, :func:`~gpope.core.ssp.group_sums`, :func:`~gpope.core.ssp.release_noisy_statistics`
with sigma from :func:`~gpope.core.ssp.ssp_sigma`) on two neighbouring data sets:

* D0: base records whose ``b`` has a zero last coordinate (and zero last rows/columns of A, C),
  plus an all-zero record (the same as absent);
* D1: the same base plus a canary record with ``b = G e_k``, ``G = canary_scale * clip``,
  which the clip maps to norm ``clip`` on the ``b_k`` coordinate only.

Each group's noisy ``b_k`` is ``clip * [canary in this group] + N(0, (sigma clip)^2)``, the
canary's group uniform over the K groups: the test statistic is the log-likelihood ratio
``log mean_g exp((y_g clip - clip^2 / 2) / s^2)`` with ``s = sigma clip`` (the claimed sigma). Thresholds and
Clopper-Pearson bounds as in :mod:`gpope.core.audit`. ``noise_scale`` (test-only) builds the
broken mechanism whose noise is scaled (0.5: the factor-2 error the audit must see).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp

from gpope.core.audit import AuditResult, _bounds
from gpope.core.ssp import (
    assign_groups,
    clip_statistics,
    group_sums,
    release_noisy_statistics,
    ssp_sigma,
    statistics_vectors,
)
from gpope.core.validation import check_int, check_number

__all__ = ["SSPAuditConfig", "run_ssp_audit"]


@dataclass(frozen=True, kw_only=True)
class SSPAuditConfig:
    """Settings of one SSP audit (all public).

    Attributes:
        m: base records; epsilon, delta: the claim (sigma calibrated by ``ssp_sigma``);
        runs: runs per world (half choose the threshold); clip: the joint clip bound;
        canary_scale: G / clip (> 1); groups: K; n_features: n >= 2; alpha: CP level.
    """

    m: int = 4
    epsilon: float = 4.0
    delta: float = 1e-5
    runs: int = 100_000
    clip: float = 1.0
    canary_scale: float = 100.0
    groups: int = 1
    n_features: int = 3
    alpha: float = 0.025

    def __post_init__(self) -> None:
        o = "SSPAuditConfig"
        check_int(o, "m", self.m, ge=1)
        check_number(o, "epsilon", self.epsilon, gt=0.0)
        check_number(o, "delta", self.delta, gt=0.0, lt=1.0)
        check_int(o, "runs", self.runs, ge=4)
        check_number(o, "clip", self.clip, gt=0.0)
        check_number(o, "canary_scale", self.canary_scale, gt=1.0)
        check_int(o, "groups", self.groups, ge=1)
        check_int(o, "n_features", self.n_features, ge=2)
        check_number(o, "alpha", self.alpha, gt=0.0, lt=0.5)


def _worlds(config: SSPAuditConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Statistics vectors of D0 and D1 ((m + 1, 2n^2 + n) each) and the canary coordinate."""
    m, n = config.m, config.n_features
    d = n - 1
    A = np.zeros((m + 1, n, n))
    C = np.zeros((m + 1, n, n))
    b = np.zeros((m + 1, n))
    X = rng.normal(size=(m, d, d)) * 0.3 * config.clip
    A[:m, :d, :d] = X + np.eye(d) * config.clip
    C[:m, :d, :d] = np.einsum("mij,mkj->mik", X, X) + np.eye(d) * config.clip
    b[:m, :d] = rng.normal(size=(m, d)) * config.clip
    v0 = statistics_vectors(A, b, C)
    b1 = b.copy()
    b1[m, n - 1] = config.canary_scale * config.clip
    v1 = statistics_vectors(A, b1, C)
    coord = n * n + (n - 1)  # b_k in [vec A, b, vec C]
    return v0, v1, coord


def run_ssp_audit(
    config: SSPAuditConfig, rng: np.random.Generator | int, *, _noise_scale: float = 1.0
) -> AuditResult:
    """Audit the SSP release (both worlds, ``config.runs`` runs each); see the module docstring."""
    t_start = time.perf_counter()
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    g_data, g0, g1 = gen.spawn(3)
    v0, v1, coord = _worlds(config, g_data)
    sigma = ssp_sigma(m=config.m + 1, epsilon=config.epsilon, delta=config.delta)
    K, R = config.groups, config.runs
    traj = np.arange(config.m + 1, dtype=np.int64)

    def world(vectors: np.ndarray, g: np.random.Generator) -> np.ndarray:
        clipped = clip_statistics(vectors, config.clip)
        sums = np.empty((R, K, vectors.shape[1]))
        keys = g.integers(0, 2**63 - 1, size=R)
        for r in range(R):  # a fresh secret assignment per run, as in the pipeline
            sums[r] = group_sums(clipped, assign_groups(traj, int(keys[r]), K), K)
        noisy = release_noisy_statistics(
            sums.reshape(R * K, -1), n=config.n_features, m=config.m + 1,
            sigma=sigma * _noise_scale, clip=config.clip, rng=g,
        )
        y = noisy.sums.reshape(R, K, -1)[:, :, coord]
        s2 = (sigma * config.clip) ** 2
        z = (y * config.clip - 0.5 * config.clip**2) / s2
        return logsumexp(z, axis=1) - np.log(K)

    t0, t1 = world(v0, g0), world(v1, g1)
    half = R // 2
    cand = np.unique(np.concatenate([t0[:half], t1[:half]]))
    if len(cand) > 4000:
        cand = np.unique(np.quantile(cand, np.linspace(0, 1, 4000)))
    score, _ = _bounds(t0[:half], t1[:half], cand, config.alpha, config.delta)
    thr = float(cand[int(np.argmax(score))])
    eps, parts = _bounds(t0[half:], t1[half:], np.array([thr]), config.alpha, config.delta)
    n_test = R - half
    eps_lower = float(eps[0])
    cfg: dict[str, Any] = {**asdict(config), "sampling": "ssp"}
    return AuditResult(
        epsilon_claimed=float(config.epsilon), epsilon_lower=eps_lower,
        passed=bool(eps_lower <= config.epsilon), sigma=float(sigma), accountant="auto",
        threshold=thr, tpr=float(parts["tp"][0]) / n_test, fpr=float(parts["fp"][0]) / n_test,
        tpr_low=float(parts["tpr_low"][0]), fpr_high=float(parts["fpr_high"][0]),
        tnr_low=float(parts["tnr_low"][0]), fnr_high=float(parts["fnr_high"][0]), n_test=n_test,
        override=None if _noise_scale == 1.0 else {"noise_scale": float(_noise_scale)},
        seconds=time.perf_counter() - t_start, config=cfg,
    )

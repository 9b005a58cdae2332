"""Empirical privacy audit of the SSP estimator's release (:mod:`gpope.core.ssp`).

The SSP mechanism releases the grouped sums of jointly clipped per-trajectory statistics plus
Gaussian noise once. The audit runs the real mechanism pieces (clip, :func:`~gpope.core.ssp.
assign_groups` with a fresh key per run, group sums, noise, sigma from
:func:`~gpope.core.ssp.ssp_sigma`) on two neighbouring data sets:

* ``relation="add_or_remove_one"``: D0 = base records with a zero last coordinate of ``b`` (and
  zero last rows/columns of A, C) plus an all-zero record; D1 = the same base plus a canary
  with ``b = G e_k``, ``G = canary_scale * clip``, which the clip maps to ``clip`` on ``b_k``.
* ``relation="replace_one"``: the base plus the canary at ``-G e_k`` (D0) or ``+G e_k`` (D1): a
  pair at distance ``2 clip``, the sensitivity :func:`~gpope.core.ssp.ssp_sigma` calibrates for.

Each group's noisy ``b_k`` is ``+-clip * [canary in this group] + N(0, (sigma clip)^2)``, the
canary's group uniform over the K groups; the statistic is the log-likelihood ratio of D1 against
D0 under the CLAIMED sigma: ``log mean_g exp((y_g c - c^2 / 2) / s^2)`` (add/remove) or
``logsumexp_g(y_g c / s^2) - logsumexp_g(-y_g c / s^2)`` (replace-one), ``c = clip``,
``s = sigma clip``. Thresholds and Clopper-Pearson bounds as in :mod:`gpope.core.audit.gpope`.

Broken mechanisms (test-only keywords): ``_noise_scale`` scales the noise (0.5: the factor-2
error); ``_sensitivity_trap`` calibrates a replace-one release for sensitivity ``clip``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp

from gpope.core.audit.gpope import AuditResult, CanaryClaim, base_records
from gpope.core.ssp import (
    assign_groups,
    clip_statistics,
    group_sums,
    release_noisy_statistics,
    ssp_sigma,
    statistics_vectors,
)
from gpope.core.validation import check_choice, check_int

__all__ = ["SSPAuditConfig", "run_ssp_audit"]


@dataclass(frozen=True, kw_only=True)
class SSPAuditConfig(CanaryClaim):
    """Settings of one SSP audit (all public): the :class:`CanaryClaim` fields (sigma calibrated by
    ``ssp_sigma`` for the claim), K ``groups`` and the ``relation`` claimed and audited."""

    groups: int = 1
    relation: str = "add_or_remove_one"

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "SSPAuditConfig"
        check_int(o, "groups", self.groups, ge=1)
        check_choice(o, "relation", self.relation, ("add_or_remove_one", "replace_one"))


def _worlds(config: SSPAuditConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Statistics vectors of D0 and D1 ((m + 1, 2n^2 + n) each) and the canary coordinate."""
    m, n = config.m, config.n_features
    A, b, C = base_records(config, rng)
    if config.relation == "replace_one":
        b[m, n - 1] = -config.canary_scale * config.clip
    v0 = statistics_vectors(A, b, C)
    b1 = b.copy()
    b1[m, n - 1] = config.canary_scale * config.clip
    v1 = statistics_vectors(A, b1, C)
    coord = n * n + (n - 1)  # b_k in [vec A, b, vec C]
    return v0, v1, coord


def run_ssp_audit(config: SSPAuditConfig, rng: np.random.Generator | int, *,
                  _noise_scale: float = 1.0, _sensitivity_trap: bool = False) -> AuditResult:
    """Audit the SSP release (both worlds, ``config.runs`` runs each); see the module docstring."""
    t_start = time.perf_counter()
    g_data, g0, g1 = np.random.default_rng(rng).spawn(3)
    v0, v1, coord = _worlds(config, g_data)
    sigma = ssp_sigma(m=config.m + 1, epsilon=config.epsilon, delta=config.delta,
                      relation=config.relation)
    used = sigma * _noise_scale
    if _sensitivity_trap:  # calibrated as if one record moved the sums by clip
        used = ssp_sigma(m=config.m + 1, epsilon=config.epsilon, delta=config.delta)
    K, R = config.groups, config.runs
    traj = np.arange(config.m + 1, dtype=np.int64)

    def world(vectors: np.ndarray, g: np.random.Generator) -> np.ndarray:
        clipped = clip_statistics(vectors, config.clip)
        sums = np.empty((R, K, vectors.shape[1]))
        if K == 1:  # one group: every assignment is the same
            sums[:] = group_sums(clipped, np.zeros(len(traj), dtype=np.int64), 1)
        else:
            keys = g.integers(0, 2**63 - 1, size=R)
            for r in range(R):  # a fresh secret assignment per run, as in the pipeline
                sums[r] = group_sums(clipped, assign_groups(traj, int(keys[r]), K), K)
        noisy = release_noisy_statistics(sums.reshape(R * K, -1), n=config.n_features,
                                         m=config.m + 1, sigma=used, clip=config.clip, rng=g)
        y = noisy.sums.reshape(R, K, -1)[:, :, coord]
        s2 = (sigma * config.clip) ** 2
        if config.relation == "replace_one":
            return (logsumexp(y * config.clip / s2, axis=1)
                    - logsumexp(-y * config.clip / s2, axis=1))
        z = (y * config.clip - 0.5 * config.clip**2) / s2
        return logsumexp(z, axis=1) - np.log(K)

    t0, t1 = world(v0, g0), world(v1, g1)
    return config.verdict(t0, t1, started=t_start, sigma=sigma,
                          override=_override(_noise_scale, _sensitivity_trap),
                          sampling=f"ssp ({_SHORT[config.relation]})")


_SHORT = {"add_or_remove_one": "add/remove", "replace_one": "replace-one"}


def _override(noise_scale: float, trap: bool) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    if noise_scale != 1.0:
        out["noise_scale"] = float(noise_scale)
    if trap:
        out["sensitivity"] = "clip"
    return out or None

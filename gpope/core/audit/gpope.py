"""Empirical privacy audit of the GPOPE solver (reference/ACCOUNTING.md, "Empirical audit").

Method (Jagielski et al. 2020; Nasr et al. 2021 "gradient canary"; Steinke, Nasr, Jagielski 2023):

1. Two neighbouring data sets of m trajectories with ``n`` features. Base records have random
   dense statistics on features ``0..n-2``; row and column ``k = n-1`` of every base ``A, C`` and
   entry ``k`` of ``b`` are zero, so no base gradient ever touches coordinates ``k`` (theta part)
   or ``n + k`` (dual part), whatever the iterate. The canary record has ``A = C = 0`` and
   ``b = -G e_k``: its gradient is the constant ``G e_{n+k}``, ``G = canary_scale * h > h`` (so a
   missing clip shows).

   * ``sampling="uniform"`` (replace-one): D0 = the base set; D1 = the base set with record 0
     replaced by the canary.
   * ``sampling="poisson"`` (add/remove): D0 = base plus a zero record (its gradient is zero: the
     same as absent); D1 = base plus the canary.

2. ``runs`` runs of the REAL solver (:func:`gpope.core.gpope.solver.run_gpope_trials`, sigma
   calibrated by the solver itself for the claimed (epsilon, delta)) on each data set, fresh
   sampling and noise per run, constant step size. The dual coordinate ``w_k`` moves only by the
   canary's clipped push and by noise; a test statistic reads it (:func:`audit_statistics`).

3. A threshold is chosen on the first half of the runs of each world (maximising the bound below);
   on the other half TPR = P1[T > t] and FPR = P0[T > t] get one-sided Clopper-Pearson bounds at
   level ``alpha`` each. (epsilon, delta)-DP implies TPR <= e^eps FPR + delta and
   TNR <= e^eps FNR + delta, so ``epsilon_lower = max(log((TPR_low - delta) / FPR_high),
   log((TNR_low - delta) / FNR_high))`` holds with confidence ``1 - 2 alpha``.
4. ``passed``: epsilon_lower <= claimed epsilon. The audit can expose a bug, never prove privacy.

Presets (:meth:`AuditConfig.preset`, used by ``gpope audit``) audit where the accountant is
nearly tight, so a factor-2 noise error is a provable violation; docs/AUDIT.md gives them, why
uniform sampling needs m = 1, and the broken mechanisms built through the solver's test-only
``_mechanism_override`` hook.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy.stats import beta as beta_dist

from gpope.core.accounting.registry import accountant_choices
from gpope.core.gpope.solver import GPOPEConfig, run_gpope_trials
from gpope.core.statistics import TrajectoryStats
from gpope.core.validation import check_choice, check_int, check_number, check_probability

_STATISTICS = ("likelihood_ratio", "max_increment", "final")

#: Documented audit settings per sampling (AuditConfig.preset); `gpope audit` uses them.
_PRESETS: dict[str, dict[str, Any]] = {
    "uniform": {"m": 1, "iterations": 4, "epsilon": 4.0, "runs": 200_000},
    "poisson": {"m": 2, "iterations": 4, "epsilon": 4.0, "batch_rate": 0.5, "runs": 200_000},
}
_QUICK_RUNS = {"uniform": 200_000, "poisson": 100_000}

__all__ = ["AuditClaim", "AuditConfig", "AuditResult", "CanaryClaim", "audit_datasets",
           "audit_statistics", "base_records", "certify", "clopper_pearson", "epsilon_lower_bound",
           "run_audit"]


@dataclass(frozen=True, kw_only=True)
class AuditClaim:
    """What every audit tests and how hard (all public): the claimed (epsilon, delta), runs per
    world (half choose the threshold, half test), the level of each one-sided Clopper-Pearson bound.
    """

    epsilon: float = 4.0
    delta: float = 1e-5
    runs: int = 200_000
    alpha: float = 0.025

    def __post_init__(self) -> None:
        o = type(self).__name__
        check_number(o, "epsilon", self.epsilon, gt=0.0)
        check_number(o, "delta", self.delta, gt=0.0, lt=1.0)
        check_int(o, "runs", self.runs, ge=4)
        check_number(o, "alpha", self.alpha, gt=0.0, lt=0.5)

    def verdict(self, t0: np.ndarray, t1: np.ndarray, *, started: float, sigma: float,
                accountant: str = "auto", override: Mapping[str, Any] | None = None,
                epsilon_claimed: float | None = None, delta: float | None = None,
                **details: Any) -> AuditResult:  # fmt: skip
        """:func:`certify` of this claim from the statistics of D0 (``t0``) and D1 (``t1``); the
        claimed epsilon and delta default to this claim's, the result's config is these settings
        plus ``details``."""
        return certify(
            t0, t1, alpha=self.alpha, sigma=sigma, accountant=accountant,
            epsilon_claimed=self.epsilon if epsilon_claimed is None else epsilon_claimed,
            delta=self.delta if delta is None else delta,
            override=None if override is None else dict(override),
            seconds=time.perf_counter() - started, config={**asdict(self), **details})  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class CanaryClaim(AuditClaim):
    """An audit of m base records plus one canary with n >= 2 features (the last is the canary's);
    ``canary_scale`` = G / clip > 1, so a missing clip shows."""

    m: int = 4
    clip: float = 1.0
    canary_scale: float = 100.0
    n_features: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        o = type(self).__name__
        check_int(o, "m", self.m, ge=1)
        check_number(o, "clip", self.clip, gt=0.0)
        check_number(o, "canary_scale", self.canary_scale, gt=1.0)
        check_int(o, "n_features", self.n_features, ge=2)


@dataclass(frozen=True, kw_only=True)
class AuditConfig(CanaryClaim):
    """Settings of one audit (all public; the :class:`CanaryClaim` fields plus the solver's).

    Attributes:
        sampling: "uniform" (replace-one) or "poisson" (add/remove).
        iterations, accountant, batch_rate (default 1/m), step_size (constant): the solver's.
        statistic: "likelihood_ratio" (white-box, the default), "max_increment" (white-box: the
            largest one-step decrease of ``w_k``) or "final" (black-box: ``-w_k`` of the final
            iterate).
    """

    epsilon: float = 2.0
    runs: int = 2000
    m: int = 1000
    sampling: Literal["uniform", "poisson"] = "uniform"
    iterations: int = 1000
    accountant: str = "auto"
    batch_rate: float | None = None
    step_size: float = 0.1
    statistic: Literal["likelihood_ratio", "max_increment", "final"] = "likelihood_ratio"

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "AuditConfig"
        check_choice(o, "sampling", self.sampling, ("uniform", "poisson"))
        check_int(o, "iterations", self.iterations, ge=1)
        check_choice(o, "accountant", self.accountant, accountant_choices())
        if self.batch_rate is not None:
            check_probability(o, "batch_rate", self.batch_rate)
        check_number(o, "step_size", self.step_size, gt=0.0)
        check_choice(o, "statistic", self.statistic, _STATISTICS)

    def solver_config(self) -> GPOPEConfig:
        """The solver configuration audited (sigma calibrated by the solver)."""
        poisson = self.sampling == "poisson"
        return GPOPEConfig(iterations=self.iterations, step_size=self.step_size, clip=self.clip,
                           epsilon=self.epsilon, delta=self.delta, accountant=self.accountant,
                           sampling=self.sampling,
                           batch_rate=(self.batch_rate or 1.0 / self.m) if poisson else None,
                           trace_every=1 if self.statistic != "final" else None)

    @classmethod
    def preset(cls, sampling: str, *, quick: bool = False, **overrides: Any) -> AuditConfig:
        """The documented audit settings for ``sampling`` (module docstring); ``quick``: fewer
        Poisson runs (the test suite)."""
        base = dict(_PRESETS[sampling])
        if quick:
            base["runs"] = _QUICK_RUNS[sampling]
        base.update(overrides)
        return cls(sampling=sampling, **base)


@dataclass(frozen=True)
class AuditResult:
    """Outcome of one audit: the claimed epsilon, the empirical lower bound (max of both
    directions; -inf if none), ``passed`` (lower <= claimed), the threshold chosen on the first
    halves, TPR and FPR on the test halves with the Clopper-Pearson bounds of both directions, the
    test runs per world, the mechanism ``override`` (None for the real solver), time and config."""

    epsilon_claimed: float
    epsilon_lower: float
    passed: bool
    sigma: float
    accountant: str
    threshold: float
    tpr: float
    fpr: float
    tpr_low: float
    fpr_high: float
    tnr_low: float
    fnr_high: float
    n_test: int
    override: dict[str, Any] | None
    seconds: float
    config: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return asdict(self)

    def summary(self) -> str:
        """One line for humans."""
        name = "real solver" if not self.override else f"broken solver {self.override}"
        verdict = "PASS" if self.passed else "FAIL"
        return (f"{self.config['sampling']:8s} {name:40s} claimed eps {self.epsilon_claimed:.3g}  "
                f"empirical lower bound {self.epsilon_lower:.3g}  [{verdict}]  "
                f"(TPR {self.tpr:.3f}, FPR {self.fpr:.4f}, sigma {self.sigma:.3g}, "
                f"{self.seconds:.1f}s)")


# ---------------------------------------------------------------------- statistics helpers
def clopper_pearson(k: int | np.ndarray, n: int, alpha: float, side: Literal["lower", "upper"]
                    ) -> float | np.ndarray:
    """One-sided exact (Clopper-Pearson) bound on a binomial proportion ``k / n`` holding with
    probability >= 1 - alpha: "lower" is the Beta(alpha; k, n-k+1) quantile (0 when k = 0),
    "upper" the Beta(1-alpha; k+1, n-k) quantile (1 when k = n)."""
    k_arr = np.asarray(k, dtype=np.float64)
    if side == "lower":
        with np.errstate(all="ignore"):
            out = np.where(k_arr <= 0, 0.0, beta_dist.ppf(alpha, np.maximum(k_arr, 1e-300),
                                                          n - k_arr + 1))
    elif side == "upper":
        with np.errstate(all="ignore"):
            out = np.where(k_arr >= n, 1.0, beta_dist.ppf(1 - alpha, k_arr + 1,
                                                          np.maximum(n - k_arr, 1e-300)))
    else:
        raise ValueError(f"side must be 'lower' or 'upper'; got {side!r}")
    return float(out) if np.ndim(k) == 0 else out


def epsilon_lower_bound(rate_low: float | np.ndarray, other_high: float | np.ndarray,
                        delta: float) -> float | np.ndarray:
    """``log((rate_low - delta) / other_high)``, -inf where the numerator is <= 0."""
    num = np.asarray(rate_low, dtype=np.float64) - delta
    den = np.asarray(other_high, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(num > 0, np.log(np.maximum(num, 1e-300) / den), -np.inf)
    return float(out) if np.ndim(out) == 0 else out


def _bounds(t0: np.ndarray, t1: np.ndarray, thresholds: np.ndarray, alpha: float, delta: float
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Epsilon bounds (both directions) at each threshold from statistics of D0 (t0), D1 (t1)."""
    n0, n1 = len(t0), len(t1)
    s0, s1 = np.sort(t0), np.sort(t1)
    fp = n0 - np.searchsorted(s0, thresholds, side="right")  # D0 runs with T > t
    tp = n1 - np.searchsorted(s1, thresholds, side="right")
    tpr_low = clopper_pearson(tp, n1, alpha, "lower")
    fpr_high = clopper_pearson(fp, n0, alpha, "upper")
    tnr_low = clopper_pearson(n0 - fp, n0, alpha, "lower")
    fnr_high = clopper_pearson(n1 - tp, n1, alpha, "upper")
    e1 = epsilon_lower_bound(tpr_low, fpr_high, delta)
    e2 = epsilon_lower_bound(tnr_low, fnr_high, delta)
    parts = {"tp": tp, "fp": fp, "tpr_low": tpr_low, "fpr_high": fpr_high, "tnr_low": tnr_low,
             "fnr_high": fnr_high}
    return np.maximum(e1, e2), parts


# ---------------------------------------------------------------------- data sets
def base_records(config: CanaryClaim, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A (m+1, n, n), b (m+1, n), C (m+1, n, n)): ``config.m`` base records at the scale of
    ``config.clip`` that never visit the last feature (zero last rows and columns of A and C,
    zero last b), and an all-zero record m where a canary goes."""
    m, n, clip = config.m, config.n_features, config.clip
    d = n - 1
    A = np.zeros((m + 1, n, n))
    C = np.zeros((m + 1, n, n))
    b = np.zeros((m + 1, n))
    X = rng.normal(size=(m, d, d)) * 0.3 * clip
    A[:m, :d, :d] = X + np.eye(d) * clip
    C[:m, :d, :d] = np.einsum("mij,mkj->mik", X, X) + np.eye(d) * clip
    b[:m, :d] = rng.normal(size=(m, d)) * clip
    return A, b, C


def audit_datasets(config: AuditConfig, rng: np.random.Generator
                   ) -> tuple[TrajectoryStats, TrajectoryStats]:
    """The neighbouring data sets (D0, D1) described in the module docstring (dense stats)."""
    m, k = config.m, config.n_features - 1
    A, b, C = base_records(config, rng)
    g = config.canary_scale * config.clip
    b1 = b.copy()
    if config.sampling == "uniform":
        # Replace-one canary pair at distance 2h: record 0 pushes the canary coordinate by -h
        # (D0) or +h (D1) once clipped, the worst case the 2h sensitivity covers.
        A, C = A[:m].copy(), C[:m].copy()
        A[0], C[0], b[0], b1[0] = 0.0, 0.0, 0.0, 0.0
        b[0, k], b1[0, k] = g, -g
        return TrajectoryStats.from_dense(A, b[:m], C), TrajectoryStats.from_dense(A, b1[:m], C)
    b1[m, k] = -g  # add/remove: base records 1..m-1 plus the zero record (D0) or the canary (D1)
    return (TrajectoryStats.from_dense(A[1:], b[1:], C[1:]),
            TrajectoryStats.from_dense(A[1:], b1[1:], C[1:]))


def audit_statistics(res: Any, config: AuditConfig) -> np.ndarray:
    """(R,) test statistics of a trials result: larger means "D1" (canary +h present).

    ``likelihood_ratio``: with a constant step beta, the canary coordinate moves each step by
    ``y_s = (w_k[s] - w_k[s+1]) * d / beta`` (d = 1 for uniform, q m for Poisson) = the canary's
    clipped push (if sampled) + N(0, s^2) noise, ``s = h sigma``, independently across steps. The
    statistic is the log-likelihood ratio of D1 vs D0 under the CLAIMED sigma, summed over steps;
    per step: uniform (pair at +-h, sampled w.p. p = 1/m):
    ``log((1-p) phi(y) + p phi(y-h)) - log((1-p) phi(y) + p phi(y+h))``; Poisson (canary at h vs
    absent, rate q): ``log((1-q) + q exp((y h - h^2/2) / s^2))``. It is the most powerful test of
    the per-step model (Neyman-Pearson)."""
    k = config.n_features - 1
    if config.statistic == "final":
        return -res.w[:, k]
    wk = res.trace_w[:, :, k]  # (R, N + 1)
    moves = wk[:, :-1] - wk[:, 1:]
    if config.statistic == "max_increment":
        return np.max(moves, axis=1)
    h = config.clip
    s = h * float(res.sigma)
    if config.sampling == "poisson":
        q = float(config.solver_config().batch_rate)
        y = moves * (q * config.m) / config.step_size
        z = (y * h - 0.5 * h * h) / (s * s)
        if q >= 1.0:
            return z.sum(axis=1)
        return np.logaddexp(math.log1p(-q), math.log(q) + z).sum(axis=1)
    p = 1.0 / config.m
    y = moves / config.step_size
    if p >= 1.0:  # m = 1: the pair is sampled every step, the ratio is Gaussian's
        return (2.0 * h * y / (s * s)).sum(axis=1)
    base = math.log1p(-p) - y * y / (2 * s * s)
    up = np.logaddexp(base, math.log(p) - (y - h) ** 2 / (2 * s * s))
    down = np.logaddexp(base, math.log(p) - (y + h) ** 2 / (2 * s * s))
    return (up - down).sum(axis=1)


# ---------------------------------------------------------------------- the audit
def run_audit(config: AuditConfig, rng: np.random.Generator | int, *,
              _mechanism_override: Mapping[str, Any] | None = None) -> AuditResult:
    """Audit the solver once (both worlds, ``config.runs`` runs each); data, runs of D0 and runs
    of D1 draw from independent child streams of ``rng``. ``_mechanism_override``: test-only,
    passed to the solver's hook to audit a broken mechanism."""
    t_start = time.perf_counter()
    g_data, g0, g1 = np.random.default_rng(rng).spawn(3)
    d0, d1 = audit_datasets(config, g_data)
    solver = config.solver_config()
    R = config.runs
    with np.errstate(all="ignore"):
        r0 = run_gpope_trials(d0, solver, g0, R, _mechanism_override=_mechanism_override)
        r1 = run_gpope_trials(d1, solver, g1, R, _mechanism_override=_mechanism_override)
    t0, t1 = audit_statistics(r0, config), audit_statistics(r1, config)
    return config.verdict(t0, t1, started=t_start, sigma=float(r0.sigma),
                          accountant=str(r0.accountant), override=_mechanism_override)


def certify(t0: np.ndarray, t1: np.ndarray, *, epsilon_claimed: float, alpha: float, delta: float,
            sigma: float, accountant: str, override: dict[str, Any] | None, seconds: float,
            config: dict[str, Any]) -> AuditResult:
    """The audit's verdict from test statistics of D0 (``t0``) and D1 (``t1``), one per run.

    The threshold maximising the bound is chosen on the first half of each world's runs; the
    Clopper-Pearson lower bound on epsilon (both directions, level ``alpha`` each) is computed
    on the other half only, so the choice does not bias it. Non-finite statistics count as +inf.
    """
    t0 = np.where(np.isfinite(t0), t0, np.inf)
    t1 = np.where(np.isfinite(t1), t1, np.inf)
    half0, half1 = len(t0) // 2, len(t1) // 2
    cand = np.unique(np.concatenate([t0[:half0], t1[:half1]]))
    if len(cand) > 4000:
        cand = np.unique(np.quantile(cand, np.linspace(0, 1, 4000)))
    score, _ = _bounds(t0[:half0], t1[:half1], cand, alpha, delta)
    thr = float(cand[int(np.argmax(score))])
    eps, parts = _bounds(t0[half0:], t1[half1:], np.array([thr]), alpha, delta)
    n0, n1 = len(t0) - half0, len(t1) - half1
    eps_lower = float(eps[0])
    return AuditResult(epsilon_claimed=float(epsilon_claimed), epsilon_lower=eps_lower,
                       passed=bool(eps_lower <= epsilon_claimed), sigma=float(sigma),
                       accountant=accountant, threshold=thr, tpr=float(parts["tp"][0]) / n1,
                       fpr=float(parts["fp"][0]) / n0, tpr_low=float(parts["tpr_low"][0]),
                       fpr_high=float(parts["fpr_high"][0]), tnr_low=float(parts["tnr_low"][0]),
                       fnr_high=float(parts["fnr_high"][0]), n_test=min(n0, n1), override=override,
                       seconds=seconds, config=config)


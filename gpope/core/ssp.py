"""Sufficient-statistics perturbation (SSP): a one-shot private LSTD and a private MSPBE.

The mechanism (:func:`release_noisy_statistics`), one Gaussian release per run:

1. **Clip jointly.** Each trajectory's ``v_i = [vec A_i, b_i, vec C_i]`` (length ``2 n^2 + n``)
   is scaled to L2 norm at most the public bound ``clip`` (:func:`clip_statistics`: every row is
   bounded whatever the data, non-finite ones included).
2. **Sum.** ``S = sum_i v_i`` (a Spark aggregate in the pipeline; :func:`group_sums` is the
   in-memory reference, and K > 1 random groups keyed by :func:`assign_groups` serve the audit).
3. **Noise once.** ``S~ = S + N(0, (sigma * clip)^2 I)``. Under add/remove adjacency one patient
   changes one ``v_i``, so ``S`` has L2 sensitivity ``clip``: ``GaussianDpEvent(sigma)``,
   calibrated by the same accountants as GPOPE (:func:`ssp_sigma`). The run's sigma is split
   between this release and the residual second moments the intervals need (:func:`split_sigma`;
   the two compose exactly to ``sigma``).
4. **Solve** (post-processing; :func:`solve_ssp`): ``theta = argmin ||A~ theta - b~||^2 + lambda
   ||theta||^2`` on the supported features, as a stacked least squares problem. The pipeline
   uses ``lambda = 0`` (its bias is second order, and the bootstrap interval corrects it to first
   order); ``regularize=True`` is the AdaSSP rule of Wang (2018), "Revisiting differentially
   private linear regression" (UAI), Algorithm 2.

The same release gives MSPBE(theta) of any theta as post-processing (:func:`private_mspbe`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpope.core.validation import check_int, check_number
from gpope.errors import ConfigError, DataError

__all__ = ["NoisyStatistics", "assign_groups", "c_block_scale", "clip_statistics", "group_sums",
           "noise_norm_bound", "private_mspbe", "release_noisy_statistics", "solve_ssp",
           "split_vector", "ssp_dp_event", "ssp_epsilon", "ssp_sigma", "statistics_vectors",
           "supported_features", "vector_features"]

#: Probability that the pooled noise's spectral norm exceeds the bound used by the AdaSSP rule.
NOISE_BOUND_FAILURE = 0.05

#: A feature enters the SSP solve when its noisy C_jj exceeds this many noise std.
SUPPORT_Z = 4.0

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def statistics_vectors(A: np.ndarray, b: np.ndarray, C: np.ndarray) -> np.ndarray:
    """(k, 2 n^2 + n) rows ``[vec A_i, b_i, vec C_i]`` from A (k, n, n) or (k, n*n), b (k, n),
    C likewise."""
    b = np.asarray(b, dtype=np.float64)
    k, n = b.shape
    A = np.asarray(A, dtype=np.float64).reshape(k, n * n)
    C = np.asarray(C, dtype=np.float64).reshape(k, n * n)
    return np.concatenate([A, b, C], axis=1)


def vector_features(width: int) -> int:
    """n of statistics vectors of length ``width`` = 2n^2 + n.

    Raises:
        DataError: ``width`` is not 2n^2 + n for any n >= 1.
    """
    n = round((math.sqrt(1 + 8 * int(width)) - 1) / 4)
    if n < 1 or 2 * n * n + n != int(width):
        raise DataError(f"Statistics vectors have length 2n^2+n; {width} is not of that form.")
    return n


def split_vector(v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse of :func:`statistics_vectors` over a leading axis: (..., n, n), (..., n), (..., n, n)."""
    v = np.asarray(v, dtype=np.float64)
    lead = v.shape[:-1]
    if v.shape[-1] != 2 * n * n + n:
        raise DataError(f"Statistics vectors must have length 2n^2+n = {2 * n * n + n}; got {v.shape[-1]}.")
    A = v[..., : n * n].reshape(*lead, n, n)
    b = v[..., n * n : n * n + n]
    C = v[..., n * n + n :].reshape(*lead, n, n)
    return A, b, C


def clip_statistics(vectors: np.ndarray, clip: float) -> np.ndarray:
    """Rows scaled to L2 norm <= ``clip`` by the one total clip (:func:`gpope.core.mechanisms.clipping.clip_rows`:
    huge, infinite and NaN rows are bounded too); rows already inside the ball are unchanged."""
    from gpope.core.mechanisms.clipping import clip_rows

    clip = check_number("clip_statistics", "clip", clip, gt=0.0)
    return clip_rows(np.asarray(vectors, dtype=np.float64), clip)


def assign_groups(traj_index: np.ndarray, key: int, groups: int) -> np.ndarray:
    """(k,) group of each trajectory: SplitMix64(traj_index XOR key) mod ``groups``.

    A keyed mixer (Steele, Lea and Flood 2014, the SplitMix64 finaliser): with a secret random
    ``key`` the groups behave as independent uniform labels; the same key gives the same groups
    in Spark and in memory.
    """
    groups = check_int("assign_groups", "groups", groups, ge=1)
    z = np.asarray(traj_index, dtype=np.int64).astype(np.uint64) ^ np.uint64(int(key) & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(groups)).astype(np.int64)


def group_sums(vectors: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """(groups, p) sums of the rows of ``vectors`` (k, p) by ``group`` (k,) (already clipped)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    group = np.asarray(group, dtype=np.int64)
    onehot = np.zeros((groups, len(group)))
    onehot[group, np.arange(len(group))] = 1.0
    return onehot @ vectors  # one BLAS product; exact: each output is a plain sum of its rows


#: Neighbouring relations the release is accounted under: the run's own adjacency.
_RELATIONS: tuple[str, ...] = ("add_or_remove_one", "replace_one")


def _sensitivity_factor(relation: str) -> float:
    """L2 sensitivity of the group sums in units of ``clip``: 1 (add/remove) or 2 (replace-one:
    both vectors of norm <= clip, opposite directions)."""
    from gpope.core.validation import check_choice

    check_choice("ssp", "relation", relation, _RELATIONS)
    return 2.0 if relation == "replace_one" else 1.0


def ssp_sigma(*, m: int, epsilon: float, delta: float, accountant: str = "auto",
              relation: str = "add_or_remove_one") -> float:
    """Noise multiplier (noise std / ``clip``) of one Gaussian release meeting (epsilon, delta),
    by the same accountants as GPOPE (one step, Poisson rate 1: the plain Gaussian mechanism);
    twice the add/remove one under ``relation="replace_one"`` (sensitivity ``2 clip``)."""
    from gpope.core.accounting import calibrate_sigma

    factor = _sensitivity_factor(relation)
    return factor * float(calibrate_sigma(m=m, iterations=1, epsilon=epsilon, delta=delta,
                                          accountant=accountant, sampling="poisson",
                                          batch_rate=1.0))


def ssp_epsilon(*, m: int, sigma: float, delta: float, accountant: str = "auto",
                relation: str = "add_or_remove_one") -> float:
    """Epsilon certified for one Gaussian release with noise multiplier ``sigma`` under
    ``relation`` (replace-one: noise std / sensitivity = ``sigma / 2``)."""
    from gpope.core.accounting import epsilon_spent

    return float(epsilon_spent(m=m, iterations=1, sigma=sigma / _sensitivity_factor(relation),
                               delta=delta, accountant=accountant, sampling="poisson",
                               batch_rate=1.0))


def ssp_dp_event(sigma: float, relation: str = "add_or_remove_one") -> Any:
    """``GaussianDpEvent(sigma)`` under add/remove; ``GaussianDpEvent(sigma / 2)`` under replace-one
    (dp-accounting reads the multiplier as noise std / sensitivity, reference/ACCOUNTING.md)."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(
        noise_multiplier=float(sigma) / _sensitivity_factor(relation))


@dataclass(frozen=True)
class NoisyStatistics:
    """A released noisy-statistics vector per group (public after the mechanism).

    Attributes:
        sums: (K, 2 n^2 + n) noisy group sums ``[vec A, b, vec C]``; n: features; m: trajectories.
        sigma, clip: noise multiplier and L2 bound (noise std per entry ``sigma * clip``).
        c_noise_scale: the noise std on the C block relative to A and b (a release that clipped
            ``[A_i, b_i, w C_i]`` and divided C by w has ``1 / w``).
    """

    sums: np.ndarray
    n: int
    m: int
    sigma: float
    clip: float
    c_noise_scale: float = 1.0

    def __post_init__(self) -> None:
        s = np.asarray(self.sums, dtype=np.float64)
        if s.ndim != 2 or s.shape[1] != 2 * self.n * self.n + self.n:
            raise DataError(f"NoisyStatistics.sums must have shape (K, {2 * self.n ** 2 + self.n}); got {s.shape}.")
        object.__setattr__(self, "sums", s)

    @property
    def groups(self) -> int:
        return int(self.sums.shape[0])

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise on each entry of one group's sums."""
        return float(self.sigma * self.clip)

    def pooled(self, drop: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Pooled sums (A (n, n), b (n,), C (n, n)) over all groups, or all but ``drop``;
        C symmetrised (post-processing)."""
        total = self.sums.sum(axis=0)
        if drop is not None:
            total = total - self.sums[drop]
        A, b, C = split_vector(total, self.n)
        return A.copy(), b.copy(), 0.5 * (C + C.T)

    def pooled_noise_std(self, groups: int | None = None) -> float:
        """Noise std per entry of the sum of ``groups`` groups (default all K)."""
        k = self.groups if groups is None else groups
        return self.noise_std * math.sqrt(k)


def c_block_scale(n: int, scale: float) -> np.ndarray:
    """(2n^2+n,) per-entry factors of a statistics row ``[vec A, b, vec C]``: 1 on A and b,
    ``scale`` on C."""
    return np.concatenate([np.ones(n * n + n), np.full(n * n, float(scale))])


def release_noisy_statistics(
    sums: np.ndarray, *, n: int, m: int, sigma: float, clip: float, rng: np.random.Generator,
    c_noise_scale: float = 1.0) -> NoisyStatistics:
    """The mechanism's noise step: ``sums`` (K, 2n^2+n) of CLIPPED statistics plus iid
    ``N(0, (sigma clip)^2)`` on A and b and ``N(0, (sigma clip c_noise_scale)^2)`` on C
    (``sigma = 0``: no noise). Given rows ``[A_i, b_i, C_i / c_noise_scale]`` clipped to
    ``clip`` and disjoint groups, the release is ``GaussianDpEvent(sigma)`` under add/remove.
    """
    check_number("release_noisy_statistics", "sigma", sigma, ge=0.0)
    check_number("release_noisy_statistics", "clip", clip, gt=0.0)
    check_number("release_noisy_statistics", "c_noise_scale", c_noise_scale, ge=1.0)
    check_int("release_noisy_statistics", "m", m, ge=1)
    sums = np.asarray(sums, dtype=np.float64)
    if not isinstance(rng, np.random.Generator):
        raise ConfigError(f"The 'rng' parameter must be a numpy Generator. Got {type(rng).__name__} instead.")
    noisy = sums.copy()
    if sigma > 0:
        noisy = sums + (sigma * clip) * c_block_scale(n, c_noise_scale) * rng.standard_normal(
            sums.shape)
    return NoisyStatistics(sums=noisy, n=int(n), m=int(m), sigma=float(sigma), clip=float(clip),
                           c_noise_scale=float(c_noise_scale))


def noise_norm_bound(n: int, std: float, failure: float = NOISE_BOUND_FAILURE) -> float:
    """A (1 - failure) upper bound on the spectral norm of an n x n matrix of iid N(0, std^2):
    ``std (2 sqrt(n) + sqrt(2 log(1/failure)))`` (Davidson and Szarek 2001, Thm. II.13)."""
    return float(std * (2.0 * math.sqrt(n) + math.sqrt(2.0 * math.log(1.0 / failure))))


def supported_features(C: np.ndarray, *, noise_std: float, z: float = SUPPORT_Z) -> np.ndarray:
    """(n,) bool: features whose noisy ``C_jj`` exceeds ``z`` noise std. A feature the data hardly
    visits has ``C_jj ~ 0`` and a pure-noise row in A; it is left out of the solve. Post-processing.
    """
    d = np.diag(np.asarray(C, dtype=np.float64))
    if noise_std <= 0:
        return d > 0
    return d > z * noise_std


def solve_ssp(
    A: np.ndarray, b: np.ndarray, *, noise_std: float, C: np.ndarray | None = None,
    failure: float = NOISE_BOUND_FAILURE, regularize: bool = True) -> tuple[np.ndarray, float]:
    """AdaSSP-style regularised LSTD on noisy sums: (theta (n,), lambda).

    ``theta = argmin ||A theta - b||^2 + lambda ||theta||^2`` over the supported features (theta_j
    = 0 elsewhere), ``lambda = max(0, tau^2 - s_min(A)^2)``, ``tau = noise_norm_bound(n, noise_std,
    failure)`` (Wang 2018, Algorithm 2, with the noise level in place of the privately estimated
    minimum eigenvalue), solved as ``[A; sqrt(lambda) I] theta = [b; 0]`` (the minimum-norm solution
    when lambda = 0 and A is singular). Scale-free. ``regularize=False``: lambda = 0, first-order
    unbiased, as the bootstrap intervals assume."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = b.shape[0]
    if not (np.isfinite(A).all() and np.isfinite(b).all()):
        raise DataError("solve_ssp needs finite statistics.")
    keep = np.ones(n, dtype=bool) if C is None else supported_features(C, noise_std=noise_std)
    theta = np.zeros(n)
    k = int(keep.sum())
    if k == 0:
        return theta, 0.0
    Ak, bk = A[np.ix_(keep, keep)], b[keep]
    tau = noise_norm_bound(k, noise_std, failure) if noise_std > 0 and regularize else 0.0
    s_min = float(np.linalg.svd(Ak, compute_uv=False)[-1])
    lam = max(0.0, tau * tau - s_min * s_min)
    if lam > 0:
        M = np.vstack([Ak, math.sqrt(lam) * np.eye(k)])
        rhs = np.concatenate([bk, np.zeros(k)])
    else:
        M, rhs = Ak, bk
    theta[keep] = np.linalg.lstsq(M, rhs, rcond=None)[0]
    return theta, lam


def _psd_floor(C: np.ndarray, floor: float) -> np.ndarray:
    """Symmetric C with eigenvalues raised to at least ``floor`` (post-processing of noisy C)."""
    w, V = np.linalg.eigh(0.5 * (C + C.T))
    return (V * np.maximum(w, floor)) @ V.T


def private_mspbe(theta: np.ndarray, noisy: NoisyStatistics) -> tuple[float, float]:
    """(MSPBE(theta), relative MSPBE(theta)) from a noisy-statistics release: post-processing.

    The pooled means ``A~/m, b~/m, C~/m`` with the noisy C's eigenvalues floored at the noise bound
    (so ``C^-1`` does not amplify noise on directions the data never visited); relative MSPBE is
    MSPBE(theta) / MSPBE(0) under the same statistics."""
    from gpope.core.metrics import mspbe

    A, b, C = noisy.pooled()
    c_std = noisy.pooled_noise_std() * noisy.c_noise_scale
    floor = max(noise_norm_bound(noisy.n, c_std), 1e-12 * max(1.0, float(np.abs(C).max())))
    Cf = _psd_floor(C, floor)
    m = float(noisy.m)
    th = np.asarray(theta, dtype=np.float64)
    value = float(mspbe(th, A / m, b / m, Cf / m))
    zero = float(mspbe(np.zeros_like(th), A / m, b / m, Cf / m))
    rel = value / zero if zero > 0 else float("inf")
    return value, rel


def clipped_group_sums(blocks, *, n: int, clip: float, key: int, groups: int) -> np.ndarray:
    """(groups, 2n^2+n) sums of jointly clipped statistics vectors ``(traj_index (k,), vectors)``
    of ``blocks``, grouped by :func:`assign_groups`: the reference of the Spark aggregate."""
    out = np.zeros((groups, 2 * n * n + n))
    for idx, vec in blocks:
        out += group_sums(clip_statistics(vec, clip), assign_groups(idx, key, groups), groups)
    return out


# --- The second release: residual second moments for the interval -----------------------------
# After the first release theta is public, so a Gaussian release of ``sum_i r_i r_i^T``
# (residuals of the clipped statistics, clipped again to a public bound) composes adaptively.
# With multipliers ``sigma / sqrt(1 - share)`` and ``sigma / sqrt(share)`` the two compose to
# exactly the Gaussian mechanism at ``sigma`` (zCDP composition of Gaussians adds 1/sigma^2:
# Mironov 2017, Prop. 7; Bun and Steinke 2016, Lemma 2.3).


def split_sigma(sigma: float, moments_share: float) -> tuple[float, float]:
    """(sigma_sums, sigma_moments): the noise multipliers of the two releases whose composition
    is the Gaussian mechanism with multiplier ``sigma`` (``1/sigma^2 = 1/s1^2 + 1/s2^2``);
    ``moments_share`` is the moments' share of ``1/sigma^2`` (zCDP rho). ``moments_share = 0``:
    ``(sigma, inf)`` (no second release)."""
    check_number("split_sigma", "moments_share", moments_share, ge=0.0, lt=1.0)
    if sigma <= 0:
        return float(sigma), 0.0
    if moments_share == 0:
        return float(sigma), math.inf
    return float(sigma / math.sqrt(1.0 - moments_share)), float(sigma / math.sqrt(moments_share))


def ssp_release_event(sigma: float, moments_share: float, relation: str = "add_or_remove_one") -> Any:
    """The dp-accounting event of the statistics release and its moments release under
    ``relation`` (sensitivity = each release's bound, :func:`ssp_dp_event`):
    ``ComposedDpEvent([Gaussian(s1), Gaussian(s2)])`` of :func:`split_sigma`, or the one
    Gaussian event without moments."""
    import dp_accounting

    s1, s2 = split_sigma(sigma, moments_share)
    if not math.isfinite(s2):
        return ssp_dp_event(s1, relation)
    return dp_accounting.ComposedDpEvent([ssp_dp_event(s1, relation), ssp_dp_event(s2, relation)])


def residuals(vectors: np.ndarray, theta: np.ndarray, n: int) -> np.ndarray:
    """(k, n) LSTD residuals ``r_i = b_i - A_i theta`` of statistics rows (k, 2n^2+n)."""
    A, b, _ = split_vector(vectors, n)
    return b - np.einsum("kij,j->ki", A, np.asarray(theta, dtype=np.float64))


def residual_bound(theta: np.ndarray, clip: float) -> float:
    """A bound on ``||b_i - A_i theta||`` valid for every row clipped to ``clip``:
    ``clip * sqrt(1 + ||theta||^2)`` (Cauchy-Schwarz on ``[A_i, b_i] [-theta; 1]``)."""
    th = np.asarray(theta, dtype=np.float64)
    return float(clip * math.sqrt(1.0 + float(th @ th)))


def moment_vectors(r: np.ndarray) -> np.ndarray:
    """(k, n(n+1)/2) upper triangles of ``r_i r_i^T`` with off-diagonal entries scaled by sqrt 2,
    so that each row's L2 norm is ``||r_i r_i^T||_F = ||r_i||^2``."""
    r = np.asarray(r, dtype=np.float64)
    n = r.shape[1]
    iu = np.triu_indices(n)
    w = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    return (r[:, iu[0]] * r[:, iu[1]]) * w


def moments_matrix(vec: np.ndarray, n: int) -> np.ndarray:
    """Inverse of :func:`moment_vectors` on a sum: the symmetric (n, n) matrix."""
    iu = np.triu_indices(n)
    w = np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    M = np.zeros((n, n))
    M[iu] = np.asarray(vec, dtype=np.float64) / w
    return M + np.triu(M, 1).T


def clipped_moment_sum(vectors: np.ndarray, theta: np.ndarray, *, n: int, clip: float,
                       bound: float, counts: np.ndarray | None = None) -> np.ndarray:
    """(n(n+1)/2,) sum of :func:`moment_vectors` of the residuals of the rows clipped to ``clip``,
    each residual clipped to ``bound`` (each row adds at most ``bound^2`` in L2). ``counts`` (k,):
    how often each row occurs (a multiset of rows); None: once."""
    from gpope.core.mechanisms.clipping import clip_rows

    m = moment_vectors(clip_rows(residuals(clip_statistics(vectors, clip), theta, n), float(bound)))
    return m.sum(axis=0) if counts is None else np.asarray(counts, dtype=np.float64) @ m


@dataclass(frozen=True)
class NoisyMoments:
    """The released noisy ``sum_i r_i r_i^T`` (residuals at ``theta``, clipped to ``bound``)."""

    matrix: np.ndarray
    theta: np.ndarray
    sigma: float
    bound: float

    @property
    def noise_std(self) -> float:
        """Noise std of each diagonal entry (off-diagonals: this / sqrt 2)."""
        return float(self.sigma * self.bound ** 2)

    def covariance(self) -> np.ndarray:
        """The noisy symmetric matrix with its eigenvalues floored at 0 (post-processing; the PSD
        projection is never further from the true matrix in Frobenius norm)."""
        return _psd_floor(self.matrix, 0.0)


def release_moments(moment_sum: np.ndarray, *, n: int, theta: np.ndarray, sigma: float,
                    bound: float, rng: np.random.Generator) -> NoisyMoments:
    """The moments release: ``moment_sum`` (from :func:`clipped_moment_sum`) plus iid
    ``N(0, (sigma * bound^2)^2)`` per entry: ``GaussianDpEvent(sigma)`` under add/remove."""
    check_number("release_moments", "sigma", sigma, ge=0.0)
    check_number("release_moments", "bound", bound, gt=0.0)
    v = np.asarray(moment_sum, dtype=np.float64)
    if sigma > 0:
        v = v + (sigma * bound ** 2) * rng.standard_normal(v.shape)
    return NoisyMoments(matrix=moments_matrix(v, n), theta=np.asarray(theta, dtype=np.float64).copy(),
                        sigma=float(sigma), bound=float(bound))

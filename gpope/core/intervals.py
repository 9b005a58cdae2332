"""Confidence intervals for released values, from the noisy-statistics releases of :mod:`gpope.core.ssp`.

Method (:func:`bootstrap_interval`): a parametric bootstrap over the mechanism (Ferrando, Wang
and Sheldon 2022, "Parametric Bootstrap for Differentially Private Confidence Intervals",
AISTATS). The released pooled sums ``A~, b~`` stand in for the population; the data's sampling
variability enters through the privately released second moments of the LSTD residuals
``r_i = b_i - A_i theta^`` (the sandwich "meat" of ``E[b - A theta] = 0``, Huber 1967 / White
1980), the privacy noise exactly as the mechanism draws it; the pivotal bootstrap interval of
the replayed estimator is reported. Both releases are covered by the accountant
(:func:`gpope.core.ssp.ssp_release_event`); everything here is post-processing.

Features the release hardly sees (noisy ``C_jj`` within the support threshold of
:func:`gpope.core.ssp.supported_features`) are left out of the solve; every quantity that depends
on one gets an unbounded interval (:func:`depends_on`).

Weak identification (:func:`separated_from_singular`, on by default): where the noisy ``A~`` is
not separated from singularity at the mechanism's known noise scale, the release cannot exclude
a singular population ``A``, and no always-bounded interval is valid there (Dufour 1997,
Econometrica 65(6); Gleser and Hwang 1987, Annals of Statistics 15(4)); every quantity that
depends on the solve then gets the unbounded interval (:attr:`Interval.unidentified`).

For an estimate that is not the SSP solution itself (GPOPE's theta), :func:`anchored_interval`
extends the SSP interval to include it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np

from gpope.core.ssp import (
    NOISE_BOUND_FAILURE,
    NoisyMoments,
    NoisyStatistics,
    solve_ssp,
    supported_features,
)
from gpope.core.validation import check_int, check_number
from gpope.errors import ConfigError

__all__ = ["BOOTSTRAP_DRAWS", "Interval", "anchored_interval", "bootstrap_interval",
           "check_interval_groups", "depends_on", "group_interval", "interval_groups",
           "separated_from_singular", "separation", "split_interval", "ssp_values",
           "strong_candidates", "supported_separation", "weak_bias"]

#: Bootstrap replications per interval (the quantiles of a 95% interval from 400 draws are
#: within about +-0.01 in coverage).
BOOTSTRAP_DRAWS = 400


@dataclass(frozen=True)
class Interval:
    """Intervals for a vector of released quantities (every array (k,)): the released ``value``, the
    two-sided interval ``lower``, ``upper`` and the one-sided ``lower_bound`` at ``level``, the
    estimated ``se`` (privacy noise + sampling), ``df`` of the t reference distribution.
    ``unidentified``: the identification test applied and did not reject a singular summed A
    (:func:`separated_from_singular`), so every quantity of the solve is unbounded. ``separation``:
    :func:`separation` of the release's supported block (the test rejects iff > 1), or None (no SSP
    release). Post-processing of the release."""

    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    lower_bound: np.ndarray
    se: np.ndarray
    level: float
    df: int
    unidentified: bool = False
    separation: float | None = None

    def to_dict(self) -> dict[str, object]:
        """Plain lists (for JSON and MLflow artifacts)."""
        return {
            "value": [float(v) for v in self.value],
            "lower": [float(v) for v in self.lower],
            "upper": [float(v) for v in self.upper],
            "lower_bound": [float(v) for v in self.lower_bound],
            "se": [float(v) for v in self.se],
            "level": float(self.level),
            "df": int(self.df),
            "unidentified": bool(self.unidentified),
            "separation": None if self.separation is None else float(self.separation),
        }


def ssp_values(
    noisy: NoisyStatistics, transform: Callable[[np.ndarray], np.ndarray], *,
    failure: float = NOISE_BOUND_FAILURE, regularize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(theta, transform(theta)) of the AdaSSP solve on the pooled noisy sums."""
    A, b, C = noisy.pooled()
    theta, _ = solve_ssp(A, b, C=C, noise_std=noisy.pooled_noise_std(), failure=failure,
                         regularize=regularize)
    return theta, np.asarray(transform(theta), dtype=np.float64)


#: The identification test covers sampling variability of the summed A up to this multiple of
#: the privacy noise std per entry (the design's stated coverage target; see
#: :func:`separated_from_singular`).
SAMPLING_SD_RATIO = 2.0


def separation(A: np.ndarray, noise_std: float, *, level: float = 0.95,
               sampling_ratio: float = SAMPLING_SD_RATIO) -> float:
    """``s_min(A~) / (noise_std sqrt((1 + r^2) chi2_k^-1(level)))`` of the noisy square matrix
    ``A~`` (k, k), ``r = sampling_ratio``: :func:`separated_from_singular` rejects iff it is > 1
    (``inf`` for k = 0 or a non-singular ``A~`` without noise, 0 for a singular one).
    Post-processing (``noise_std`` and ``r`` are public)."""
    from scipy.stats import chi2

    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ConfigError(f"separated_from_singular needs a square matrix; got shape {A.shape} instead.")
    noise_std = check_number("separated_from_singular", "noise_std", noise_std, ge=0.0)
    level = check_number("separated_from_singular", "level", level, gt=0.0, lt=1.0)
    ratio = check_number("separated_from_singular", "sampling_ratio", sampling_ratio, ge=0.0)
    k = A.shape[0]
    if k == 0:
        return float("inf")
    s_min = float(np.linalg.svd(A, compute_uv=False)[-1])
    if noise_std == 0:
        return float("inf") if s_min > 0.0 else 0.0
    return s_min / (noise_std * float(np.sqrt((1.0 + ratio**2) * chi2.ppf(level, k))))


def supported_separation(A: np.ndarray, C: np.ndarray, noise_std: float, *,
                         level: float = 0.95,
                         c_noise_scale: float = 1.0) -> tuple[np.ndarray, float]:
    """(supported features, :func:`separation` of their block of ``A~``) of a release's pooled
    noisy sums ``A~``, ``C~``: the one definition :func:`bootstrap_interval` and the guard's private
    diagnostic share; ``C~``'s noise std is ``c_noise_scale * noise_std``. Post-processing."""
    keep = supported_features(C, noise_std=noise_std * c_noise_scale)
    return keep, separation(np.asarray(A)[np.ix_(keep, keep)], noise_std, level=level)


def separated_from_singular(A: np.ndarray, noise_std: float, *, level: float = 0.95,
                            sampling_ratio: float = SAMPLING_SD_RATIO) -> bool:
    """Whether the noisy square matrix ``A~ = A_data + E`` (``E`` iid ``N(0, noise_std^2)``, the
    SSP release's noise, known exactly) rejects "the population ``A`` is singular" at level
    ``1 - level``: ``s_min(A~)^2 > noise_std^2 (1 + r^2) chi2_k^-1(level)``, ``r = sampling_ratio``.

    Why: ``A_data = A + D`` with ``D`` the sampling deviation. If ``A v = 0`` for a unit ``v``, then
    ``s_min(A~) <= ||(D + E) v||``; with ``D`` of independent entries of sd up to ``r noise_std``
    (approximately normal: a sum over patients), ``(D + E) v`` is ``N(0, s^2 I_k)`` with
    ``s^2 <= noise_std^2 (1 + r^2)``, so ``P(reject) <= 1 - level`` for every singular ``A``
    (``tests/core/test_intervals_identification.py``). A deviation concentrated in one direction,
    or larger than ``r`` times the noise, is not covered; with ``r = 0`` the test is exact for the
    data set's own summed A. When it does not reject, every quantity of the solve is reported
    unbounded, so for a singular ``A`` the interval covers with probability at least ``level``
    (Dufour 1997). Post-processing."""
    return separation(A, noise_std, level=level, sampling_ratio=sampling_ratio) > 1.0


def bootstrap_interval(
    noisy: NoisyStatistics, moments: NoisyMoments | None,
    transform: Callable[[np.ndarray], np.ndarray], *, rng: np.random.Generator,
    level: float = 0.95, draws: int = BOOTSTRAP_DRAWS, regularize: bool = True,
    identification: bool = True, value_bounds: tuple[float, float] | None = None,
) -> tuple[np.ndarray, Interval]:
    """SSP estimate and its parametric-bootstrap interval: (theta, Interval of transform(theta)).

    The bootstrap world takes the release as the population (``A* = A~``, ``b* = A~ theta^``);
    each of ``draws`` replays adds the sampling variability ``z ~ N(0, Sigma_r)`` to ``b``
    (``Sigma_r`` = :meth:`NoisyMoments.covariance`; ``moments=None``: none) and the privacy noise
    exactly as the mechanism draws it (on every entry of A and b, and on ``C``'s diagonal, so the
    support is redrawn too), then the same solver. The interval is the basic (pivotal) bootstrap
    ``[2 g^ - q_hi, 2 g^ - q_lo]`` of ``g* = transform(theta*)``, which also corrects the solver's
    bias to first order; the one-sided bound is ``2 g^ - q_level``; ``se`` is the sd of ``g*``.

    ``identification``: where the supported block of ``A~`` is not
    :func:`separated_from_singular`, every quantity that depends on a supported feature is
    unbounded (``Interval.unidentified``). With ``value_bounds`` (tabular features: every coordinate
    of theta is a state's value in that public range) this is judged per quantity: the least-visited
    features are set aside until the rest ``S`` passes (:func:`strong_candidates`), theta is solved
    on ``S`` with the others at the range's midpoint, and the ends of a quantity that depends on
    ``S`` only move out by :func:`weak_bias`; the others stay unbounded.

    Guarantee: post-processing of the releases only (``rng`` draws public bootstrap noise);
    ``lower <= upper`` and ``lower_bound >= lower``; deterministic for a given ``rng``."""
    level = check_number("bootstrap_interval", "level", level, gt=0.0, lt=1.0)
    draws = check_int("bootstrap_interval", "draws", draws, ge=20)
    A, b, C = noisy.pooled()
    std = noisy.pooled_noise_std()
    theta, _ = solve_ssp(A, b, C=C, noise_std=std, regularize=regularize)
    value = np.asarray(transform(theta), dtype=np.float64)
    n = noisy.n
    keep, sep = supported_separation(A, C, std, level=level)
    unbounded = depends_on(transform, theta, ~keep)
    unidentified = bool(identification and not sep > 1.0)
    split = _strong_split(A, C, keep, std, level, value_bounds) if unidentified else None
    bias = np.zeros(value.shape[0])
    cov = moments.covariance() if moments is not None else None
    if split is not None:  # per quantity: the features of S carry the release
        strong, centre, half = split
        S, W = np.flatnonzero(strong), np.flatnonzero(keep & ~strong)
        full_transform, base = transform, np.where(keep & ~strong, centre, 0.0)

        def transform(th_s: np.ndarray) -> np.ndarray:
            full = base.copy()
            full[S] = th_s
            return np.asarray(full_transform(full), dtype=np.float64)

        A_SW = A[np.ix_(S, W)]
        A, b, C = A[np.ix_(S, S)], b[S] - A_SW @ base[W], C[np.ix_(S, S)]
        cov = None if cov is None else cov[np.ix_(S, S)]
        n = len(S)
        theta_s, _ = solve_ssp(A, b, C=C, noise_std=std, regularize=regularize)
        theta_strong = base.copy()
        theta_strong[S] = theta_s
        unbounded = depends_on(full_transform, theta_strong, ~strong)
        # the released value stays the whole solve's; the interval is the S solve's (its ends
        # are held around it below, then widened to hold the value)
        centre_value = transform(theta_s)
        G = np.array([transform(e) for e in np.eye(n)]).T - transform(np.zeros(n))[:, None]
        bias = weak_bias(G @ np.linalg.inv(A), A_SW, n_supported=int(keep.sum()),
                         noise_std=std, half=half)
        theta_boot = theta_s
    else:
        theta_boot, centre_value = theta, value
        if unidentified:
            unbounded = unbounded | depends_on(transform, theta, keep)
    b_star = A @ theta_boot
    if cov is not None:
        w, V = np.linalg.eigh(cov)
        root = V * np.sqrt(np.maximum(w, 0.0))
    else:
        root = np.zeros((n, n))
    reps = np.empty((draws, value.shape[0]))
    for k in range(draws):
        Ab = A + std * rng.standard_normal((n, n))
        bb = b_star + std * rng.standard_normal(n) + root @ rng.standard_normal(n)
        Cb = C + np.diag(std * rng.standard_normal(n))
        th, _ = solve_ssp(Ab, bb, C=Cb, noise_std=std, regularize=regularize)
        reps[k] = transform(th)
    alpha = 1.0 - level
    q_lo, q_hi, q_one = (np.quantile(reps, q, axis=0) for q in (alpha / 2, 1 - alpha / 2, level))
    lower, upper = 2 * centre_value - q_hi - bias, 2 * centre_value - q_lo + bias
    lower_bound = np.maximum(2 * centre_value - q_one - bias, lower)
    inf = np.where(unbounded, np.inf, 0.0)
    return theta, Interval(value=value, lower=np.minimum(lower, value) - inf,
                           upper=np.maximum(upper, value) + inf,
                           lower_bound=np.minimum(lower_bound, value) - inf,
                           se=reps.std(axis=0, ddof=1) + inf, level=level, df=draws - 1,
                           unidentified=unidentified, separation=sep)


def _strong_split(A: np.ndarray, C: np.ndarray, keep: np.ndarray, std: float, level: float,
                  value_bounds: tuple[float, float] | None,
                  ) -> tuple[np.ndarray, float, float] | None:
    """(S, centre, half-range) of the per-quantity identification, or None (no finite
    ``value_bounds``, or no block passes)."""
    import math

    if value_bounds is None or not all(math.isfinite(v) for v in value_bounds):
        return None
    lo, hi = (float(v) for v in value_bounds)
    for strong, _ in strong_candidates(A, C, keep, std, level=level):
        return strong, (lo + hi) / 2.0, (hi - lo) / 2.0
    return None


def depends_on(transform: Callable[[np.ndarray], np.ndarray], theta: np.ndarray,
               features: np.ndarray) -> np.ndarray:
    """(k,) bool: which released quantities ``transform(theta)`` change when a coordinate of
    ``theta`` in ``features`` (bool (n,)) changes (exact for the linear maps the pipeline releases).
    The release carries no information on an unsupported theta_j, so no finite interval for a
    quantity that depends on it is valid."""
    theta = np.asarray(theta, dtype=np.float64)
    base = np.asarray(transform(theta), dtype=np.float64)
    out = np.zeros(base.shape[0], dtype=bool)
    for j in np.flatnonzero(features):
        bumped = theta.copy()
        bumped[j] += 1.0
        out |= np.asarray(transform(bumped), dtype=np.float64) != base
    return out


def anchored_interval(centre: np.ndarray, reference: Interval) -> Interval:
    """An interval for another estimate ``centre`` of the same quantities, valid whenever
    ``reference`` is: ``[min(lower, centre), max(upper, centre)]`` (it contains the reference
    interval, so it covers the estimand at least as often); the lower bound likewise."""
    c = np.asarray(centre, dtype=np.float64)
    gap = np.abs(c - reference.value)
    return replace(reference, value=c, lower=np.minimum(reference.lower, c),
                   upper=np.maximum(reference.upper, c),
                   lower_bound=np.minimum(reference.lower_bound, c),
                   se=np.sqrt(reference.se ** 2 + gap ** 2))


def split_interval(iv: Interval, k: int) -> tuple[Interval, Interval]:
    """The first ``k`` quantities of ``iv`` and the rest, as two Intervals."""
    def part(sl: slice) -> Interval:
        return replace(iv, value=iv.value[sl], lower=iv.lower[sl], upper=iv.upper[sl],
                       lower_bound=iv.lower_bound[sl], se=iv.se[sl])

    return part(slice(0, k)), part(slice(k, None))


def check_interval_groups(owner: str, groups: object, *, sampling: str | None = None,
                          tune: str = "none", streamed: bool = False,
                          in_memory_limit_mb: int | None = None) -> int:
    """``groups`` as an int: 0 (no disjoint-groups interval) or K >= 2; ConfigError otherwise.

    With the run's resolved ``sampling``, a K >= 2 is also refused where the interval does not hold:
    its privacy argument (K runs cost one by parallel composition) needs Poisson sampling
    (add/remove-one); it does not combine with ``tune`` "private" (whole-data releases); each
    group's statistics are loaded into driver memory, so not when they are ``streamed``."""
    k = check_int(owner, "interval_groups", groups, ge=0)
    if k == 1:
        raise ConfigError(
            f"The 'interval_groups' parameter of {owner} must be 0 (off) or at least 2 (the "
            "number of disjoint patient groups whose spread gives the interval). Got 1 instead."
        )
    if k == 0 or sampling is None:
        return k
    if sampling != "poisson":
        raise ConfigError(
            f"--interval-groups {k} needs --sampling poisson: its K runs on disjoint patient "
            "groups cost one run only under add/remove-one adjacency (parallel composition); with "
            f"sampling {sampling!r} (replace-one adjacency) a replaced patient may move "
            "between two groups and the K runs would cost two runs. Use --sampling poisson or "
            "--interval-groups 0."
        )
    if tune != "none":
        raise ConfigError(
            f"--interval-groups {k} does not combine with --tune {tune} (the tuning's "
            "releases are made on the whole data set); use one of them."
        )
    if streamed:
        raise ConfigError(
            f"--interval-groups {k} loads each group's statistics into driver memory, but they "
            f"exceed in_memory_limit_mb={in_memory_limit_mb}; raise it (conf "
            "evaluation.in_memory_limit_mb) or run with --interval-groups 0."
        )
    return k


def interval_groups(keys: Iterable[object], groups: int) -> np.ndarray:
    """(m,) int64 group 0..groups-1 of each trajectory, a PUBLIC function of its own key only.

    group = (first 8 bytes of BLAKE2b(str(key)), big-endian) mod ``groups``: adding or removing one
    patient leaves every other patient in its group, which :func:`group_interval` rests on
    (parallel composition). Use a key fixed per patient (``patient_id``), never a rank."""
    groups = check_int("interval_groups", "groups", groups, ge=2)
    out = [int.from_bytes(hashlib.blake2b(str(k).encode("utf-8"), digest_size=8).digest(), "big")
           % groups for k in keys]
    return np.asarray(out, dtype=np.int64)


def group_interval(estimates: np.ndarray, *, level: float = 0.95) -> Interval:
    """Interval from K disjoint-group estimates (K, k) of the same quantities (subsample and
    aggregate): the mean, the Student-t interval ``mean +- t_{K-1, (1+level)/2} sd / sqrt(K)``, the
    one-sided bound ``mean - t_{K-1, level} sd / sqrt(K)``, ``df = K - 1``.

    Why valid: the groups are a public, data-independent partition of iid patients, so the K
    estimates are iid given the population and their spread holds both the sampling variability
    and the privacy noise; the t interval covers their common mean (exactly for Gaussian
    estimates). It covers the estimand when the bias on m/K patients is small against
    sd / sqrt(K) (``benchmarks/gpope_split_probe.py``).

    Privacy (Nissim, Raskhodnikova and Smith 2007, sample-and-aggregate; McSherry 2009, parallel
    composition): under add/remove-one a patient is in exactly one group, and with Poisson sampling
    one run's accountant depends on (q, N, sigma) only, so the K runs cost one run's
    (epsilon, delta). Not under replace-one: a replaced record may move between two groups."""
    from scipy.stats import t as student_t

    est = np.asarray(estimates, dtype=np.float64)
    if est.ndim != 2 or est.shape[0] < 2:
        raise ConfigError(
            f"group_interval needs estimates of shape (K, k) with K >= 2 groups; got shape "
            f"{est.shape} instead.")
    level = check_number("group_interval", "level", level, gt=0.0, lt=1.0)
    K = est.shape[0]
    value = est.mean(axis=0)
    se = est.std(axis=0, ddof=1) / np.sqrt(K)
    half = float(student_t.ppf(0.5 + level / 2, K - 1)) * se
    one = float(student_t.ppf(level, K - 1)) * se
    return Interval(value=value, lower=value - half, upper=value + half, lower_bound=value - one,
                    se=se, level=level, df=K - 1)


def strong_candidates(A: np.ndarray, C: np.ndarray, keep: np.ndarray, noise_std: float, *,
                      level: float) -> Iterator[tuple[np.ndarray, float]]:
    """The blocks ``S`` that pass the separation test, with their separation, in the order tried:
    the supported features less the 1, 2, ... of smallest noisy ``C~_jj`` (never the empty block).
    Post-processing."""
    order = [int(j) for j in np.argsort(np.diag(C)) if keep[j]]
    strong = keep.copy()
    for j in order[:-1]:
        strong[j] = False
        sep = separation(A[np.ix_(strong, strong)], noise_std, level=level)
        if sep > 1.0:
            yield strong.copy(), float(sep)


def weak_bias(U: np.ndarray, A_SW: np.ndarray, *, n_supported: int, noise_std: float,
              half: float) -> np.ndarray:
    """(k,) the bound ``h (sum_j |u . A~_Sj| + e ||u||)`` on what the set-aside states move each
    value; ``U`` (k, |S|) the rows ``u^T = g^T A~_SS^-1``. ``e`` bounds ``sum_j |u . E_Sj| / ||u||``
    with probability ``1 - failure``: the smaller of ``sqrt(|W|) tau`` (``tau`` the noise-norm
    bound of the ``n_supported`` block) and ``|W| z noise_std`` (``z`` the two-sided quantile of a
    union bound over the ``|W|`` columns)."""
    from scipy.stats import norm

    from gpope.core.ssp import NOISE_BOUND_FAILURE, noise_norm_bound

    w = A_SW.shape[1]
    tau = noise_norm_bound(n_supported, noise_std)
    z = float(norm.ppf(1.0 - NOISE_BOUND_FAILURE / (2.0 * max(w, 1))))
    e = min(math.sqrt(w) * tau, w * z * noise_std)
    return half * (np.abs(U @ A_SW).sum(axis=1) + e * np.linalg.norm(U, axis=1))

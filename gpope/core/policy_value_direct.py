"""J(target) from the value fit: the direct method, with an interval that carries theta's error.

The estimand. With the run's value fit V(s) = phi(s) . theta* (theta* the estimator's
population fixed point: tabular features, the target's exact value function; approximate
features, the projected fixed point) and mu0 = E[phi(s_0)] over the data's first states,

    J_direct(target) = mu0 . theta* = E_{s_0}[V(s_0)].

It is the target's value from the data's first states with records that stop early bootstrapped
by V (as every V line is), not the recorded-horizon value of :mod:`gpope.core.policy_value`; the
two agree when every record ends in a terminal event within the cap. Under approximate features
the interval covers mu0 . theta* (the fixed point), not the true value: the fit's approximation
error is not bounded (as for the V lines).

The release. mu0 is released privately (:func:`release_first_state`): the sums of z_i =
phi(s_0,i) / F clipped to ||z_i|| <= 1 (F the map's public norm bound, so nothing is clipped)
and of the upper triangles of z_i z_i^T (for the sampling variance), one Gaussian mechanism with
L2 sensitivity sqrt 2 and multiplier ``sigma`` (:func:`first_state_event`). A one-hot map
(tabular: phi(s) in {0, 1}^n with one 1, a public property of the map) has z z^T = diag(z), so
only the sums of z are released (sensitivity 1, the same event at ``sigma``: noise std sigma,
not sigma sqrt 2) and the second moment is diag of the mean (post-processing). The estimate is
J^ = mu^ . theta^ (theta^ the run's released theta: any estimator that gives an interval of a
public linear functional g . theta*, e.g. :attr:`gpope.core.untuned.release.UntunedRelease.functionals`;
an LSTDQ route whose theta is over (state, action) features plugs in with g its first-state
feature mean under the target).

The interval (:func:`direct_interval`). J - J^ = [mu^ . theta* - mu^ . theta^] + (mu0 - mu^) .
theta*. The first bracket is the estimator's interval of the functional g = mu^ (public) at a
share of alpha. The second is the first-state mean's noise (Gaussian, std s ||theta*||) and its
sampling error (the mean of V*(s_0) over m patients, variance theta*^T Cov(phi(s_0)) theta*);
both are evaluated at theta^ (plug-in, a second-order approximation like the estimator's delta
method). The first states' mass on features the estimator leaves unsupported is charged at a
public bound of their value, and its noise joins the mean's noise in one Gaussian
(:func:`direct_parts`); a union bound over the functional, the sampling and the noise. Where the
estimator states its functional interval as value -+ (z se + extra) (the tuning-free default's
delta method: a normal first-order part and a bounded second-order part), its first-order part
joins that Gaussian too and only ``extra`` stays a width: the noises are independent of the data
and of each other, so the sum is normal at the same (first-order) approximation as the
estimator's own interval.

The contrast (:func:`pick_policy_values`). J(target) - J(behaviour) is one joint interval, not
the difference of two: the direct part's ends without its noise, minus J(behaviour)'s ends
whose noise quantile holds both releases' independent Gaussian noise at once
(:func:`gpope.core.policy_value_release.behaviour_end`), so the two noises add in quadrature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpope.core.features import TabularFeatures
from gpope.core.mechanisms.count import dividing_count
from gpope.core.validation import check_number

__all__ = [
    "DIRECT_ALPHA",
    "ESTIMANDS",
    "DirectInterval",
    "DirectParts",
    "FirstStateRelease",
    "direct_interval",
    "direct_levels",
    "direct_parts",
    "first_state_event",
    "first_state_features",
    "functional_level",
    "one_hot_map",
    "pick_policy_values",
    "public_range_rows",
    "release_first_state",
    "split_first_state",
    "value_estimand",
]

#: L2 sensitivity of one patient's (z, z z^T upper triangle) with ||z|| <= 1.
_SENSITIVITY = math.sqrt(2.0)


@dataclass(frozen=True, eq=False)
class FirstStateRelease:
    """The released first-state feature moments (public).

    Attributes:
        mean: (n,) noisy mean of phi(s_0).
        second: (n, n) noisy mean of phi(s_0) phi(s_0)^T.
        noise_mean: std of each coordinate of ``mean``'s noise.
        noise_second: std of a diagonal entry of ``second``'s noise (off-diagonal / sqrt 2).
        m: what the means divide by: the released count m~, or the patients where that is
            public; norm_bound: F.
        margin: t with |m~ - m| <= t at the probability the caller set aside; 0 where m is
            exact (:attr:`gpope.core.policy_value_release.PolicyValueRelease.margin`).
    """

    mean: np.ndarray
    second: np.ndarray
    noise_mean: float
    noise_second: float
    m: int
    norm_bound: float
    margin: int = 0

    @property
    def m_low(self) -> int:
        """The fewest patients the released count allows (``m - margin``, at least 2)."""
        return max(self.m - self.margin, 2)


@dataclass(frozen=True)
class DirectInterval:
    """J(target) by the direct method: value, two-sided interval at ``level``, one-sided lower
    bound (all possibly infinite when the estimator's functional interval is)."""

    value: float
    lower: float
    upper: float
    lower_bound: float
    level: float


def first_state_features(transitions, feature_map) -> np.ndarray:
    """(m, n) phi(s_0) of each trajectory of a sorted batch (its row with the smallest t)."""
    idx = np.asarray(transitions.traj_index, dtype=np.int64)
    first = np.concatenate([[0], np.flatnonzero(np.diff(idx)) + 1])
    return np.asarray(feature_map(np.asarray(transitions.state)[first]), dtype=np.float64)


def split_first_state(sigma: float, share: float) -> tuple[float, float]:
    """(rest, first-state) multipliers when the first-state release takes ``share`` of a
    Gaussian mechanism's privacy loss 1 / sigma^2 (zCDP split: together exactly ``sigma``)."""
    check_number("split_first_state", "share", share, gt=0.0, lt=1.0)
    return float(sigma / math.sqrt(1.0 - share)), float(sigma / math.sqrt(share))


def first_state_event(sigma: float):
    """The dp-accounting event of :func:`release_first_state` at ``sigma`` (one Gaussian
    mechanism; its noise std is sigma times the sensitivity sqrt 2)."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(float(check_number("first_state_event", "sigma", sigma,
                                                            gt=0.0)))


def one_hot_map(feature_map: object) -> bool:
    """Whether every phi(s) of ``feature_map`` is one-hot (public: the map's type): a tabular map,
    or a state-action map whose value map ``base`` is tabular."""
    return isinstance(getattr(feature_map, "base", feature_map), TabularFeatures)


def release_first_state(phi0: np.ndarray, *, norm_bound: float, sigma: float,
                        rng: np.random.Generator, one_hot: bool = False,
                        count: int | None = None, count_margin: int = 0) -> FirstStateRelease:
    """Release mu0's estimate and the second moment (module docstring); ``sigma = 0``: exact
    (diagnostics only). ``one_hot`` (public, :func:`one_hot_map`): only the mean is released and
    the second moment is its diagonal. ``count``: the released m~ the means divide by (None: the
    rows of ``phi0``, where m is public), ``count_margin`` its margin t (noise stds and moments
    use m~ - t). Guarantee: with sigma > 0, as private as :func:`first_state_event`."""
    from gpope.core.mechanisms.clipping import clip_rows
    from gpope.core.ssp import moments_matrix

    phi0 = np.asarray(phi0, dtype=np.float64)
    m, n = phi0.shape
    m, low = dividing_count(m, count, count_margin, "first-state release")
    F = float(check_number("release_first_state", "norm_bound", norm_bound, gt=0.0))
    s = float(check_number("release_first_state", "sigma", sigma, ge=0.0))
    z = clip_rows(phi0 / F, 1.0)
    first = z.sum(axis=0)
    std = s * (1.0 if one_hot else _SENSITIVITY)
    if s > 0:
        first = first + std * rng.standard_normal(first.shape)
    if one_hot:  # z z^T = diag(z): the second moment is the mean's diagonal (post-processing)
        return FirstStateRelease(mean=F * first / m, second=F * F * np.diag(first / low),
                                 noise_mean=F * std / low, noise_second=F * F * std / low, m=m,
                                 norm_bound=F, margin=int(count_margin))
    # the sum of moment_vectors(z) (upper triangles, off-diagonals x sqrt 2) without the
    # (m, n(n+1)/2) intermediate
    iu = np.triu_indices(n)
    mom = (z.T @ z)[iu] * np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))
    if s > 0:
        mom = mom + std * rng.standard_normal(mom.shape)
    return FirstStateRelease(mean=F * first / m, second=F * F * moments_matrix(mom / low, n),
                             noise_mean=F * std / low, noise_second=F * F * std / low, m=m,
                             norm_bound=F, margin=int(count_margin))


def functional_level(level: float, first_state_alpha: float) -> float:
    """The two-sided level at which the estimator's interval of g . theta* enters
    :func:`direct_interval` at ``level``: each end fails with (1 - first_state_alpha) of the
    end's alpha."""
    alpha = 1.0 - check_number("functional_level", "level", level, gt=0.0, lt=1.0)
    check_number("functional_level", "first_state_alpha", first_state_alpha, gt=0.0, lt=1.0)
    return 1.0 - alpha * (1.0 - first_state_alpha)


def direct_interval(theta: np.ndarray, first: FirstStateRelease,
                    functional: tuple[float, float], *, level: float,
                    first_state_alpha: float = 0.2,
                    value_range: tuple[float, float] = (-math.inf, math.inf),
                    supported: np.ndarray | None = None,
                    unsupported_bound: float | None = None,
                    functional_se: float | None = None) -> DirectInterval:
    """J(target) = mu^ . theta^ with its interval (module docstring): :func:`direct_parts` with
    its Gaussian noise at its normal quantile, intersected with ``value_range``.

    Args:
        theta: (n,) the run's released theta.
        first: the released first-state moments.
        functional: the estimator's two-sided interval (lower, upper) of mu^ . theta* at
            :func:`functional_level` (post-processing of its release; infinite ends allowed).
        level: the two-sided level. The one-sided ``lower_bound`` is the two-sided lower end
            (valid at ``level``, conservative).
        first_state_alpha, supported, unsupported_bound, functional_se: as :func:`direct_parts`.
        value_range: public range of J (values and ends are intersected with it).
    """
    from scipy.stats import norm

    p = direct_parts(theta, first, functional, level=level, first_state_alpha=first_state_alpha,
                     supported=supported, unsupported_bound=unsupported_bound,
                     functional_se=functional_se)
    q = float(norm.ppf(1.0 - p.noise_alpha)) * p.noise_sd
    lower, upper = min(p.lower - q, p.upper + q), max(p.lower - q, p.upper + q)
    lo_r, hi_r = value_range
    clip = lambda x: float(min(max(x, lo_r), hi_r))  # noqa: E731
    return DirectInterval(value=clip(p.value), lower=clip(lower), upper=clip(upper),
                          lower_bound=clip(lower), level=float(level))


@dataclass(frozen=True)
class DirectParts:
    """The direct J(target)'s interval before its privacy noise: J lies in [lower - N, upper + N]
    but for the failures the caller sets aside, where N is one Gaussian of std ``noise_sd`` and
    each end fails with probability ``noise_alpha`` at N's normal quantile. A caller may fold
    another independent Gaussian error into N (the joint contrast of
    :func:`pick_policy_values`)."""

    value: float
    lower: float
    upper: float
    noise_sd: float
    noise_alpha: float


def direct_parts(theta: np.ndarray, first: FirstStateRelease, functional: tuple[float, float],
                 *, level: float, first_state_alpha: float = 0.2,
                 supported: np.ndarray | None = None, unsupported_bound: float | None = None,
                 functional_se: float | None = None) -> DirectParts:
    """The parts of :func:`direct_interval` (module docstring). Each end's alpha at ``level``
    goes (1 - first_state_alpha) to the functional interval (the caller's :func:`functional_level`),
    and first_state_alpha / 2 each to the first states' sampling (half of it bounding the noisy
    variance) and to the first-state release's noise.

    The noise is one Gaussian: mu^ - mean phi(s_0) is the release's noise N_1 (std ``noise_mean``
    a coordinate, independent across coordinates), which moves mu^ . theta* by N_1 . theta* on
    the supported features (std noise_mean ||theta||, plug-in theta^) and, on the unsupported
    ones (``supported`` False; theta^ is 0 there), leaves the first states' mass M = sum_off
    mu^_j - sum_off N_1j whose part of J lies in [-B M, B M] for a public bound B >= |theta*_j|
    of features that are non-negative (tabular one-hot: ``unsupported_bound`` the largest |value|).
    So the ends move by -+ B sum_off mu^_j (the mass's released mean, an exact identity) and the
    noise std is noise_mean sqrt(||theta||^2 + k_off B^2). None for B: an unsupported feature makes
    the interval unbounded.

    ``functional_se``: the standard error of the estimator's first-order (delta method, normal)
    part of ``functional``, whose ends are then its value -+ (z se + extra) at
    :func:`functional_level` (:attr:`gpope.core.untuned.release.UntunedRelease.functionals`):
    that part joins the Gaussian (std hypot) with its alpha, and only ``extra`` stays a width."""
    from scipy.stats import norm

    theta = np.asarray(theta, dtype=np.float64)
    alpha = (1.0 - check_number("direct_parts", "level", level, gt=0.0, lt=1.0)) / 2.0
    a_first = alpha * first_state_alpha / 2.0
    a_noise, f_sd, reach = a_first, 0.0, max(abs(float(functional[0])), abs(float(functional[1])))
    if functional_se is not None and all(math.isfinite(x) for x in functional):
        f_sd, centre = float(functional_se), (functional[0] + functional[1]) / 2.0
        f_z = float(norm.ppf(0.5 + functional_level(1.0 - 2.0 * alpha, first_state_alpha) / 2.0))
        extra = max((functional[1] - functional[0]) / 2.0 - f_z * f_sd, 0.0)
        functional, a_noise = (centre - extra, centre + extra), a_first + alpha * (
            1.0 - first_state_alpha)
    value = float(first.mean @ theta)  # theta is 0 on features the estimator drops
    var = float(theta @ first.second @ theta) - value * value
    # the noisy second moment can understate the variance: its noise's upper quantile
    q = float(norm.ppf(1.0 - a_first / 2.0))
    var = max(var + q * first.noise_second * float(theta @ theta), 0.0)
    width = q * math.sqrt(var / first.m_low)
    if first.margin:
        # mu^ = S~ / m~ and the m patients' (S~ - N) / m: beside the noise N, the count moves
        # mu^ . theta* by |mu^ . theta*| |m - m~| / m <= t / (m~ - t) times the largest end of
        # the estimator's interval of mu^ . theta* (infinite ends leave the interval unbounded)
        width += reach * first.margin / first.m_low
    off = np.zeros(len(theta), dtype=bool) if supported is None else ~np.asarray(supported)
    noise_var = float(theta @ theta)
    if off.any():
        if unsupported_bound is None:
            width = math.inf
        else:
            width += unsupported_bound * float(first.mean[off].sum())
            noise_var += int(off.sum()) * unsupported_bound ** 2
    return DirectParts(value=value, lower=functional[0] - width, upper=functional[1] + width,
                       noise_sd=math.hypot(first.noise_mean * math.sqrt(noise_var), f_sd),
                       noise_alpha=a_noise)


#: What each released row estimates (the ``estimand`` column of ``gold/released_values``): the
#: V rows (:func:`value_estimand`) and the policy value rows (:func:`pick_policy_values`).
ESTIMANDS = {
    "tabular_fixed_point": "tabular fixed point: the target's value V(state) (records that stop "
                           "early bootstrapped by V)",
    "feature_fixed_point": "LSTD fixed point of the spec's features, phi(state) . theta* (the "
                           "interval does not cover the feature map's approximation error)",
    "direct": "E over first states of the value fit's fixed point V(s0) (records that stop "
              "early bootstrapped by V; under approximate features the fit's approximation "
              "error is not covered)",
    "identified_set": "expected discounted return over the recorded horizon (identified set "
                      "of the clipped importance weights)",
    "behaviour": "mean recorded discounted return (current practice)",
    "direct_contrast": "direct J(target) minus the mean recorded return",
    "identified_set_contrast": "recorded-horizon J(target) minus the mean recorded return",
    "public_range": "J(target): no importance weight without logged propensities and the "
                    "direct method unidentified; the spec's public value range",
    "public_range_contrast": "J(target) minus the mean recorded return: the public range",
}

def value_estimand(feature_map: object) -> str:
    """What a released V(state) estimates: the value itself under a tabular map (the fixed point
    is exact), the LSTD fixed point of the features under any other map. A state-action map
    (:class:`gpope.core.state_action.StateActionFeatures`) is judged by its value map ``base``."""
    tabular = isinstance(getattr(feature_map, "base", feature_map), TabularFeatures)
    return ESTIMANDS["tabular_fixed_point" if tabular else "feature_fixed_point"]


#: Parts of alpha given to the direct method (the rest: the identified-set fallback).
DIRECT_ALPHA = 0.8


def direct_levels(level: float, first_state_alpha: float) -> np.ndarray:
    """The two levels at which a run asks its estimator for the interval of mu^ . theta*: for
    J(target) (held at 1 - DIRECT_ALPHA alpha) and for the contrast (J(target) and J(behaviour)
    each at 1 - DIRECT_ALPHA alpha / 2), :func:`functional_level` of each."""
    alpha = 1.0 - level
    return np.array([functional_level(1.0 - DIRECT_ALPHA * alpha, first_state_alpha),
                     functional_level(1.0 - DIRECT_ALPHA * alpha / 2.0, first_state_alpha)])


def pick_policy_values(is_release, settings, *, level: float, theta: np.ndarray,
                       first: FirstStateRelease, functional_ends: np.ndarray,
                       supported: np.ndarray | None, unsupported_bound: float | None,
                       ratios_logged: bool = True,
                       functional_se: np.ndarray | None = None) -> dict[str, object]:
    """The three released rows when the run also has the direct method (post-processing).

    The public rule: J(target) is the direct method held at 1 - 0.8 alpha where its interval is
    finite, else the identified set held at 1 - 0.2 alpha; the contrast is the direct J(target)
    minus J(behaviour) held jointly at 1 - 0.8 alpha (module docstring: each end's share goes
    half to the direct part, half with its noise to J(behaviour)) where finite, else the
    identified set's contrast at 1 - 0.2 alpha. Whatever the data, a picked interval misses its estimand with probability at
    most alpha (a union bound over the candidates); each row names its estimand (:data:`ESTIMANDS`).

    Without logged propensities (``ratios_logged`` False: the schema, public) ``is_release`` was
    computed with every ratio 1, so its J(behaviour) (the mean recorded return) is valid and its
    J(target) is not: the fallback of J(target) and of the contrast is then the public range
    (:func:`public_range_rows`), never the identified set.

    Args:
        is_release: the run's :class:`~gpope.core.policy_value_release.PolicyValueRelease`.
        settings: its :class:`~gpope.core.policy_value_settings.PolicyValueSettings`.
        functional_ends: (2, 2) the estimator's (lower, upper) of mu^ . theta* at
            :func:`direct_levels` (rows: J(target), contrast).
        functional_se: (2,) their first-order standard errors where the estimator gives them
            (:func:`direct_parts`); None: the functional intervals enter whole.
    Returns:
        ``{name: PolicyValueInterval}`` with ``estimand`` set.
    """
    import dataclasses

    from gpope.core.policy_value_release import behaviour_end, public_ranges

    alpha = 1.0 - level
    ranges = public_ranges(is_release.bounds)
    common = {"first_state_alpha": settings.first_state_alpha, "supported": supported,
              "unsupported_bound": unsupported_bound, "value_range": ranges["policy_value"]}
    se = [None, None] if functional_se is None else [float(x) for x in functional_se]
    dm = direct_interval(theta, first, tuple(functional_ends[0]),
                         level=1.0 - DIRECT_ALPHA * alpha, functional_se=se[0], **common)
    dm_c = direct_parts(theta, first, tuple(functional_ends[1]),
                        level=1.0 - DIRECT_ALPHA * alpha / 2.0, functional_se=se[1],
                        **{k: v for k, v in common.items() if k != "value_range"})
    fallback = is_release.intervals_with(1.0 - (1.0 - DIRECT_ALPHA) * alpha, settings)
    if not ratios_logged:
        fallback = public_range_rows(fallback, ranges, level)
    b = is_release.intervals_with(level, settings)["behaviour_value"]
    finite = math.isfinite(dm.lower) and math.isfinite(dm.upper) and all(
        math.isfinite(x) for x in functional_ends[0])
    out = {"behaviour_value": dataclasses.replace(b, estimand=ESTIMANDS["behaviour"])}
    if finite:
        out["policy_value"] = dataclasses.replace(
            fallback["policy_value"], value=dm.value, lower=dm.lower, upper=dm.upper,
            lower_bound=dm.lower_bound, level=float(level), observed_weight=None,
            estimand=ESTIMANDS["direct"])
    else:
        out["policy_value"] = dataclasses.replace(
            fallback["policy_value"], level=float(level),
            estimand=fallback["policy_value"].estimand or ESTIMANDS["identified_set"])
    c_finite = finite and all(math.isfinite(x) for x in functional_ends[1]) and math.isfinite(
        dm_c.lower) and math.isfinite(dm_c.upper)
    if c_finite:
        # the joint contrast: each end's alpha DIRECT_ALPHA alpha / 2 goes half to the direct
        # part (its functional and sampling) and half, with the direct part's noise alpha, to
        # J(behaviour)'s end, whose noise quantile holds both releases' Gaussian noise at once
        a_b = DIRECT_ALPHA * alpha / 4.0 + dm_c.noise_alpha
        ends = {side: behaviour_end(is_release, settings, alpha=a_b, side=side,
                                    extra_sd=dm_c.noise_sd) for side in ("lower", "upper")}
        lo_c, hi_c = ranges["policy_contrast"]
        clip = lambda x: float(min(max(x, lo_c), hi_c))  # noqa: E731
        lower, upper = dm_c.lower - ends["upper"], dm_c.upper - ends["lower"]
        lower, upper = clip(min(lower, upper)), clip(max(lower, upper))
        out["policy_contrast"] = dataclasses.replace(
            fallback["policy_contrast"], value=clip(dm.value - b.value), lower=lower,
            upper=upper, lower_bound=lower, level=float(level),
            estimand=ESTIMANDS["direct_contrast"])
    else:
        out["policy_contrast"] = dataclasses.replace(
            fallback["policy_contrast"], level=float(level),
            estimand=fallback["policy_contrast"].estimand or ESTIMANDS["identified_set_contrast"])
    return out


def public_range_rows(rows: dict[str, object], ranges: dict[str, tuple[float, float]],
                      level: float) -> dict[str, object]:
    """``rows`` with J(target) and the contrast replaced by their public ranges (``ranges``:
    :func:`gpope.core.policy_value_release.public_ranges`; value the range's midpoint, the
    interval the range itself: it covers whatever the data) and J(behaviour) kept."""
    import dataclasses

    out = dict(rows)
    for name, key in (("policy_value", "public_range"),
                      ("policy_contrast", "public_range_contrast")):
        lo, hi = (float(x) for x in ranges[name])
        out[name] = dataclasses.replace(rows[name], value=0.5 * (lo + hi), lower=lo, upper=hi,
                                        lower_bound=lo, level=float(level),
                                        observed_weight=None, estimand=ESTIMANDS[key])
    return out

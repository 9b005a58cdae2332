"""One accounted release of J(target), J(behaviour) and their contrast, with intervals.

Mechanism (add/remove-one adjacency; replace-one doubles every sensitivity through the noise
multiplier, :func:`gpope.core.ssp.ssp_sigma`). The run gives this release the share ``share`` of
its budget and calibrates one Gaussian noise multiplier ``sigma`` for it (a GPOPE run: of its
(epsilon, delta); a one-shot run: of the privacy loss of its one Gaussian mechanism,
:mod:`gpope.core.evaluation.plan`). Three Gaussian
sub-releases split ``1 / sigma^2`` (zCDP: Bun and Steinke 2016, Lemma 2.3; Mironov 2017, Prop. 7),
so together they are exactly the Gaussian mechanism at ``sigma`` (:func:`policy_value_event`):

1. ``clip_share``: noisy log-grid histograms of |g|, |a| and (off-policy) n (L2 sensitivity
   sqrt k for k histograms), read top down for each term's clip c_j (:func:`choose_clip`).
2. ``1 - clip_share - moments_share``: the sum of the per-patient vectors
   z_i = (x_i - mid) / half in [-1, 1]^k, x_i = (clip(g_i, g_lo, g_hi), lambda_i a_i, lambda_i n_i) with
   lambda_i = min(1, c_a / |a_i|, c_n / n_i), weighted (:func:`sum_noise_stds`).
3. ``moments_share``: the sum of the upper triangles of z_i z_i^T, the (g, g) entry weighted
   (:func:`moment_weights`).

What the intervals cover. Off-policy, a patient's factor lambda_i scales its importance weights
down (lambda_i min(rho_t, C) <= rho_t), so the identified set of :mod:`gpope.core.policy_value`
holds for every clip: clipping the target's terms widens its interval and never moves J(target)
out of it. The behaviour value (and, on-policy, the target value, which is then the same) is
the mean of the return g itself: the release sums clip(g, g_lo, g_hi) with ends read from the
outside in where the noisy histogram finds no more returns beyond them, and what the clamp moves
(the excess above g_hi, the deficit below g_lo) is bounded from the released histogram and
added to the end it moves (:mod:`gpope.core.policy_value_clamp`). Deficit mass is noisy at the
scale S / m per patient (a single patient can carry all of it), which is why on-policy specs,
where n = S is public, release no n.

Intervals. Each end of each quantity's identified set is the mean of a public linear combination
y_i = c . x_i + k. Its interval accounts for sampling (Maurer and Pontil 2009, Thm. 4:
empirical Bernstein, valid at every m for variables in a known range; the sample variance is
replaced by an upper confidence bound that holds despite the privacy noise) and for the privacy
noise (Gaussian with a public standard deviation), by a union bound over the error sources
(and, for the sampling part, over every clip the public grids allow, since the clips are chosen
from a release of the same patients: :func:`gpope.core.policy_value_clamp.clip_choices`);
``method="normal"`` instead uses sqrt(V / m + noise variance) times the normal quantile (a CLT
interval, measured in docs/RESULTS.md). Two-sided intervals give each end alpha / 2; the one-sided
``lower_bound`` gives the lower end alpha.

Every released number (value, interval ends, lower bound) is then intersected with its public
range (:func:`public_ranges`: J(target) and J(behaviour) in the range of any policy's value that
the spec's reward bounds, gamma and horizon imply, their contrast in that range's difference).
This is post-processing of public bounds (no budget), and coverage can only improve: a true value
lies in the public range, so an interval that covered it still covers it after the intersection.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import norm

from gpope.core.mechanisms.count import dividing_count
from gpope.core.mechanisms.secure_noise import secure_perturb
from gpope.core.policy_value import QUANTITIES, PolicyValueBounds, PolicyValueTerms
from gpope.core.policy_value_clamp import (
    ClampBound,
    clamp_bound,
    clamp_ends,
    clip_choices,
    clip_histograms,
    clips_from_histograms,
    histogram_variance,
    one_signed,
    public_clamp_bound,
    released_components,
    return_choices,
)
from gpope.core.policy_value_settings import METHODS as _METHODS
from gpope.core.policy_value_settings import PolicyValueSettings
from gpope.core.ssp import moment_vectors, moments_matrix
from gpope.core.validation import check_choice, check_number

__all__ = [
    "QUANTITIES",
    "PolicyValueInterval",
    "PolicyValueRelease",
    "PolicyValueSettings",
    "behaviour_end",
    "exact_intervals",
    "moment_weights",
    "policy_value_event",
    "policy_value_sigma",
    "public_ranges",
    "release_policy_value",
]

def policy_value_event(sigma: float, relation: str = "add_or_remove_one"):
    """The dp-accounting event of the whole release: one Gaussian mechanism at ``sigma``
    (the three sub-releases compose exactly to it), under ``relation``."""
    from gpope.core.ssp import ssp_dp_event

    return ssp_dp_event(float(check_number("policy_value_event", "sigma", sigma, gt=0.0)),
                        relation)


def policy_value_sigma(*, m: int, epsilon: float, delta: float, settings: PolicyValueSettings,
                       accountant: str = "auto", relation: str = "add_or_remove_one") -> float:
    """The release's noise multiplier: one Gaussian mechanism meeting ``settings.share`` times
    the run's (epsilon, delta), under ``relation`` (:func:`gpope.core.ssp.ssp_sigma`): its
    calibration in a GPOPE run (basic composition with the rest of the run). A one-shot run
    (ssp, the tuning-free default) calibrates it jointly with its other releases, to less noise
    (:func:`gpope.core.evaluation.plan.gaussian_share`)."""
    from gpope.core.ssp import ssp_sigma

    return float(ssp_sigma(m=m, epsilon=epsilon * settings.share, delta=delta * settings.share,
                           accountant=accountant, relation=relation))


@dataclass(frozen=True)
class PolicyValueInterval:
    """One released scalar: point value, two-sided interval, one-sided lower bound.

    ``observed_weight`` (J(target) off-policy only, else None): the released mean weight mass
    E[n] / S in [0, 1], the share of the target's discounted weight the data's recorded decisions
    carry after clipping (post-processing of the release). The rest, 1 - observed_weight, is what
    the identified set charges at the public reward range: near 0, no valid interval is narrow.
    ``estimand``: what the row estimates, where the run picks between estimators
    (:func:`gpope.core.policy_value_direct.pick_policy_values`); None: the identified set
    (J(target), contrast) and the mean recorded return (J(behaviour)).
    """

    value: float
    lower: float
    upper: float
    lower_bound: float
    level: float
    observed_weight: float | None = None
    estimand: str | None = None


#: The clamp bound of an exact release (clips at the data's own extremes: nothing moved).
_NO_CLAMP = ClampBound()


@dataclass(frozen=True, eq=False)
class PolicyValueRelease:
    """What the mechanism releases (public) and the public constants it was made with.

    Attributes:
        clips: (g_hi, c_a, c_n, g_lo): the returns' clip range [g_lo, g_hi] and the target
            terms' clips (c_a, c_n unused on-policy).
        means: (3,) noisy mean of x = (g, a, n) over the m patients (n = S exactly on-policy).
        second: (3, 3) noisy mean of z z^T, z = (x - mid) / half (0 for a constant component).
        mid, half: (3,) centre and half-range of each component's public range after clipping.
        noise_means: (3,) std of the noise of ``means``.
        noise_second: (6,) noise std of each upper-triangle entry of ``second`` in the scale of
            :func:`gpope.core.ssp.moment_vectors` (an off-diagonal entry of ``second``: / sqrt 2).
        m: what the means divide by: the released count m~, or the number of patients where
            that is public; bounds: the public constants; sigma: the release's multiplier.
        margin: t with |m~ - m| <= t at the probability the rows set aside for it
            (:func:`gpope.core.mechanisms.count.count_margin`); 0 where m is exact. Every width
            uses m - t patients and each row is widened by what the count's error moves.
        clamp: the released bounds' ingredients of what the return clamp [g_lo, g_hi] moves
            (:class:`gpope.core.policy_value_clamp.ClampBound`; zero for an exact release).
        choices: (g, a, n) how many clips the release could have chosen for each component
            (the sampling bound's union, :func:`gpope.core.policy_value_clamp.clip_choices`);
            1 where the clips are public or exact.
    """

    clips: tuple[float, float, float]
    means: np.ndarray
    second: np.ndarray
    mid: np.ndarray
    half: np.ndarray
    noise_means: np.ndarray
    noise_second: np.ndarray
    m: int
    bounds: PolicyValueBounds
    sigma: float
    clamp: ClampBound = _NO_CLAMP
    choices: tuple[int, int, int] = (1, 1, 1)
    margin: int = 0

    @property
    def m_low(self) -> int:
        """The fewest patients the released count allows (``m - margin``, at least 2)."""
        return max(self.m - self.margin, 2)

    def intervals(self, level: float, method: str = "bernstein", *, variance_share: float = 0.25,
                  noise_share: float = 0.25, clamp_share: float = 0.1
                  ) -> dict[str, PolicyValueInterval]:
        """The three released scalars at ``level`` (post-processing)."""
        return _intervals(self, level, method, (variance_share, noise_share, clamp_share))

    def intervals_with(self, level: float, settings: PolicyValueSettings
                       ) -> dict[str, PolicyValueInterval]:
        """:meth:`intervals` with the interval settings of ``settings`` (``method``,
        ``variance_share``, ``noise_share``): what a run releases."""
        return self.intervals(level, settings.method, variance_share=settings.variance_share,
                              noise_share=settings.noise_share, clamp_share=settings.clamp_share)


def _components(terms: PolicyValueTerms, clips: tuple[float, ...],
                bounds: PolicyValueBounds) -> np.ndarray:
    g_hi, c_a, c_n, g_lo = clips
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.minimum.reduce([np.ones(terms.m),
                                 np.where(terms.a != 0, c_a / np.abs(terms.a), 1.0),
                                 np.where(terms.n > 0, c_n / terms.n, 1.0)])
    n = np.full(terms.m, bounds.discount_mass) if bounds.on_policy else lam * terms.n
    a = lam * terms.a
    if terms.v0 is not None and bounds.value_range is not None:  # doubly robust: V(s_0) + correction
        a = a + np.clip(terms.v0, *bounds.value_range)
    return np.stack([np.clip(terms.g, g_lo, g_hi), a, n], axis=1)


def _ranges(clips: tuple[float, ...], bounds: PolicyValueBounds) -> tuple[np.ndarray, np.ndarray]:
    """Public (low, high) of each component of x after clipping."""
    d_lo, d_hi = bounds.target_range
    vlo, vhi = bounds.control_range
    g_hi, c_a, c_n, g_lo = clips
    sg_lo, sg_hi = (-1.0 if d_lo < 0 else 0.0), (1.0 if d_hi > 0 else 0.0)
    s = bounds.discount_mass
    if bounds.on_policy:  # a = g and n = S: only g is released
        return np.array([g_lo, 0.0, s]), np.array([g_hi, 0.0, s])
    return np.array([g_lo, vlo + sg_lo * c_a, 0.0]), np.array([g_hi, vhi + sg_hi * c_a, c_n])


def release_policy_value(terms: PolicyValueTerms, bounds: PolicyValueBounds, *, sigma: float,
                         settings: PolicyValueSettings, rng: np.random.Generator,
                         clips: tuple[float, float, float] | None = None,
                         secure_noise: bool = False, count: int | None = None,
                         count_margin: int = 0) -> PolicyValueRelease:
    """Release the policy-value statistics with noise multiplier ``sigma`` (the three
    sub-releases of the module docstring; ``sigma = 0``: exact, not private).

    Args:
        terms: the per-patient terms (private).
        bounds: public constants.
        sigma: noise std / add-remove sensitivity of the whole release (:func:`policy_value_event`
            accounts it); 0 releases exact statistics (diagnostics and benchmarks only).
        settings: public settings.
        rng: the noise generator.
        clips: public (g_hi, c_a, c_n, g_lo) to use instead of the private choice (spends no
            clip share).
        secure_noise: draw every noise term from the OS-CSPRNG discrete Gaussian on a public
            grid instead of ``rng`` (:func:`secure_perturb`): the run's ``--secure-noise``.
        count, count_margin: the released count m~ the means divide by (None: the number of
            terms, where the exact m is public) and its margin t (:attr:`PolicyValueRelease.margin`).

    Guarantees: returns clamped into ``bounds.g_limits`` first; with ``sigma > 0``, ``clips=None``
    the output is as private as ``policy_value_event(sigma)`` (``secure_noise``: its RDP curve,
    which bounds the discrete Gaussian's); nothing else about ``terms`` leaves this function.
    """
    s = check_number("release_policy_value", "sigma", sigma, ge=0.0)
    terms = replace(terms, g=np.clip(terms.g, *bounds.g_limits)) if bounds.return_bounds else terms
    # the released m~ (where given) is the m of every public number below
    m, low = dividing_count(terms.m, count, count_margin, "policy value release")
    hist_std, s_mean, s_mom = noise_scales(s, settings, bounds)
    given = clips is not None
    noisy = grids = None
    if clips is None and s == 0:
        clips = (float(np.max(terms.g)), float(np.max(np.abs(terms.a))), float(np.max(terms.n)),
                 float(np.min(terms.g)))
    elif clips is None:
        grids, counts = clip_histograms(terms, bounds, settings)
        if secure_noise:
            noisy, hist_std = _secure_histograms(counts, hist_std, bounds)
        else:
            noisy = add_histogram_noise(counts, hist_std, rng)
        clips = clips_from_histograms(noisy, grids, bounds, settings, hist_std=hist_std, m=m)
    clips = (float(clips[0]), *(max(float(c), 1e-300) for c in clips[1:3]), float(clips[3]))
    clamp, choices = _NO_CLAMP, (1, 1, 1)
    if given:
        clamp = public_clamp_bound(bounds, m=m, g_hi=clips[0], g_lo=clips[3])
    elif noisy is not None:
        sign = one_signed(bounds)
        edges = grids[0].edges()
        clips, clamp, g_choices = return_clamp(noisy[0], edges, sign, clips, bounds, settings,
                                               m=low, hist_std=hist_std, s_mean=s_mean,
                                               s_mom=s_mom)
        choices = (g_choices, *clip_choices(len(edges), sign)[1:])
    first, mom, mid, half = exact_sums(terms, bounds, clips)
    active = half > 0
    first_std, mom_std = sum_noise_stds(active, settings, s_mean=s_mean, s_mom=s_mom)
    if s > 0 and secure_noise and active.any():
        first, mom, first_std, mom_std = _secure_sums(first, mom, first_std, mom_std, active,
                                                      settings)
    elif s > 0:
        first, mom = add_sum_noise(first, mom, first_std, mom_std, active, rng=rng)
    means = mid + half * first / m
    return PolicyValueRelease(
        clips=clips, means=means, second=moments_matrix(mom / low, 3), mid=mid, half=half,
        noise_means=half * first_std / low, noise_second=mom_std / low, m=m, bounds=bounds,
        sigma=s, clamp=clamp, choices=choices, margin=int(count_margin))


def return_clamp(noisy_g: np.ndarray, edges: np.ndarray, sign: int, clips: tuple[float, ...],
                 bounds: PolicyValueBounds, settings: PolicyValueSettings, *, m: int,
                 hist_std: float, s_mean: float, s_mom: float):
    """(clips, clamp bound, the return's union factor): the histogram's clamp [g_lo, g_hi] or
    none (the public return range), whichever predicts the narrower J(behaviour) interval at
    ``settings.clamp_rule_level`` (post-processing of the noisy histogram ``noisy_g`` and public
    noise scales; :mod:`gpope.core.policy_value_clamp`, "Clamp or not")."""
    G_lo, G_hi = bounds.g_limits
    public = (G_hi if sign >= 0 else 0.0, G_lo if sign <= 0 else 0.0)
    ends = clamp_ends(len(edges), sign)
    best = None
    for g_hi, g_lo in ((float(clips[0]), float(clips[3])), public):
        clamped = (g_hi, g_lo) != public
        cb = (clamp_bound(noisy_g, edges, sign, g_hi=g_hi, g_lo=g_lo, noise_std=hist_std,
                          ends=ends) if clamped else _NO_CLAMP)
        g_choices = return_choices(clamped, len(edges), sign)
        full = (g_hi, clips[1], clips[2], g_lo)
        width = _predicted_width(noisy_g, edges, sign, full, cb, g_choices, bounds, settings,
                                 m=m, s_mean=s_mean, s_mom=s_mom)
        if best is None or width < best[0]:
            best = (width, full, cb, g_choices)
    return best[1], best[2], best[3]


def _predicted_width(noisy_g: np.ndarray, edges: np.ndarray, sign: int, clips: tuple[float, ...],
                     cb: ClampBound, g_choices: int, bounds: PolicyValueBounds,
                     settings: PolicyValueSettings, *, m: int, s_mean: float,
                     s_mom: float) -> float:
    """J(behaviour)'s predicted width (both ends) under ``clips``, before the means exist: the
    clamp's bounds, and :func:`_bernstein_width` with the variance read from the histogram."""
    alpha = (1.0 - settings.clamp_rule_level) / 2.0
    low, high = _ranges(clips, bounds)
    half = (high - low) / 2.0
    first_std, mom_std = sum_noise_stds(half > 0, settings, s_mean=s_mean, s_mom=s_mom)
    var = histogram_variance(noisy_g, edges, sign, g_hi=clips[0], g_lo=clips[3])
    total = 0.0
    for part in ("excess", "deficit"):
        a_clamp = alpha * settings.clamp_share if getattr(cb, f"{part}_range") > 0 else 0.0
        total += cb.bound(part, m=m, a_noise=a_clamp / 2.0, a_pop=a_clamp / 2.0)
        total += _bernstein_width(var, mom_std[0] / m * half[0] ** 2, float(high[0] - low[0]),
                                  half[0] * first_std[0] / m, m=m, choices=g_choices,
                                  alpha=alpha - a_clamp,
                                  shares=(settings.variance_share, settings.noise_share),
                                  private=True)
    return total


def _secure_histograms(counts: list[np.ndarray], hist_std: float,
                       bounds: PolicyValueBounds) -> tuple[list[np.ndarray], float]:
    """The k histograms as one vector (L2 sensitivity sqrt k) under :func:`secure_perturb`."""
    sizes = np.cumsum([len(c) for c in counts])[:-1]
    noisy, std = secure_perturb(np.concatenate(counts), hist_std,
                                math.sqrt(released_components(bounds)))
    return np.split(noisy, sizes), std


def _secure_sums(first: np.ndarray, mom: np.ndarray, first_std: np.ndarray, mom_std: np.ndarray,
                 active: np.ndarray, settings: PolicyValueSettings):
    """The sums of :func:`add_sum_noise` under :func:`secure_perturb`: the first moments as the
    weighted vector w * sum z (sensitivity ||w||), the active second moments as the weighted
    vector of :func:`moment_weights`."""
    w = np.where(active, np.array([settings.behaviour_weight, 1.0, 1.0]), 0.0)
    norm_w = float(np.linalg.norm(w))
    safe = np.where(active, w, 1.0)
    noisy_w, std_w = secure_perturb(w[active] * first[active], float(first_std[active][0]
                                    * w[active][0]), norm_w)
    first = first.copy()
    first[active] = noisy_w / w[active]
    first_std = np.where(active, std_w / safe, 0.0)
    wm, sens = moment_weights(active, settings)
    on = wm > 0
    mom = mom.copy()
    if np.any(mom_std > 0):
        noisy_m, std_m = secure_perturb(wm[on] * mom[on], float(mom_std[on][0] * wm[on][0]), sens)
        mom[on] = noisy_m / wm[on]
        mom_std = np.where(on, std_m / np.where(on, wm, 1.0), 0.0)
    return first, mom, first_std, mom_std


def noise_scales(sigma: float, settings: PolicyValueSettings,
                 bounds: PolicyValueBounds) -> tuple[float, float, float]:
    """(histogram bin noise std, means' multiplier, moments' multiplier) of the release at
    ``sigma``: the k histograms have L2 sensitivity sqrt k (one count each)."""
    if sigma == 0:
        return 0.0, 0.0, 0.0
    s_clip, s_mean, s_mom = settings.sub_sigmas(sigma)
    return s_clip * math.sqrt(released_components(bounds)), s_mean, s_mom


def add_histogram_noise(counts: list[np.ndarray], hist_std: float, rng: np.random.Generator,
                        size: int | None = None) -> list[np.ndarray]:
    """Each histogram plus iid N(0, hist_std^2) per bin (``size``: that many releases)."""
    return [c + hist_std * rng.standard_normal(c.shape if size is None else (size, len(c)))
            for c in counts]


def exact_sums(terms: PolicyValueTerms, bounds: PolicyValueBounds, clips: tuple[float, ...]):
    """(sum z (3,), sum of the upper triangles of z z^T (6,), mid (3,), half (3,)) of the
    clipped components z = (x - mid) / half (0 where a component is constant)."""
    x = _components(terms, clips, bounds)
    low, high = _ranges(clips, bounds)
    mid, half = (low + high) / 2.0, (high - low) / 2.0
    active = half > 0
    z = np.where(active, np.clip((x - mid) / np.where(active, half, 1.0), -1.0, 1.0), 0.0)
    return z.sum(axis=0), moment_vectors(z).sum(axis=0), mid, half


def moment_weights(active: np.ndarray, settings: PolicyValueSettings) -> tuple[np.ndarray, float]:
    """(w (6,), L2 sensitivity) of the weighted second moments: the upper triangle of z z^T
    (:func:`gpope.core.ssp.moment_vectors`) with the (g, g) entry weighted by ``behaviour_weight``
    W where g varies (J(behaviour)'s variance bound reads it alone), 1 on the other varying
    entries, 0 elsewhere. With |z_j| <= 1 a patient's weighted vector has squared norm
    W^2 z_g^4 + ||z||^4 - z_g^4 <= W^2 - 1 + k^2 (k varying components; W = 1 if g is constant)."""
    w = (moment_vectors(active[None, :].astype(np.float64)).reshape(-1) > 0).astype(np.float64)
    w_gg = float(settings.behaviour_weight) if active[0] else 1.0
    w[0] *= w_gg
    return w, math.sqrt(w_gg * w_gg - 1.0 + int(active.sum()) ** 2)


def sum_noise_stds(active: np.ndarray, settings: PolicyValueSettings, *, s_mean: float,
                   s_mom: float) -> tuple[np.ndarray, np.ndarray]:
    """Noise std of each coordinate of sum z (3,) and of each second-moment entry (6,).

    The first moments are released as sum w_j z_j with public weights w = (behaviour_weight, 1,
    1) on the varying components: L2 sensitivity ||w|| (|z_j| <= 1), so coordinate j carries
    std s_mean ||w|| / w_j. The second moments likewise, weighted by :func:`moment_weights`
    (sensitivity D): entry e carries std s_mom D / w_e (0 on constant entries).
    """
    w = np.where(active, np.array([settings.behaviour_weight, 1.0, 1.0]), 0.0)
    norm_w = float(np.linalg.norm(w))
    first_std = np.where(active, s_mean * norm_w / np.where(active, w, 1.0), 0.0)
    wm, sens = moment_weights(active, settings)
    return first_std, np.where(wm > 0, s_mom * sens / np.where(wm > 0, wm, 1.0), 0.0)


def add_sum_noise(first: np.ndarray, mom: np.ndarray, first_std: np.ndarray, mom_std: np.ndarray,
                  active: np.ndarray, *, rng: np.random.Generator, size: int | None = None):
    """The sums plus their Gaussian noise (:func:`sum_noise_stds`); ``size``: that many
    independent releases (the audit)."""
    mom_active = moment_vectors(active[None, :].astype(np.float64)).reshape(-1) > 0
    shape_f = first.shape if size is None else (size, *first.shape)
    shape_m = mom.shape if size is None else (size, *mom.shape)
    noisy_first = first + first_std * rng.standard_normal(shape_f)
    noisy_mom = mom + np.where(mom_active, mom_std, 0.0) * rng.standard_normal(shape_m)
    return noisy_first, noisy_mom


def exact_intervals(terms: PolicyValueTerms, bounds: PolicyValueBounds, level: float,
                    method: str = "bernstein") -> dict[str, PolicyValueInterval]:
    """The same estimator without privacy: no noise, clips at the largest terms (no patient
    scaled), all of each end's alpha on the sampling bound. Diagnostics and benchmarks only."""
    rel = release_policy_value(terms, bounds, sigma=0.0, settings=PolicyValueSettings(),
                               rng=np.random.default_rng(0))
    return rel.intervals(level, method)


# --- intervals (post-processing of a release) -----------------------------------------------------

def _combos(bounds: PolicyValueBounds) -> dict[str, tuple[tuple[np.ndarray, float], ...]]:
    """(lower, upper) linear combinations (c, k) of x = (g, a, n): the mean of c . x + k.
    On-policy a = g and n = S are public identities, folded into g and the constant."""
    lo0, hi0 = bounds.target_range
    s = bounds.discount_mass
    t_lo, t_hi = (np.array([0.0, 1.0, -lo0]), lo0 * s), (np.array([0.0, 1.0, -hi0]), hi0 * s)
    b = (np.array([1.0, 0.0, 0.0]), 0.0)
    out = {
        "policy_value": (t_lo, t_hi),
        "behaviour_value": (b, b),
        "policy_contrast": ((t_lo[0] - b[0], t_lo[1]), (t_hi[0] - b[0], t_hi[1])),
    }
    if bounds.on_policy:
        fold = lambda c, k: (np.array([c[0] + c[1], 0.0, 0.0]), k + c[2] * s)  # noqa: E731
        out = {q: (fold(*lo), fold(*hi)) for q, (lo, hi) in out.items()}
    return out


def _clamp_side(rel: PolicyValueRelease, c: np.ndarray, side: str) -> str | None:
    """Which part of the return clamp moves this end of c . E[x] the wrong way: the deficit
    below g_lo (``"deficit"``) or the excess above g_hi (``"excess"``), None when neither can
    (public: the clips and c)."""
    cg = float(c[0])
    if cg == 0.0:
        return None
    part = "deficit" if (cg > 0) == (side == "lower") else "excess"
    return part if getattr(rel.clamp, f"{part}_range") > 0.0 else None


def _end_width(rel: PolicyValueRelease, c: np.ndarray, alpha: float, side: str, method: str,
               shares: tuple[float, float, float], extra_sd: float = 0.0) -> float:
    """How far one end (``side``) of c . E[x] lies from c . means: sampling (a union over the
    clips the release could choose), privacy noise, and the return clamp's bias on the side
    that moves the estimand away (:mod:`gpope.core.policy_value_clamp`), by a union bound with
    ``alpha`` in all; ``shares`` = (variance, noise, clamp) parts of alpha. With a released count
    (``rel.margin`` > 0) every sample size is m~ - t and the end moves by what a count off by t
    moves the means: x_j = mid_j + half_j z_j, the release's z^_j = S~_j / m~ (S~ the noisy sum)
    and the m patients' (S~_j - N_j) / m, so beside the noise N (in the noise width) the count
    moves z^_j by |z^_j| |m - m~| / m <= |z^_j| t / (m~ - t): a shift of sum_j |c_j| half_j
    |z^_j| t / (m~ - t), read off released numbers (the caller sets its probability aside).
    ``extra_sd``: the std of another independent Gaussian error the caller adds to this end (a
    joint interval, :func:`behaviour_end`), held with the release's own noise at one quantile."""
    clamp_share = shares[2]
    m = rel.m_low
    zbar = np.where(rel.half > 0, (rel.means - rel.mid) / np.where(rel.half > 0, rel.half, 1.0), 0.0)
    count = float(np.abs(c) @ (rel.half * np.abs(zbar))) * rel.margin / m
    private = rel.sigma > 0 or extra_sd > 0
    part = _clamp_side(rel, c, side)
    a_clamp = alpha * clamp_share if part is not None else 0.0
    alpha = alpha - a_clamp
    used = (c != 0) & (rel.half > 0)
    choices = int(np.prod(np.where(used, np.asarray(rel.choices), 1)))
    clamp = 0.0 if part is None else abs(float(c[0])) * rel.clamp.bound(
        part, m=m, a_noise=a_clamp / 2.0, a_pop=a_clamp / 2.0)
    cz = c * rel.half
    cov = rel.second - np.outer(zbar, zbar)
    var = float(cz @ cov @ cz) * m / max(m - 1, 1)  # sample variance of c . x
    low, high = _ranges(rel.clips, rel.bounds)
    span = float(np.abs(c) @ (high - low))
    noise_sd = float(np.sqrt(np.sum((c * rel.noise_means) ** 2)))
    if method == "normal":
        return count + clamp + float(norm.ppf(1.0 - alpha)) * math.sqrt(
            max(var, 0.0) / m + noise_sd ** 2 + extra_sd ** 2)
    var_sd = 0.0
    if private:
        # c^T M c of the noisy M: entry e's noise enters with moment_vectors(cz)_e
        mv = moment_vectors(cz[None, :])[0]
        var_sd = math.hypot(float(np.linalg.norm(mv * rel.noise_second)),
                            2.0 * abs(float(cz @ zbar)) * noise_sd)
    return count + clamp + _bernstein_width(var, var_sd, span, math.hypot(noise_sd, extra_sd),
                                            m=m, choices=choices, alpha=alpha,
                                            shares=shares[:2], private=private)


def behaviour_end(rel: PolicyValueRelease, settings: PolicyValueSettings, *, alpha: float,
                  side: str, extra_sd: float) -> float:
    """The ``side`` end of J(behaviour) at ``alpha`` (that end alone) for a caller that adds an
    independent Gaussian error E ~ N(0, extra_sd^2): J(behaviour) + E <= end (``upper``) or >= end
    (``lower``) with probability >= 1 - alpha; not intersected with the public range."""
    c, k = _combos(rel.bounds)["behaviour_value"][0 if side == "lower" else 1]
    width = _end_width(rel, c, alpha, side, settings.method,
                       (settings.variance_share, settings.noise_share, settings.clamp_share),
                       extra_sd=float(extra_sd))
    centre = float(c @ rel.means + k)
    return centre - width if side == "lower" else centre + width


def _bernstein_width(var: float, var_sd: float, span: float, noise_sd: float, *, m: int,
                     choices: int, alpha: float, shares: tuple[float, float],
                     private: bool) -> float:
    """Sampling (empirical Bernstein over ``choices`` clips, the noisy sample variance ``var``
    raised by its noise std ``var_sd``) plus privacy noise (std ``noise_sd``) of one end of a
    mean of variables spanning ``span``, failing with probability ``alpha`` in all; ``shares``:
    (variance, noise) parts of alpha."""
    variance_share, noise_share = shares
    a_var = alpha * variance_share if private else 0.0
    a_noise = alpha * noise_share if private else 0.0
    a_samp = alpha - a_var - a_noise
    if private:
        var = var + float(norm.ppf(1.0 - a_var)) * var_sd
    var = min(max(var, 0.0), span ** 2 / 4.0)
    log_term = math.log(2.0 * choices / a_samp)
    samp = math.sqrt(2.0 * var * log_term / m) + 7.0 * span * log_term / (3.0 * max(m - 1, 1))
    noise = float(norm.ppf(1.0 - a_noise)) * noise_sd if private else 0.0
    return samp + noise


def public_ranges(bounds: PolicyValueBounds) -> dict[str, tuple[float, float]]:
    """The public range of each released scalar: J(target) and J(behaviour) in
    ``bounds.return_range`` (J_lo, J_hi), their contrast in (J_lo - J_hi, J_hi - J_lo)."""
    lo, hi = bounds.return_range
    return {"policy_value": (lo, hi), "behaviour_value": (lo, hi),
            "policy_contrast": (lo - hi, hi - lo)}


def _intervals(rel: PolicyValueRelease, level: float, method: str,
               shares: tuple[float, float, float]) -> dict[str, PolicyValueInterval]:
    level = check_number("PolicyValueRelease.intervals", "level", level, gt=0.0, lt=1.0)
    check_choice("PolicyValueRelease.intervals", "method", method, _METHODS)
    alpha = 1.0 - level
    x = rel.means
    s = rel.bounds.discount_mass
    points = {}
    points["behaviour_value"] = x[0]
    if rel.bounds.on_policy:
        points["policy_value"] = x[0]
    else:
        # weighted (self-normalised) importance sampling; doubly robust: the mean of v0 + a
        points["policy_value"] = (x[1] if rel.bounds.value_range is not None
                                  else s * x[1] / x[2] if x[2] > 0 else float("nan"))
    points["policy_contrast"] = points["policy_value"] - points["behaviour_value"]
    out = {}
    ranges = public_ranges(rel.bounds)
    for name, ((c_lo, k_lo), (c_hi, k_hi)) in _combos(rel.bounds).items():
        e_lo, e_hi = float(c_lo @ x + k_lo), float(c_hi @ x + k_hi)
        h = lambda c, a, side: _end_width(rel, c, a, side, method, shares)  # noqa: E731
        lower, upper = e_lo - h(c_lo, alpha / 2.0, "lower"), e_hi + h(c_hi, alpha / 2.0, "upper")
        if upper < lower:  # noise can cross the ends; the interval is their hull
            lower, upper = min(lower, upper), max(lower, upper)
        point = points[name]
        mid_ends = (e_lo + e_hi) / 2.0
        value = mid_ends if not math.isfinite(point) else point
        value = min(max(value, min(e_lo, e_hi)), max(e_lo, e_hi))
        observed = (None if rel.bounds.on_policy or name != "policy_value"
                    else float(min(max(x[2] / s, 0.0), 1.0)))
        ends = np.clip([value, lower, upper, e_lo - h(c_lo, alpha, "lower")], *ranges[name])
        out[name] = PolicyValueInterval(value=float(ends[0]), lower=float(ends[1]),
                                        upper=float(ends[2]), lower_bound=float(ends[3]),
                                        level=float(level), observed_weight=observed)
    return out

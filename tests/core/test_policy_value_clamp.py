"""The return clamp's bias and the clips' selection inside the policy value intervals.

Oracles: the sample's own clipped mass computed directly, a closed-form Bernstein bound, and a
heavy-tailed population whose mean is known in closed form."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
from gpope.core.policy_value_clamp import (
    ClampBound,
    clamp_bound,
    clip_histograms,
    population_excess,
)
from gpope.core.policy_value_release import PolicyValueSettings, release_policy_value
from gpope.core.ssp import ssp_sigma

BOUNDS = PolicyValueBounds(gamma=1.0, horizon=60, weight_clip=10.0, reward_bounds=(0.0, 1.0))


def _heavy(m: int, rng: np.random.Generator, worse: float = 0.0) -> PolicyValueTerms:
    """5% of patients carry 80% of the value: g ~ U(0, 1) for 95%, U(20, 60) for 5%; the
    target's terms are the behaviour's with the heavy patients' returns scaled by 1 - worse."""
    heavy = rng.random(m) < 0.05
    g = np.where(heavy, rng.uniform(20.0, 60.0, m), rng.uniform(0.0, 1.0, m))
    return PolicyValueTerms(g=g, a=np.where(heavy, g * (1.0 - worse), g),
                            n=np.full(m, BOUNDS.discount_mass))


def test_exact_histogram_bounds_the_samples_clipped_mass():
    rng = np.random.default_rng(3)
    terms = _heavy(5000, rng)
    grids, counts = clip_histograms(terms, BOUNDS, PolicyValueSettings())
    for g_hi, g_lo in ((30.0, 0.2), (5.0, 0.0), (59.0, 0.9)):
        cb = clamp_bound(counts[0], grids[0].edges(), 1, g_hi=g_hi, g_lo=g_lo, noise_std=0.0)
        excess = np.maximum(terms.g - g_hi, 0.0).sum()
        deficit = np.maximum(g_lo - terms.g, 0.0).sum()
        assert excess <= cb.excess_sum and deficit <= cb.deficit_sum
        # nobody beyond the clamp is counted at more than the public range it could cover
        assert cb.excess_sum <= (terms.g > g_hi / 10 ** 0.25).sum() * (60.0 - g_hi) + 1e-9
        assert cb.excess_range == 60.0 - g_hi and cb.deficit_range == g_lo


def test_population_excess_is_bernsteins_self_bounding_form():
    b, m, beta, xbar = 40.0, 2000, 0.01, 0.3
    L = math.log(1.0 / beta)
    mu = population_excess(xbar, b, m=m, beta=beta)
    # mu solves mu = xbar + sqrt(2 b mu L / m) + b L / (3 m) (Bernstein with Var <= b mu)
    assert math.isclose(mu, xbar + math.sqrt(2 * b * mu * L / m) + b * L / (3 * m), rel_tol=1e-9)
    assert population_excess(xbar, 0.0, m=m, beta=beta) == 0.0


@pytest.mark.parametrize(("m", "eps"), [(2000, 1.0), (2000, 10.0), (20000, 1.0), (20000, 10.0)])
def test_heavy_tail_reproducer_covers_and_never_calls_a_worse_target_better(m, eps):
    """Issue 36's reproducer: 5% of patients carry 80% of the value, the target worse by 1.675,
    the defaults, sigma as a one-shot run gives the release. J(behaviour) and the contrast cover
    their truths and the contrast never lies wholly above 0, whether the release clamps the
    returns (the clamp's bound in the interval) or not (the public range's noise)."""
    s = PolicyValueSettings()
    sigma = ssp_sigma(m=m, epsilon=eps, delta=1e-5) / math.sqrt(s.share)
    truth_b, contrast = 0.95 * 0.5 + 0.05 * 40.0, -1.675
    rng = np.random.default_rng([m, int(eps)])
    cov_b = cov_c = wrong = 0
    runs = 25
    for _ in range(runs):
        rel = release_policy_value(_heavy(m, rng, worse=1.675 / 2.0), BOUNDS, sigma=sigma,
                                   settings=s, rng=rng)
        iv = rel.intervals_with(0.95, s)
        b, c = iv["behaviour_value"], iv["policy_contrast"]
        cov_b += b.lower <= truth_b <= b.upper
        cov_c += c.lower <= contrast <= c.upper
        wrong += c.lower > 0.0
    assert cov_b >= 0.9 * runs and cov_c >= 0.9 * runs and wrong <= 0.05 * runs


@pytest.mark.parametrize("signed", [False, True])
def test_the_clamp_is_kept_where_it_predicts_narrower_and_its_bound_covers(signed):
    """Returns U(0, 1) (``signed``: U(-1, 1) under rewards in [-1, 1]) under a public top of 60:
    with most of the release on the histogram the clamp predicts the narrower J(behaviour) and
    is kept; its bound holds over every end the walk could pick (``ends``); with the defaults the
    unclamped mean is narrower, and choosing it costs the sampling bound's union a factor 2, not
    the grid's count."""
    bounds = dataclasses.replace(BOUNDS, on_policy=True,
                                 reward_bounds=(-1.0, 1.0) if signed else (0.0, 1.0))
    rng = np.random.default_rng(5)
    for settings, clamped in ((PolicyValueSettings(clip_share=0.9, moments_share=0.05), True),
                              (PolicyValueSettings(), False)):
        hits = 0
        for _ in range(20):
            g = rng.uniform(-1.0 if signed else 0.0, 1.0, 20000)
            terms = PolicyValueTerms(g=g, a=g, n=np.full(20000, BOUNDS.discount_mass))
            rel = release_policy_value(terms, bounds, sigma=5.0, settings=settings, rng=rng)
            iv = rel.intervals_with(0.95, settings)["behaviour_value"]
            hits += iv.lower <= (0.0 if signed else 0.5) <= iv.upper
            assert (rel.clips[0] < 60.0) is clamped
            k = settings.bins_per_decade * 6 + 1  # the grid's edges
            ends, pairs = (2 * k + 2, (2 * k + 2) ** 2) if signed else (k + 1, k * (k + 1))
            assert rel.clamp.ends == (ends if clamped else 1)
            assert rel.choices[0] == (2 * pairs if clamped else 2)
        assert hits >= 19


def test_the_clamp_bound_holds_over_every_end():
    """bound(a_noise, a_pop) with ``ends`` E is the fixed-end bound at a_noise / E and a_pop / E
    (Bonferroni over the values the end can take)."""
    from scipy.stats import norm

    cb = ClampBound(excess_sum=100.0, excess_sd=40.0, excess_range=14.0, ends=50)
    m, a = 20000, 0.002
    sample = (100.0 + float(norm.ppf(1.0 - a / 50)) * 40.0) / m
    assert cb.bound("excess", m=m, a_noise=a, a_pop=a) == pytest.approx(
        population_excess(sample, 14.0, m=m, beta=a / 50), rel=1e-12)
    assert cb.bound("deficit", m=m, a_noise=a, a_pop=a) == 0.0


def test_a_released_count_keeps_every_row_around_the_mean_over_the_m_patients():
    """The means divide by a released count m~ = m + d: with the count's margin t >= |d| each row
    still holds the exact sample mean over the m patients (the oracle: the terms' own mean), and
    without the margin a count off by 10 % moves J(behaviour) out of its exact-release interval."""
    from gpope.core.mechanisms.count import count_margin

    rng = np.random.default_rng(11)
    m, s = 2000, PolicyValueSettings()
    terms = _heavy(m, rng)
    exact = float(np.mean(terms.g))
    t = count_margin(44.6, 0.05 * 0.05)  # the default count's noise at count_alpha of alpha 0.05
    for d in (-t, -t // 3, 0, t // 2, t):
        rel = release_policy_value(terms, BOUNDS, sigma=0.0, settings=s, rng=rng, count=m + d,
                                   count_margin=t)
        b = rel.intervals_with(0.95, s)["behaviour_value"]
        assert rel.m == m + d and rel.m_low == m + d - t
        assert b.lower <= exact <= b.upper
    off = release_policy_value(terms, BOUNDS, sigma=0.0, settings=s, rng=rng, count=m - m // 10)
    b = off.intervals_with(0.95, s)["behaviour_value"]
    assert not b.lower <= exact <= b.upper


def test_a_return_bound_narrows_j_behaviour_and_still_covers():
    """Outcomes +1 / -1 discounted over up to 30 decisions (gamma 0.95): every return lies in
    [-1, 1] although the rewards allow [-15.7, 15.7]. Stated as the spec's public
    ``return_bounds``, the release clamps each return there and reads its ranges from it: the
    J(behaviour) interval is several times narrower and still covers, and a return outside the
    bound is clamped into it by the release itself, before anything is released (the
    sensitivity holds whatever the statistics stored)."""
    from gpope.core.policy_value import policy_value_terms
    from gpope.core.trajectories.transitions import Transitions

    wide = PolicyValueBounds(gamma=0.95, horizon=30, weight_clip=3.0, reward_bounds=(-1.0, 1.0),
                             on_policy=True)
    tight = dataclasses.replace(wide, return_bounds=(-1.0, 1.0))
    assert tight.g_limits == (-1.0, 1.0) and tight.return_range == (-1.0, 1.0)
    assert wide.g_limits == pytest.approx((-wide.discount_mass, wide.discount_mass))
    m, settings = 20000, PolicyValueSettings()
    sigma = ssp_sigma(m=m, epsilon=1.0, delta=1e-6) / math.sqrt(settings.share)
    rng = np.random.default_rng(11)
    half, hits = {}, 0
    for bounds in (wide, tight):
        widths = []
        for _ in range(10):
            t = rng.integers(0, 30, m)
            g = np.where(rng.random(m) < 0.6, 1.0, -1.0) * 0.95 ** t
            terms = PolicyValueTerms(g=g, a=g, n=np.full(m, wide.discount_mass))
            iv = release_policy_value(terms, bounds, sigma=sigma, settings=settings,
                                      rng=rng).intervals_with(0.95, settings)["behaviour_value"]
            truth = 0.2 * float(np.mean(0.95 ** np.arange(30)))
            hits += iv.lower <= truth <= iv.upper
            widths.append((iv.upper - iv.lower) / 2.0)
        half[bounds.return_bounds] = float(np.median(widths))
    assert hits >= 19
    assert half[(-1.0, 1.0)] < 0.5 * half[None]
    # two records paid +1 on each of 3 decisions return 2.85 > 1: clamped to the bound
    tr = Transitions(traj_index=np.repeat([0, 1], 3), t=np.tile(np.arange(3), 2),
                     state=np.zeros((6, 1)), action=np.zeros(6, dtype=np.int64),
                     reward=np.ones(6), next_state=np.zeros((6, 1)),
                     terminal=np.tile([False, False, True], 2), truncated=np.zeros(6, dtype=bool),
                     behavior_prob=np.ones(6), n_trajectories=2)
    terms = policy_value_terms(tr, np.ones(6), tight)
    assert terms.g[0] == pytest.approx(2.8525)  # the statistics keep the record's return
    exact = {b.return_bounds: release_policy_value(terms, b, sigma=0.0, settings=settings,
                                                   rng=rng).intervals_with(0.95, settings)
             for b in (wide, tight)}
    assert exact[None]["behaviour_value"].value == pytest.approx(2.8525)
    assert exact[(-1.0, 1.0)]["behaviour_value"].value == 1.0

"""The return clamp's bias and the clips' selection inside the policy value intervals.

Oracles: the sample's own clipped mass computed directly, a closed-form Bernstein bound, and a
heavy-tailed population whose mean is known in closed form."""

from __future__ import annotations

import math

import numpy as np

from gpope.core.policy_value import PolicyValueBounds, PolicyValueTerms
from gpope.core.policy_value_clamp import clamp_bound, clip_histograms, population_excess
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


def test_heavy_tail_behaviour_and_contrast_cover_at_epsilon_1():
    """Where the noisy histogram cannot resolve the heavy patients' bins (m = 2,000, epsilon 1),
    the clamp cuts them; its bias now enters the interval: J(behaviour) and the contrast cover
    their truths and a worse target is never called better."""
    s = PolicyValueSettings()
    sigma = ssp_sigma(m=2000, epsilon=1.0, delta=1e-5) / math.sqrt(s.share)
    truth_b, contrast = 0.95 * 0.5 + 0.05 * 40.0, -1.675
    rng = np.random.default_rng(11)
    cov_b = cov_c = wrong = clipped = 0
    runs = 100
    for _ in range(runs):
        rel = release_policy_value(_heavy(2000, rng, worse=1.675 / 2.0), BOUNDS, sigma=sigma,
                                   settings=s, rng=rng)
        iv = rel.intervals_with(0.95, s)
        b, c = iv["behaviour_value"], iv["policy_contrast"]
        cov_b += b.lower <= truth_b <= b.upper
        cov_c += c.lower <= contrast <= c.upper
        wrong += c.lower > 0.0
        clipped += rel.clips[0] < 60.0
    assert clipped >= 30  # the clamp does bite in this cell
    assert cov_b >= 0.9 * runs and cov_c >= 0.9 * runs and wrong <= 0.05 * runs

"""Identification judged per released value (gpope.core.untuned.weak): a weakly visited state
leaves the other states' intervals finite, and they cover the exact values (Bellman solve)."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from gpope.core.intervals import separation
from gpope.core.untuned.weak import strong_block

GAMMA = 0.9
VISITS = np.array([5000.0, 4000.0, 3000.0, 4000.0, 5000.0, 3.0])  # state 5: hardly visited


def _population(visits=VISITS, loop=0.0):
    """(A, b, V) of a 6-state tabular chain: A = D (I - gamma P), b = D r (sums over the data's
    visits D); V the Bellman solve, the oracle. State 4 leads to the rare state 5 with mass 0.05;
    ``loop``: the share of state 5's continuation that stays in state 5 (a long stay: its row of A
    is weak however often it is visited)."""
    rng = np.random.default_rng(7)
    P = rng.dirichlet(np.ones(6), size=6) * 0.9  # 0.1 per step ends the episode
    P[:, 5] = 0.0
    P[4, 5] = 0.05
    P[5] = (1.0 - loop) * P[5] + loop * 0.9 * np.eye(6)[5]
    r = rng.uniform(0.0, 1.0, size=6)
    V = np.linalg.solve(np.eye(6) - GAMMA * P, r)
    D = np.diag(visits)
    return D @ (np.eye(6) - GAMMA * P), D @ r, V


def test_a_weak_state_leaves_the_others_finite_and_covering():
    A, b, V = _population()
    std, level, reps = 20.0, 0.95, 200
    lo, hi = 0.0, 1.0 / (1.0 - GAMMA)  # rewards in [0, 1]
    z = norm.ppf(0.5 + level / 2.0)
    covered, finite = np.zeros(6), np.zeros(6)
    rng = np.random.default_rng(0)
    for _ in range(reps):
        At = A + std * rng.standard_normal((6, 6))
        bt = b + std * rng.standard_normal(6)
        C = np.diag(VISITS + std * rng.standard_normal(6))
        assert not separation(At, std, level=level) > 1.0  # the whole-A test fails
        theta0 = np.linalg.lstsq(At, bt, rcond=None)[0]
        r_sum = b - A @ theta0 + std * rng.standard_normal(6)  # the released residual sum
        blk = strong_block(A=At, C=C, keep=np.ones(6, bool), theta0=theta0, r_sum=r_sum,
                           meat_r=np.zeros((6, 6)), G_all=np.eye(6), noise_std=std,
                           residual_noise=std, value_bounds=(lo, hi), level=level)
        assert blk is not None and not blk.strong[5] and blk.strong[:5].all()
        assert not blk.bounded[5]
        half = z * blk.se + blk.extra
        ok = blk.bounded & (np.abs(blk.values - V) <= half)
        covered += ok
        finite += blk.bounded
    assert finite[:5].min() == reps
    assert covered[:5].min() / reps >= 0.93
    assert blk.bias_bound[:5].max() > 0.0  # state 4's reach into the rare state is bounded


def test_without_a_finite_value_range_nothing_is_bounded():
    A, b, _ = _population()
    blk = strong_block(A=A, C=np.diag(VISITS), keep=np.ones(6, bool), theta0=np.zeros(6),
                       r_sum=b, meat_r=np.zeros((6, 6)), G_all=np.eye(6), noise_std=20.0,
                       residual_noise=1.0, value_bounds=(0.0, np.inf), level=0.95)
    assert blk is None


def test_the_ssp_bootstrap_judges_identification_per_value():
    """``--estimator ssp`` (gpope.core.intervals.bootstrap_interval with the tabular value range):
    the rare state's interval stays unbounded, the others are finite and cover the Bellman
    values, and each holds its released value."""
    from gpope.core.intervals import bootstrap_interval
    from gpope.core.ssp import NoisyStatistics

    visits = np.where(np.arange(6) == 5, 400.0, VISITS)  # supported (C_55 > 4 std), A weak
    A, b, V = _population(visits, loop=0.95)
    std, reps = 40.0, 60
    covered, finite = np.zeros(6), np.zeros(6)
    rng = np.random.default_rng(1)
    for _ in range(reps):
        sums = np.concatenate([(A + std * rng.standard_normal((6, 6))).ravel(),
                               b + std * rng.standard_normal(6),
                               (np.diag(visits) + std * rng.standard_normal((6, 6))).ravel()])
        noisy = NoisyStatistics(sums=sums[None, :], n=6, m=10_000, sigma=std, clip=1.0)
        _, iv = bootstrap_interval(noisy, None, lambda th: th, rng=rng, draws=100,
                                   regularize=False, value_bounds=(0.0, 1.0 / (1.0 - GAMMA)))
        assert iv.unidentified and np.isinf(iv.upper[5])
        assert np.all((iv.lower <= iv.value) & (iv.value <= iv.upper))
        finite += np.isfinite(iv.upper)
        covered += (iv.lower <= V) & (V <= iv.upper)
    assert finite[:5].min() == reps
    assert covered[:5].min() / reps >= 0.9

"""The disjoint-groups interval (--interval-groups): the public group function and the t interval."""

from __future__ import annotations

import numpy as np
import pytest

from gpope.core.intervals import check_interval_groups, group_interval, interval_groups
from gpope.errors import ConfigError


def test_a_patients_group_depends_on_its_own_id_only():
    ids = [f"p{i}" for i in range(2000)]
    g = interval_groups(ids, 5)
    # adding or removing patients leaves every other patient in its group (parallel composition)
    more = interval_groups(["new-patient", *ids[:700], *ids[701:]], 5)
    assert np.array_equal(more[1:], np.delete(g, 700))
    assert np.array_equal(interval_groups(ids, 5), g)  # deterministic: no seed, no state
    counts = np.bincount(g, minlength=5)
    assert counts.min() > 330 and counts.max() < 470  # about m / K each


def test_group_count_must_be_zero_or_at_least_two():
    assert check_interval_groups("o", 0) == 0 and check_interval_groups("o", 5) == 5
    for bad in (1, -2):
        with pytest.raises(ConfigError, match="interval_groups"):
            check_interval_groups("o", bad)
    with pytest.raises(ConfigError):
        group_interval(np.ones((1, 3)))


def test_group_count_is_refused_at_run_time_where_its_interval_does_not_hold():
    assert check_interval_groups("o", 4, sampling="poisson") == 4
    assert check_interval_groups("o", 0, sampling="uniform", tune="private", streamed=True) == 0
    for kw, match in [(dict(sampling="uniform"), "sampling poisson"),
                      (dict(sampling="poisson", tune="private"), "--tune private"),
                      (dict(sampling="poisson", streamed=True, in_memory_limit_mb=7),
                       "in_memory_limit_mb=7")]:
        with pytest.raises(ConfigError, match=match):
            check_interval_groups("o", 4, **kw)


def test_student_t_interval_covers_the_common_mean_of_iid_group_estimates():
    rng = np.random.default_rng(3)
    mean, sd, K = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, 0.01]), 5
    cover, lower = [], []
    for _ in range(1000):
        iv = group_interval(mean + sd * rng.standard_normal((K, 3)), level=0.95)
        assert iv.df == K - 1 and np.all(iv.lower <= iv.lower_bound)
        assert np.all(iv.lower_bound <= iv.value) and np.all(iv.value <= iv.upper)
        cover.append((iv.lower <= mean) & (mean <= iv.upper))
        lower.append(iv.lower_bound <= mean)
    assert np.mean(cover) == pytest.approx(0.95, abs=0.015)
    assert np.mean(lower) == pytest.approx(0.95, abs=0.015)
    est = np.array([[1.0, 2.0], [3.0, 2.0]])
    iv = group_interval(est, level=0.9)
    assert np.allclose(iv.value, [2.0, 2.0]) and iv.upper[1] == iv.lower[1] == 2.0
    assert iv.upper[0] - iv.value[0] == pytest.approx(6.313751514675 * 1.0, rel=1e-9)  # t_{1,0.95} sd/sqrt(2)


def test_a_group_run_normalises_by_the_public_size_not_by_its_actual_size():
    from gpope.core.gpope.solver import GPOPEConfig, run_gpope
    from gpope.core.statistics import TrajectoryStats

    rng = np.random.default_rng(0)
    m, n = 40, 3
    A = rng.normal(size=(m, n, n)) * 0.2 + np.eye(n)
    b, C = rng.normal(size=(m, n)), np.tile(np.eye(n), (m, 1, 1))
    zero = np.zeros((1, n, n))
    # one more patient whose statistics are all zero: no gradient, only a different actual size
    more = TrajectoryStats.from_dense(np.concatenate([A, zero]), np.concatenate([b, np.zeros((1, n))]),
                                      np.concatenate([C, zero]))
    stats = TrajectoryStats.from_dense(A, b, C)
    cfg = dict(iterations=50, step_size=0.1, clip=10.0, noise_multiplier=0.0, sampling="poisson",
               batch_rate=1.0)
    public = GPOPEConfig(**cfg, normalizing_size=25.0)
    a, c = run_gpope(stats, public, 1).theta, run_gpope(more, public, 1).theta
    np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-15)
    plain = GPOPEConfig(**cfg)  # default: the actual m, which the extra patient changes
    assert not np.allclose(run_gpope(stats, plain, 1).theta, run_gpope(more, plain, 1).theta)
    with pytest.raises(ConfigError, match="normalizing_size"):
        GPOPEConfig(iterations=5, step_size=0.1, noise_multiplier=0.0, normalizing_size=10.0)

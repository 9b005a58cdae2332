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


def test_student_t_interval_covers_the_common_mean_of_iid_group_estimates():
    rng = np.random.default_rng(3)
    mean, sd, K = np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, 0.01]), 5
    cover, lower = [], []
    for _ in range(2000):
        iv = group_interval(mean + sd * rng.standard_normal((K, 3)), level=0.95)
        assert iv.df == K - 1 and np.all(iv.lower <= iv.lower_bound)
        assert np.all(iv.lower_bound <= iv.value) and np.all(iv.value <= iv.upper)
        cover.append((iv.lower <= mean) & (mean <= iv.upper))
        lower.append(iv.lower_bound <= mean)
    assert np.mean(cover) == pytest.approx(0.95, abs=0.012)
    assert np.mean(lower) == pytest.approx(0.95, abs=0.012)
    est = np.array([[1.0, 2.0], [3.0, 2.0]])
    iv = group_interval(est, level=0.9)
    assert np.allclose(iv.value, [2.0, 2.0]) and iv.upper[1] == iv.lower[1] == 2.0
    assert iv.upper[0] - iv.value[0] == pytest.approx(6.313751514675 * 1.0, rel=1e-9)  # t_{1,0.95} sd/sqrt(2)

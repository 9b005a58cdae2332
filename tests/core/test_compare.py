"""The comparison of two released runs (gpope.core.compare): closed-form ends, the union-bound
level checked by simulation against known truths, verdicts and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from gpope.core.compare import ReleasedQuantity, compare_released, difference, sentence
from gpope.errors import ConfigError


def test_ends_level_and_verdicts_in_closed_form():
    a = ReleasedQuantity(0.4, 0.3, 0.5, 0.95)
    b = ReleasedQuantity(0.2, 0.15, 0.25, 0.95)
    d = difference("J", a, b)
    assert (d.value, d.lower, d.upper) == pytest.approx((0.2, 0.05, 0.35))
    assert d.level == pytest.approx(0.90)
    assert d.verdict == "better"
    assert difference("J", b, a).verdict == "worse"
    assert difference("J", b, a).lower == pytest.approx(-0.35)
    assert difference("s0", a, ReleasedQuantity(0.45, 0.35, 0.55, 0.95)).verdict == "cannot tell"
    assert "better than B by 0.2 " in sentence(d)
    assert "cannot tell" in sentence(difference("s0", a, a))


def test_an_unbounded_end_stays_unbounded():
    a = ReleasedQuantity(0.4, -math.inf, math.inf, 0.95)
    d = difference("s1", a, ReleasedQuantity(0.2, 0.1, 0.3, 0.95))
    assert d.lower == -math.inf and d.upper == math.inf and d.verdict == "cannot tell"


@pytest.mark.parametrize("dependence", ["same_data", "disjoint_misses"])
def test_difference_covers_at_the_union_bound_level(dependence):
    # oracle: two estimates of known truths with normal errors and 95% intervals; "same_data":
    # the runs share the sampling error (correlation 0.8); "disjoint_misses": run A misses only
    # when run B covers (the dependence that makes the union bound exact)
    rng = np.random.default_rng(3)
    z = norm.ppf(0.975)
    truth_a, truth_b, se = 0.41, 0.25, 0.05
    covered = []
    for _ in range(4000):
        if dependence == "same_data":
            shared = rng.standard_normal()
            ea = 0.8 * shared + 0.6 * rng.standard_normal()
            eb = 0.8 * shared + 0.6 * rng.standard_normal()
        else:
            u = rng.random()
            ea = z * 3.0 if u < 0.05 else 0.0
            eb = -z * 3.0 if u > 0.95 else 0.0
        va, vb = truth_a + se * ea, truth_b + se * eb
        d = difference("J", ReleasedQuantity(va, va - z * se, va + z * se, 0.95),
                       ReleasedQuantity(vb, vb - z * se, vb + z * se, 0.95))
        covered.append(d.lower <= truth_a - truth_b <= d.upper)
    assert np.mean(covered) >= 0.90 - 3 * math.sqrt(0.09 / 4000)


def test_errors_say_what_to_change():
    with pytest.raises(ConfigError, match="lower <= value <= upper"):
        ReleasedQuantity(0.5, 0.6, 0.7, 0.95)
    with pytest.raises(ConfigError, match="no quantity in common"):
        compare_released({"s0": ReleasedQuantity(0.1, 0.0, 0.2, 0.95)},
                         {"s1": ReleasedQuantity(0.1, 0.0, 0.2, 0.95)})
    out = compare_released({"s0": ReleasedQuantity(0.1, 0.0, 0.2, 0.95),
                            "s1": ReleasedQuantity(0.3, 0.2, 0.4, 0.95)},
                           {"s1": ReleasedQuantity(0.1, 0.0, 0.2, 0.95)})
    assert [d.name for d in out] == ["s1"] and out[0].verdict == "cannot tell"

"""Every estimator's released values and value intervals lie in the range the spec's public
bounds imply (post-processing, as the tuning-free default releases them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpope.api import load_spec
from gpope.core.intervals import Interval
from gpope.core.untuned.release import value_range
from gpope.shell.evaluate.execute import _in_public_range

CHAIN = Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml"


def test_values_and_finite_interval_ends_are_cut_at_the_public_range():
    spec = load_spec(CHAIN)  # rewards in [0, 1], gamma 0.99: every value in [0, 100]
    lo, hi = value_range(spec)
    assert (lo, hi) == pytest.approx((0.0, 100.0))
    k = len(spec.reference_names)
    raw = np.linspace(-3.0, 250.0, k)
    iv = Interval(value=raw, lower=raw - 10.0, upper=raw + 10.0, lower_bound=raw - 5.0,
                  se=np.ones(k), level=0.95, df=0)
    iv_unbounded = Interval(value=raw, lower=np.full(k, -np.inf), upper=np.full(k, np.inf),
                            lower_bound=np.full(k, -np.inf), se=np.ones(k), level=0.95, df=0,
                            unidentified=True)
    values, out = _in_public_range(spec, raw, iv)
    assert np.all((lo <= values) & (values <= hi)) and values[0] == lo and values[-1] == hi
    for end in (out.value, out.lower, out.upper, out.lower_bound):
        assert np.all((lo <= end) & (end <= hi))
    # a covered truth inside the range stays covered: the ends move only toward the range
    inside = (raw - 10.0 >= lo) & (raw + 10.0 <= hi)
    assert np.array_equal(out.lower[inside], (raw - 10.0)[inside])
    # an unbounded end keeps saying "not identified"
    _, still = _in_public_range(spec, raw, iv_unbounded)
    assert np.all(np.isinf(still.lower)) and np.all(np.isinf(still.upper)) and still.unidentified
    assert _in_public_range(spec, raw, None)[1] is None

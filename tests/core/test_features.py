"""Feature maps against direct loops and closed-form counts."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.features import (
    ConstantIdentityFeatures,
    FeatureMap,
    FourierFeatures,
    TabularFeatures,
    feature_map_from_dict,
)
from gpope.errors import ConfigError, DataError


def test_fourier_order5_2d_has_36_features_and_constant_first():
    fm = FourierFeatures(order=5, low=(-1.2, -0.07), high=(0.6, 0.07))
    assert fm.n_features == 36
    states = np.random.default_rng(0).uniform([-1.2, -0.07], [0.6, 0.07], size=(50, 2))
    phi = fm(states)
    assert phi.shape == (50, 36)
    np.testing.assert_array_equal(phi[:, 0], 1.0)


def test_fourier_values_match_direct_loop():
    low, high = (-1.2, -0.07), (0.6, 0.07)
    fm = FourierFeatures(order=3, low=low, high=high)
    rng = np.random.default_rng(1)
    states = rng.uniform([-1.5, -0.1], [0.9, 0.1], size=(20, 2))  # some outside: clipped
    phi = fm(states)
    for r, s in enumerate(states):
        x = [min(1.0, max(0.0, (s[k] - low[k]) / (high[k] - low[k]))) for k in range(2)]
        for col, c in enumerate(itertools.product(range(4), repeat=2)):
            expected = math.cos(math.pi * (c[0] * x[0] + c[1] * x[1]))
            assert phi[r, col] == pytest.approx(expected, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(d=st.integers(1, 4), k=st.integers(0, 3), data=st.data())
def test_fourier_max_coupling_count(d, k, data):
    c = data.draw(st.integers(1, d))
    fm = FourierFeatures(order=k, low=(0.0,) * d, high=(1.0,) * d, max_coupling=c)
    expected = sum(math.comb(d, j) * k**j for j in range(c + 1))
    assert fm.n_features == expected
    assert np.all(np.count_nonzero(fm.coefficients, axis=1) <= c)
    out = fm(np.full((3, d), 0.3))
    assert out.shape == (3, expected) and np.all(np.abs(out) <= 1.0)


def test_tabular_one_hot_and_errors():
    fm = TabularFeatures(5)
    s = np.array([[0], [3], [4], [3]])
    np.testing.assert_array_equal(fm(s), np.eye(5)[[0, 3, 4, 3]])
    with pytest.raises(DataError, match=r"0\.\.4"):
        fm(np.array([[5]]))
    with pytest.raises(DataError):
        fm(np.array([[1.5]]))


def test_constant_identity():
    fm = ConstantIdentityFeatures(low=(0.0, -2.0), high=(10.0, 2.0))
    out = fm(np.array([[5.0, 0.0], [20.0, -3.0]]))
    np.testing.assert_allclose(out, [[1.0, 0.5, 0.5], [1.0, 1.0, 0.0]])
    assert fm.n_features == 3


@pytest.mark.parametrize(
    "fm",
    [
        TabularFeatures(7),
        FourierFeatures(order=2, low=(0.0, 1.0, 2.0), high=(1.0, 2.0, 3.0), max_coupling=2),
        ConstantIdentityFeatures(low=(0.0,), high=(3.0,)),
    ],
)
def test_round_trip_through_json(fm):
    assert isinstance(fm, FeatureMap)
    d = json.loads(json.dumps(fm.to_dict()))
    back = feature_map_from_dict(d)
    assert back == fm
    x = np.array([[1.0, 1.5, 2.5]])[:, : len(getattr(fm, "low", (0,)))]
    np.testing.assert_array_equal(back(x), fm(x))


def test_validation_messages():
    with pytest.raises(ConfigError, match=r"'order' parameter of FourierFeatures must be >= 0"):
        FourierFeatures(order=-1, low=(0.0,), high=(1.0,))
    with pytest.raises(ConfigError, match="'high' parameter"):
        FourierFeatures(order=1, low=(1.0,), high=(1.0,))
    with pytest.raises(ConfigError, match="'max_coupling'"):
        FourierFeatures(order=1, low=(0.0,), high=(1.0,), max_coupling=2)
    with pytest.raises(ConfigError, match="'kind'"):
        feature_map_from_dict({"kind": "rbf"})
    with pytest.raises(ConfigError, match="n_states"):
        TabularFeatures(0)


def test_huge_fourier_orders_fail_fast_and_coupled_bases_are_never_enumerated_in_full():
    """Issue 13.6: `order: 100000` was a MemoryError after 46 s; now an immediate ConfigError."""
    import itertools
    import time

    from gpope.core.features import MAX_FEATURES, FourierFeatures
    from gpope.errors import ConfigError

    start = time.perf_counter()
    with pytest.raises(ConfigError, match=f"at most {MAX_FEATURES}"):
        FourierFeatures(order=100000, low=(0.0, 0.0), high=(1.0, 1.0))
    coupled = FourierFeatures(order=100, low=(0.0,) * 6, high=(1.0,) * 6, max_coupling=1)
    assert coupled.n_features == 1 + 6 * 100 and time.perf_counter() - start < 5.0
    for d, k, c in [(2, 3, 1), (3, 4, 2), (4, 2, 3)]:  # same order as the filtered full grid
        full = np.array(list(itertools.product(range(k + 1), repeat=d)), dtype=float)
        full = full[np.count_nonzero(full, axis=1) <= c]
        got = FourierFeatures(order=k, low=(0.0,) * d, high=(1.0,) * d, max_coupling=c)
        np.testing.assert_array_equal(got.coefficients, full)

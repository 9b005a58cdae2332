"""Metrics against independent oracles: projection form, saddle value, closed forms (BASELINES 4)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.metrics import mspbe, relative_mspbe, value_error, values
from gpope.errors import ConfigError, SchemaError


def _random_model(seed: int, n_states: int = 5, n_features: int = 3, gamma: float = 0.9):
    """A finite MDP under a fixed policy with a non-stationary data distribution d."""
    rng = np.random.default_rng(seed)
    P = rng.random((n_states, n_states))
    P /= P.sum(axis=1, keepdims=True)
    r = rng.normal(size=n_states)
    d = rng.dirichlet(np.ones(n_states))
    Phi = rng.normal(size=(n_states, n_features))
    D = np.diag(d)
    A = Phi.T @ D @ (np.eye(n_states) - gamma * P) @ Phi
    b = Phi.T @ D @ r
    C = Phi.T @ D @ Phi
    return Phi, P, r, D, gamma, A, b, C


def _projection_form(theta, Phi, P, r, D, gamma):
    """||Phi theta - Pi T(Phi theta)||_D^2 with the explicit D-weighted projection."""
    Pi = Phi @ np.linalg.inv(Phi.T @ D @ Phi) @ Phi.T @ D
    v = Phi @ theta
    err = v - Pi @ (r + gamma * P @ v)
    return float(err @ D @ err)


def _saddle_value(theta, A, b, C):
    """max_y <b - A theta, y> - y^T C y / 2 by numerical optimisation (no C^-1 formula)."""
    g = b - A @ theta
    res = scipy.optimize.minimize(
        lambda y: -(g @ y - 0.5 * y @ C @ y),
        np.zeros_like(g),
        jac=lambda y: -(g - C @ y),
        method="BFGS",
        options={"gtol": 1e-12},
    )
    return -res.fun


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matrix_projection_and_saddle_forms_agree(seed):
    Phi, P, r, D, gamma, A, b, C = _random_model(seed)
    theta = np.random.default_rng(100 + seed).normal(size=3)
    matrix = mspbe(theta, A, b, C)
    assert matrix == pytest.approx(_projection_form(theta, Phi, P, r, D, gamma), rel=1e-10)
    assert matrix == pytest.approx(2.0 * _saddle_value(theta, A, b, C), rel=1e-6)
    assert matrix > 1e-3  # a generic theta is not the fixed point: the check is not vacuous


def test_mspbe_zero_at_td_fixed_point():
    *_, A, b, C = _random_model(3)
    theta_td = np.linalg.solve(A, b)
    assert mspbe(theta_td, A, b, C) < 1e-20
    assert mspbe(theta_td + 0.1, A, b, C) > 1e-6


def test_batched_theta_matches_rows():
    *_, A, b, C = _random_model(4)
    thetas = np.random.default_rng(5).normal(size=(7, 3))
    batch = mspbe(thetas, A, b, C)
    assert batch.shape == (7,)
    np.testing.assert_allclose(batch, [mspbe(t, A, b, C) for t in thetas], rtol=1e-12)
    rel = relative_mspbe(thetas, A, b, C)
    np.testing.assert_allclose(rel, batch / mspbe(np.zeros(3), A, b, C), rtol=1e-12)


def test_relative_mspbe_tabular_normaliser_is_mean_squared_reward():
    # Tabular features: MSPBE(0) = b^T C^-1 b = r^T D r = E_d[r^2] (BASELINES.md 4).
    _, P, r, D, gamma, *_ = _random_model(6)
    A = D @ (np.eye(5) - gamma * P)
    b = D @ r
    C = D
    assert mspbe(np.zeros(5), A, b, C) == pytest.approx(float(np.diag(D) @ r**2), rel=1e-12)
    assert relative_mspbe(np.zeros(5), A, b, C) == pytest.approx(1.0)
    theta = np.ones(5)
    assert relative_mspbe(theta, A, b, C, normalizer=2.0) == pytest.approx(
        mspbe(theta, A, b, C) / 2
    )
    with pytest.raises(ConfigError):
        relative_mspbe(theta, A, b, C, normalizer=0.0)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), rank=st.integers(1, 4))
def test_mspbe_non_negative(seed, rank):
    rng = np.random.default_rng(seed)
    n = 4
    A = rng.normal(size=(n, n)) * rng.exponential()
    b = rng.normal(size=n)
    M = rng.normal(size=(n, rank))
    C = M @ M.T  # PSD, singular when rank < n
    theta = rng.normal(size=(3, n)) * 10
    assert np.all(mspbe(theta, A, b, C) >= 0.0)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_invariance_under_feature_reparametrisation(seed):
    Phi, P, r, D, gamma, A, b, C = _random_model(seed % 1000)
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(3, 3)) + 3 * np.eye(3)
    theta = rng.normal(size=3)
    # Rebuild the model quantities from the new features Phi M; theta -> M^-1 theta.
    Phi_new = Phi @ M
    A_new = Phi_new.T @ D @ (np.eye(5) - gamma * P) @ Phi_new
    b_new = Phi_new.T @ D @ r
    C_new = Phi_new.T @ D @ Phi_new
    got = mspbe(np.linalg.solve(M, theta), A_new, b_new, C_new)
    assert got == pytest.approx(mspbe(theta, A, b, C), rel=1e-7, abs=1e-12)


def test_singular_c_uses_pseudo_inverse_on_active_features():
    # Feature 2 is never active: C, A, b have a zero row/column there. The MSPBE must equal the
    # one of the model with that feature dropped, whatever theta_2 is.
    *_, A, b, C = _random_model(7, n_features=2)
    A3 = np.zeros((3, 3))
    A3[:2, :2] = A
    C3 = np.zeros((3, 3))
    C3[:2, :2] = C
    b3 = np.append(b, 0.0)
    theta = np.array([0.3, -0.2])
    expected = mspbe(theta, A, b, C)
    assert mspbe(np.append(theta, 5.0), A3, b3, C3) == pytest.approx(expected, rel=1e-10)


def test_values_and_value_error():
    phi_ref = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    theta = np.array([1.0, 2.0])
    np.testing.assert_allclose(values(theta, phi_ref), [1.0, 2.0, 3.0])
    v_true = np.array([1.0, 0.0, 5.0])  # errors 0, 2, -2
    assert value_error(theta, phi_ref, v_true) == pytest.approx(np.sqrt(8.0 / 3.0))
    w = np.array([0.5, 0.25, 0.25])
    assert value_error(theta, phi_ref, v_true, weights=w) == pytest.approx(np.sqrt(2.0))
    # unnormalised weights give the same weighted RMS
    assert value_error(theta, phi_ref, v_true, weights=4 * w) == pytest.approx(np.sqrt(2.0))
    batch = np.stack([theta, np.zeros(2)])
    assert values(batch, phi_ref).shape == (2, 3)
    np.testing.assert_allclose(
        value_error(batch, phi_ref, v_true), [np.sqrt(8.0 / 3.0), np.sqrt(26.0 / 3.0)]
    )


def test_shape_errors():
    *_, A, b, C = _random_model(8)
    with pytest.raises(SchemaError):
        mspbe(np.zeros(4), A, b, C)
    with pytest.raises(SchemaError):
        mspbe(np.zeros(3), A, b[:2], C)
    with pytest.raises(SchemaError):
        value_error(np.zeros(3), np.zeros((4, 3)), np.zeros(3))

"""Total clipping (issue 12, defect 3): one record with huge or non-finite statistics.

A record whose statistics are finite but huge (entries ~1.5e308, or an importance weight ~1e307)
used to overflow to inf/NaN once sampled: the release was NaN with the record and finite without
it. Every path of the solver must map such a gradient to norm <= h, so the release stays finite
and the record has the influence of any other clipped record.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpope.core.gpope import iterate as gpope_iterate
from gpope.core.gpope import kernels
from gpope.core.gpope.solver import GPOPEConfig, run_gpope, run_gpope_trials
from gpope.core.gpope.streamed import run_gpope_streamed
from gpope.core.mechanisms.clipping import clip_rows, clip_vector
from gpope.core.statistics import TrajectoryStats, trajectory_statistics

HUGE = 1.5e308


# ---------------------------------------------------------------------- the clip itself
@settings(max_examples=300, deadline=None)
@given(g=arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 6)),
                elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
       h=st.floats(1e-3, 1e3))
def test_clip_rows_is_total(g, h):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the clip itself must not overflow
        out = clip_rows(g, h)
    assert out.shape == g.shape
    assert np.all(np.isfinite(out))
    # norms computed without overflow: every entry is <= h in magnitude
    nrm = np.sqrt(np.sum((out / h) ** 2, axis=1))
    assert np.all(nrm <= 1.0 + 1e-12)


@settings(max_examples=200, deadline=None)
@given(g=arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(1, 6)),
                elements=st.floats(-1e150, 1e150)),
       h=st.floats(1e-3, 1e3))
def test_clip_rows_equals_textbook_formula_when_it_is_defined(g, h):
    nrm = np.linalg.norm(g, axis=1)
    expected = g / np.maximum(1.0, nrm / h)[:, None]
    np.testing.assert_allclose(clip_rows(g, h), expected, rtol=1e-12, atol=0)


def test_clip_rows_special_rows():
    h = 2.0
    g = np.array([
        [HUGE, HUGE, 0.0],             # finite, squared norm overflows: direction kept
        [np.inf, -np.inf, 5.0],        # infinite entries: their sign direction
        [np.nan, 1.0, 1.0],            # NaN: the zero row
        [0.3, 0.4, 0.0],               # ordinary row inside the ball: unchanged
    ])
    out = clip_rows(g, h)
    np.testing.assert_allclose(out[0], [h / math.sqrt(2), h / math.sqrt(2), 0.0])
    np.testing.assert_allclose(out[1], [h / math.sqrt(2), -h / math.sqrt(2), 0.0])
    np.testing.assert_array_equal(out[2], 0.0)
    np.testing.assert_array_equal(out[3], g[3])
    np.testing.assert_allclose(clip_vector(g[0], h), out[0])
    assert clip_rows(g, None) is g  # no clip bound: unchanged (not private)


# ---------------------------------------------------------------------- every solver path
def _base(m=40, n=3, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, n, n)) * 0.3 + np.eye(n)
    C = np.broadcast_to(np.eye(n), (m, n, n)).copy()
    b = rng.normal(size=(m, n))
    return A, b, C


def _paths(stats, cfg, seed):
    """theta of every solver path that can run on ``stats`` with ``cfg``."""
    out = {"run_gpope": run_gpope(stats, cfg, seed).theta,
           "trials": run_gpope_trials(stats, cfg, seed, 3).theta,
           "traced": run_gpope(stats, GPOPEConfig(**{**cfg.__dict__, "trace_every": 7}),
                               seed).theta}
    if stats.representation == "dense":
        dense = stats

        def fetch(ids):
            A, b, C = dense.dense()
            return TrajectoryStats.from_dense(A[ids], b[ids], C[ids])

        out["streamed"] = run_gpope_streamed(
            fetch, cfg, seed, m=stats.m, n=stats.n, sigma=cfg.noise_multiplier, epsilon=None,
            accountant="rdp", max_rows_per_fetch=64).theta
    return out


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
@pytest.mark.parametrize("jit", [True, False])
def test_release_with_a_huge_record_is_finite_on_every_path(sampling, jit, monkeypatch):
    A, b, C = _base()
    A[5] = HUGE  # finite, but any gradient of it overflows (inf - inf = NaN in places)
    stats = TrajectoryStats.from_dense(A, b, C)
    cfg = GPOPEConfig(iterations=400, step_size=0.1, clip=1.0, noise_multiplier=0.5,
                      sampling=sampling, batch_rate=0.2 if sampling == "poisson" else None)
    if not jit:
        monkeypatch.setattr(gpope_iterate, "dense_steps", lambda *a, **k: False)  # the numpy fast loop
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the record's own gradient overflows
        thetas = _paths(stats, cfg, 3)
    for name, theta in thetas.items():
        assert np.all(np.isfinite(theta)), name


@pytest.mark.parametrize("sampling", ["uniform", "poisson"])
def test_huge_record_has_the_influence_of_an_ordinary_clipped_record(sampling):
    # Record 5 has A = C = 0 and b = -G e_k: its gradient is the constant G e_{n+k} whatever the
    # iterate, so with G = 1e308 (squared norm overflows) and G = 10 (ordinary) it clips to the
    # same h e_{n+k}: the same seed must release the same theta on every path.
    A, b, C = _base()
    A[5], C[5], b[5] = 0.0, 0.0, 0.0
    runs = {}
    for g in (10.0, 1e308):
        b5 = b.copy()
        b5[5, 2] = -g
        stats = TrajectoryStats.from_dense(A, b5, C)
        cfg = GPOPEConfig(iterations=300, step_size=0.1, clip=1.0, noise_multiplier=0.5,
                          sampling=sampling, batch_rate=0.2 if sampling == "poisson" else None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            runs[g] = _paths(stats, cfg, 11)
    for name in runs[10.0]:
        np.testing.assert_allclose(runs[1e308][name], runs[10.0][name], rtol=1e-9, atol=1e-12,
                                   err_msg=name)


def test_huge_importance_weight_on_the_tabular_path():
    # Chain-like tabular statistics where one transition has an importance weight of 1e307.
    rng = np.random.default_rng(2)
    m, n = 30, 5
    traj = np.repeat(np.arange(m), 4)
    s = rng.integers(0, n, size=len(traj))
    sn = rng.integers(0, n, size=len(traj))
    rho = np.ones(len(traj))
    rho[9] = 1e307
    eye = np.eye(n)
    cfg = GPOPEConfig(iterations=500, step_size=0.1, clip=1.0, noise_multiplier=0.5)
    for rep in ("tabular", "dense"):
        stats = trajectory_statistics(eye[s], eye[sn], rng.normal(size=len(traj)), rho, traj, m,
                                      gamma=0.9, terminal=np.zeros(len(traj), bool),
                                      length_scale=4.0, representation=rep)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            theta = run_gpope(stats, cfg, 4).theta
        assert np.all(np.isfinite(theta)), rep


def test_compiled_kernel_total_clip_matches_clip_rows():
    if not kernels.jit_available():
        pytest.skip("numba not available")
    fn = kernels._compiled()
    assert fn is not None
    # one step from x = [0, 0; 1, 1] on a block whose gradient overflows: the update must equal
    # beta * clip_rows(gradient)
    n = 2
    blk = np.full((1, n, 2 * n), HUGE)
    bs = np.zeros((1, n))
    x = np.array([0.0, 0.0, 1.0, 1.0])
    acc = np.zeros(n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        kernels.dense_steps(blk, bs, kernels.StepChunk(x, acc, np.array([0.5]), 1.0, None, 0, 10))
    assert np.all(np.isfinite(x))
    assert np.linalg.norm(x - [0.0, 0.0, 1.0, 1.0]) <= 0.5 + 1e-12

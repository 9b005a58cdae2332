"""The streamed driver loop fetches bounded blocks and still releases the core's theta.

A fetch block never holds more than ``max_rows`` ids, even inside one plan chunk: with large
Poisson batches (chain at m = 1e6: 1,278 steps of ~1,000 ids per chunk) a whole chunk would be
1.3e6 dense rows, more than the driver JVM's heap holds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.gpope.sample_plan import PlanChunk
from gpope.core.gpope.solver import GPOPEConfig, run_gpope
from gpope.core.gpope.streamed import _blocks, run_gpope_streamed
from gpope.core.statistics import TrajectoryStats


def _stats(m: int = 300, n: int = 3, seed: int = 0) -> TrajectoryStats:
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, n, n)) * 0.3 + np.eye(n)
    C = np.broadcast_to(np.eye(n), (m, n, n)).copy()
    return TrajectoryStats.from_dense(A, rng.normal(size=(m, n)), C)


@pytest.mark.parametrize("sampling, rate", [("poisson", 0.05), ("uniform", None)])
def test_every_fetch_is_bounded_and_theta_equals_the_core(sampling, rate):
    stats = _stats()
    A, b, C = stats.dense()
    cfg = GPOPEConfig(iterations=600, step_size=0.05, clip=1.0, noise_multiplier=0.7,
                      sampling=sampling, batch_rate=rate, averaging="tail", tail_fraction=0.5,
                      trace_every=50)
    sizes: list[int] = []

    def fetch(ids: np.ndarray) -> TrajectoryStats:
        sizes.append(len(ids))
        return TrajectoryStats.from_dense(A[ids], b[ids], C[ids])

    max_rows = 40  # Poisson batches average 15 ids per step: blocks of a few steps each
    got = run_gpope_streamed(fetch, cfg, 5, m=stats.m, n=stats.n, sigma=0.7, epsilon=None,
                             accountant="rdp", max_rows_per_fetch=max_rows)
    want = run_gpope(stats, cfg, 5)
    assert len(sizes) > 10  # the 600 steps really were fetched in many blocks
    assert max(sizes) <= max_rows
    np.testing.assert_allclose(got.theta, want.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.theta_avg, want.theta_avg, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got.trace_theta, want.trace_theta, rtol=1e-9, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=40), st.integers(1, 50))
def test_blocks_cover_the_plan_in_order_within_the_bound(step_sizes, max_rows):
    offsets = np.concatenate([[0], np.cumsum(step_sizes)]).astype(np.int64)
    ids = np.arange(offsets[-1], dtype=np.int64)
    chunk = PlanChunk(0, len(step_sizes), ids, np.zeros_like(ids), offsets)
    blocks = _blocks([chunk, chunk], max_rows)
    got = np.concatenate([p.ids for block in blocks for p in block])
    np.testing.assert_array_equal(got, np.concatenate([ids, ids]))  # every id once, in plan order
    for block in blocks:
        rows = sum(p.rows for p in block)
        # a block exceeds the bound only when it is one step that alone exceeds it
        assert rows <= max_rows or (len(block) == 1 and block[0].hi - block[0].lo == 1)

"""Per-trajectory statistics against a per-transition loop oracle and the chain's exact values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.features import TabularFeatures
from gpope.core.statistics import (
    TrajectoryStats,
    statistics_from_transitions,
    trajectory_statistics,
)
from gpope.core.trajectories.transitions import Transitions
from gpope.errors import ConfigError, DataError, SchemaError


# ---------------------------------------------------------------------- in-test oracles
def sample_chain(m: int, rng: np.random.Generator, n_states: int = 40, p: float = 0.5):
    """Vectorised chain: start uniform over 0..n-2; stay w.p. p else advance; reward 1 entering n-1.

    Returns (traj, state, next_state, reward, terminal), sorted by trajectory then time.
    """
    last = n_states - 1
    start = rng.integers(0, last, size=m)
    k = last - start  # positions visited: start .. last-1
    traj = np.repeat(np.arange(m), k)
    pos = np.repeat(start - (np.cumsum(k) - k), k) + np.arange(k.sum())
    dwell = rng.geometric(1 - p, size=len(pos))  # steps spent at each position (>= 1)
    traj_t = np.repeat(traj, dwell)
    state = np.repeat(pos, dwell)
    nxt = state.copy()
    nxt[np.cumsum(dwell) - 1] += 1
    reward = ((nxt == last) & (nxt != state)).astype(float)
    return traj_t, state, nxt, reward, nxt == last


def chain_values(n_states: int = 40, p: float = 0.5, gamma: float = 0.99) -> np.ndarray:
    """Closed form V(s) = gamma^(k-1) ((1-p)/(1-p gamma))^k, k = n-1-s; V(absorbing) = 0."""
    k = n_states - 1 - np.arange(n_states - 1)
    return np.append(gamma ** (k - 1) * ((1 - p) / (1 - p * gamma)) ** k, 0.0)


def loop_oracle(phi, next_phi, reward, rho, traj, m, gamma, terminal, norm):
    """A_i, b_i, C_i by a plain loop over transitions (norm: 'transition' -> 1/L given as float)."""
    n = phi.shape[1]
    A = np.zeros((m, n, n))
    b = np.zeros((m, n))
    C = np.zeros((m, n, n))
    tau = np.zeros(m)
    for t in range(len(reward)):
        i = traj[t]
        nxt = np.zeros(n) if terminal[t] else next_phi[t]
        A[i] += rho[t] * np.outer(phi[t], phi[t] - gamma * nxt)
        b[i] += rho[t] * reward[t] * phi[t]
        C[i] += np.outer(phi[t], phi[t])
        tau[i] += 1
    scale = (1.0 / tau) if norm == "trajectory_mean" else np.full(m, norm)
    return A * scale[:, None, None], b * scale[:, None], C * scale[:, None, None]


def random_rows(rng, m, n, extra, one_hot=False):
    traj = np.r_[np.arange(m), rng.integers(0, m, extra)]
    rng.shuffle(traj)  # unsorted on purpose
    T = len(traj)
    if one_hot:
        phi = np.eye(n)[rng.integers(0, n, T)]
        nphi = np.eye(n)[rng.integers(0, n, T)]
    else:
        phi = rng.normal(size=(T, n))
        nphi = rng.normal(size=(T, n))
    return dict(
        phi=phi, next_phi=nphi, reward=rng.normal(size=T), rho=rng.uniform(0, 2, T),
        traj_index=traj, terminal=rng.random(T) < 0.2,
    )


def build(rows, m, representation, normalization="transition", gamma=0.9):
    return trajectory_statistics(
        rows["phi"], rows["next_phi"], rows["reward"], rows["rho"], rows["traj_index"], m,
        gamma=gamma, terminal=rows["terminal"], normalization=normalization, length_scale=7.0,
        representation=representation,
    )


# ---------------------------------------------------------------------- tests
@pytest.mark.parametrize("normalization", ["transition", "trajectory_mean"])
@pytest.mark.parametrize("representation", ["dense", "compact", "tabular"])
def test_statistics_match_loop_oracle(normalization, representation):
    rng = np.random.default_rng(3)
    m, n = 9, 4
    rows = random_rows(rng, m, n, 40, one_hot=representation == "tabular")
    stats = build(rows, m, representation, normalization)
    assert stats.representation == representation
    A, b, C = loop_oracle(rows["phi"], rows["next_phi"], rows["reward"], rows["rho"],
                          rows["traj_index"], m, 0.9, rows["terminal"],
                          "trajectory_mean" if normalization == "trajectory_mean" else 1 / 7.0)
    Ad, bd, Cd = stats.dense()
    np.testing.assert_allclose(Ad, A, atol=1e-12)
    np.testing.assert_allclose(bd, b, atol=1e-12)
    np.testing.assert_allclose(Cd, C, atol=1e-12)
    np.testing.assert_array_equal(stats.tau, np.bincount(rows["traj_index"], minlength=m))
    Ap, bp, Cp = stats.population()
    np.testing.assert_allclose(Ap, A.mean(0), atol=1e-12)
    np.testing.assert_allclose(bp, b.mean(0), atol=1e-12)
    np.testing.assert_allclose(Cp, C.mean(0), atol=1e-12)
    # gradients against the formula on the oracle's matrices
    idx = rng.integers(0, m, 6)
    th, w = rng.normal(size=(6, n)), rng.normal(size=(6, n))
    g = stats.gradients(idx, th, w)
    for r, j in enumerate(idx):
        np.testing.assert_allclose(g[r, :n], -A[j].T @ w[r], atol=1e-12)
        np.testing.assert_allclose(g[r, n:], A[j] @ th[r] + C[j] @ w[r] - b[j], atol=1e-12)
    g_shared = stats.gradients(idx, th[0], w[0])
    np.testing.assert_allclose(g_shared[2], stats.gradients(idx[2:3], th[0], w[0])[0], atol=1e-14)


def test_truncated_rows_keep_next_features():
    rng = np.random.default_rng(0)
    rows = random_rows(rng, 3, 2, 5)
    rows["terminal"][:] = False
    s_keep = build(rows, 3, "dense")
    rows["terminal"][:] = True
    s_term = build(rows, 3, "dense")
    A1, _, _ = s_keep.dense()
    A2, _, _ = s_term.dense()
    assert not np.allclose(A1, A2)  # next features matter unless terminal
    A_no_next, _, _ = build({**rows, "next_phi": np.zeros_like(rows["phi"])}, 3, "dense").dense()
    np.testing.assert_allclose(A2, A_no_next, atol=1e-14)


def sparse_of(stats: TrajectoryStats, perm: np.ndarray) -> TrajectoryStats:
    """The nonzero entries of ``stats``' storage rows, rows listed in the order ``perm``."""
    rows = stats.to_rows()
    ac = np.concatenate([rows["A"], rows["C"]], axis=1)[perm]
    mask = ac != 0
    return TrajectoryStats.from_sparse_chunks(
        traj_index=rows["traj_index"][perm], tau=rows["tau"][perm], b=rows["b"][perm],
        lengths=mask.sum(axis=1), chunks=[(np.nonzero(mask)[1], ac[mask])],
        normalization=stats.normalization)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), m=st.integers(1, 6), n=st.integers(1, 5),
       extra=st.integers(0, 20), one_hot=st.booleans())
def test_representations_give_identical_gradients(seed, m, n, extra, one_hot):
    rng = np.random.default_rng(seed)
    rows = random_rows(rng, m, n, extra, one_hot=one_hot)
    reps = ["dense", "compact"] + (["tabular"] if one_hot else [])
    all_stats = [build(rows, m, r) for r in reps]
    all_stats.append(sparse_of(all_stats[0], rng.permutation(m)))
    k = 5
    idx = rng.integers(0, m, k)
    th, w = rng.normal(size=(k, n)), rng.normal(size=(k, n))
    ref = all_stats[0].gradients(idx, th, w)
    assert ref.shape == (k, 2 * n)
    for s in all_stats[1:]:
        np.testing.assert_allclose(s.gradients(idx, th, w), ref, rtol=0, atol=1e-12)
        for a, b in zip(s.population(), all_stats[0].population(), strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), m=st.integers(1, 8), n=st.integers(1, 4),
       extra=st.integers(0, 20), cuts=st.integers(0, 4))
def test_sparse_chunks_in_any_order_and_chunking_equal_the_dense_statistics(seed, m, n, extra, cuts):
    """from_sparse_chunks (the evaluate stage's batch-by-batch load) gives the dense statistics,
    whatever the storage order of the rows and wherever the chunks cut between rows."""
    rng = np.random.default_rng(seed)
    dense = build(random_rows(rng, m, n, extra), m, "dense")
    rows = dense.to_rows()
    perm = rng.permutation(m)
    ac = np.concatenate([rows["A"], rows["C"]], axis=1)[perm]
    mask = ac != 0
    lengths = mask.sum(axis=1)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    index, value = np.nonzero(mask)[1].astype(np.int32), ac[mask]
    bounds = np.unique(np.concatenate([[0, m], rng.integers(0, m + 1, cuts)]))
    chunks = [(index[offsets[lo]:offsets[hi]], value[offsets[lo]:offsets[hi]])
              for lo, hi in itertools.pairwise(bounds)]
    sparse = TrajectoryStats.from_sparse_chunks(
        traj_index=rows["traj_index"][perm], tau=rows["tau"][perm], b=rows["b"][perm],
        lengths=lengths, chunks=chunks, normalization=dense.normalization)
    assert sparse.representation == "sparse"
    for a, b in zip(sparse.dense(), dense.dense(), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=0)
    np.testing.assert_array_equal(sparse.tau, dense.tau)


def test_sparse_chunks_must_end_on_row_boundaries_and_hold_every_entry():
    kwargs = {"traj_index": [1, 0], "tau": [1, 1], "b": np.zeros((2, 1)), "lengths": [2, 1]}
    one = (np.array([0, 1, 0], dtype=np.int32), np.array([1.0, 2.0, 3.0]))
    assert TrajectoryStats.from_sparse_chunks(chunks=[one], **kwargs).representation == "sparse"
    with pytest.raises(SchemaError, match="row boundary"):  # cuts row 0's two entries apart
        TrajectoryStats.from_sparse_chunks(chunks=[(one[0][:1], one[1][:1]), (one[0][1:], one[1][1:])],
                                           **kwargs)
    with pytest.raises(SchemaError, match="the lengths say 3"):  # row 1's entry missing
        TrajectoryStats.from_sparse_chunks(chunks=[(one[0][:2], one[1][:2])], **kwargs)
    with pytest.raises(SchemaError, match="finite"):
        TrajectoryStats.from_sparse_chunks(chunks=[(one[0], np.array([1.0, np.nan, 3.0]))], **kwargs)


@pytest.mark.parametrize("representation", ["dense", "compact", "tabular", "sparse"])
def test_dense_range_equals_the_slice_of_dense(representation):
    rng = np.random.default_rng(11)
    m, n = 7, 3
    rows = random_rows(rng, m, n, 25, one_hot=True)
    stats = build(rows, m, "dense" if representation == "sparse" else representation)
    if representation == "sparse":
        stats = sparse_of(stats, rng.permutation(m))
    assert stats.representation == representation
    full = stats.dense()
    for lo, hi in ((0, m), (2, 5), (6, 7), (3, 3)):
        for part, whole in zip(stats.dense_range(lo, hi), full, strict=True):
            np.testing.assert_allclose(part, whole[lo:hi], rtol=0, atol=1e-12)
    with pytest.raises(DataError):
        stats.dense_range(4, 2)


@pytest.mark.parametrize("representation", ["dense", "compact", "tabular", "sparse"])
def test_concatenated_chunks_equal_the_whole(representation):
    """Statistics built chunk by chunk and concatenated hold the whole data set's statistics:
    same dense arrays, population and gradients (a chunk whose ratios are all 1 included)."""
    rng = np.random.default_rng(13)
    sizes = (4, 1, 5)
    chunks = [random_rows(rng, k, 3, 12, one_hot=True) for k in sizes]
    chunks[1]["rho"][:] = 1.0  # stores no ratios; the others do
    rep = "dense" if representation == "sparse" else representation
    parts = [build(c, k, rep) for c, k in zip(chunks, sizes, strict=True)]
    if representation == "sparse":
        parts = [sparse_of(p, np.arange(p.m)) for p in parts]
    whole = TrajectoryStats.concatenate(parts)
    assert whole.representation == representation and whole.m == sum(sizes)
    ref = [np.concatenate(x) for x in zip(*(p.dense() for p in parts), strict=True)]
    for a, b in zip(whole.dense(), ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
    np.testing.assert_array_equal(whole.tau, np.concatenate([p.tau for p in parts]))
    for a, b in zip(whole.population(), (x.mean(axis=0) for x in ref), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    idx = np.array([0, 4, 5, 9, 3])
    th, w = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    A, bb, C = ref
    g = whole.gradients(idx, th, w)
    for r, j in enumerate(idx):
        np.testing.assert_allclose(g[r, 3:], A[j] @ th[r] + C[j] @ w[r] - bb[j], atol=1e-12)
        np.testing.assert_allclose(g[r, :3], -A[j].T @ w[r], atol=1e-12)
    with pytest.raises(SchemaError, match="at least one"):
        TrajectoryStats.concatenate([])
    with pytest.raises(SchemaError, match="share"):
        TrajectoryStats.concatenate([parts[0], build(chunks[0], 4, "compact" if rep == "dense"
                                                     else "dense")])


def test_tabular_to_sparse_merges_entries_and_keeps_the_statistics():
    rng = np.random.default_rng(17)
    m, n = 8, 3
    rows = random_rows(rng, m, n, 200, one_hot=True)
    tab = build(rows, m, "tabular")
    sp = tab.to_sparse()
    assert sp.representation == "sparse" and sp.to_sparse() is sp
    assert sp.nbytes < tab.nbytes  # repeated (cell, next cell) pairs merged
    for a, b in zip(sp.dense(), tab.dense(), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
    for a, b in zip(sp.population(), tab.population(), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
    idx = rng.integers(0, m, 6)
    th, w = rng.normal(size=(6, n)), rng.normal(size=(6, n))
    np.testing.assert_allclose(sp.gradients(idx, th, w), tab.gradients(idx, th, w), rtol=0,
                               atol=1e-12)
    with pytest.raises(ConfigError, match="tabular"):
        build(rows, m, "dense").to_sparse()


def test_rows_round_trip_in_any_order():
    rng = np.random.default_rng(5)
    stats = build(random_rows(rng, 6, 3, 10), 6, "compact")
    rows = stats.to_rows()
    assert rows["A"].shape == (6, 9) and rows["C"].shape == (6, 9) and rows["b"].shape == (6, 3)
    perm = rng.permutation(6)
    back = TrajectoryStats.from_rows({k: v[perm] for k, v in rows.items()})
    for a, b in zip(back.dense(), stats.dense(), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-14)
    np.testing.assert_array_equal(back.tau, stats.tau)


def test_sparse_layout_round_trips_and_runs_gpope_like_dense():
    """The sparse layout (the evaluate loader's for mostly-zero rows) holds the same statistics as
    the dense one: same dense arrays, and GPOPE with the same seeds gives the same estimate."""
    from gpope.core.gpope.solver import GPOPEConfig, run_gpope

    rng = np.random.default_rng(11)
    stats = build(random_rows(rng, 300, 12, 900, one_hot=True), 300, "dense")
    sparse = sparse_of(stats, rng.permutation(stats.m))
    assert sparse.representation == "sparse" and sparse.nbytes < stats.nbytes / 3
    for a, b in zip(sparse.dense(), stats.dense(), strict=True):
        np.testing.assert_array_equal(a, b)
    for sampling in ("poisson", "uniform"):
        cfg = GPOPEConfig(iterations=300, step_size=0.5, clip=0.05, noise_multiplier=0.3,
                          sampling=sampling, batch_rate=0.05 if sampling == "poisson" else None,
                          delta=1e-5)
        ref = run_gpope(stats, cfg, 3).theta
        np.testing.assert_allclose(run_gpope(sparse, cfg, 3).theta, ref, rtol=1e-9, atol=1e-12)
    with pytest.raises(SchemaError, match="indices"):
        TrajectoryStats.from_sparse_chunks(traj_index=[0], tau=[1], b=np.zeros((1, 2)),
                                           lengths=[1], chunks=[([8], [1.0])])


def test_from_transitions_tabular_equals_featurised():
    rng = np.random.default_rng(2)
    m = 30
    traj, s, sn, r, term = sample_chain(m, rng, n_states=8)
    T = len(traj)
    trans = Transitions(
        traj_index=traj, t=np.zeros(T, dtype=np.int64), state=s[:, None].astype(float),
        action=np.zeros(T, dtype=np.int64), reward=r, next_state=sn[:, None].astype(float),
        terminal=term, truncated=np.zeros(T, bool), behavior_prob=np.ones(T), n_trajectories=m,
    )
    fm = TabularFeatures(8)
    rho = rng.uniform(0.5, 1.5, T)
    ref = trajectory_statistics(np.eye(8)[s], np.eye(8)[sn], r, rho, traj, m, gamma=0.99,
                                terminal=term, length_scale=50.0, representation="dense")
    for rep in ("dense", "compact", "auto"):
        got = statistics_from_transitions(trans, fm, rho, gamma=0.99, length_scale=50.0,
                                          representation=rep)
        for a, b in zip(got.dense(), ref.dense(), strict=True):
            np.testing.assert_allclose(a, b, atol=1e-14)
    assert statistics_from_transitions(trans, fm, rho, gamma=0.99, length_scale=50.0,
                                       representation="compact").representation == "tabular"


def test_validation_errors():
    rng = np.random.default_rng(0)
    rows = random_rows(rng, 3, 2, 4)
    with pytest.raises(ConfigError, match=r"'length_scale'.*Got None"):
        trajectory_statistics(rows["phi"], rows["next_phi"], rows["reward"], rows["rho"],
                              rows["traj_index"], 3, gamma=0.9, terminal=rows["terminal"])
    with pytest.raises(ConfigError, match="'normalization'"):
        build(rows, 3, "dense", normalization="mean")
    with pytest.raises(DataError, match="no transitions"):
        build(rows, 4, "dense")
    with pytest.raises(DataError, match="one-hot"):
        build(rows, 3, "tabular")
    with pytest.raises(DataError, match=r"0\.\.2"):
        build(rows, 3, "dense").gradients(np.array([3]), np.zeros(2), np.zeros(2))


def _chain_fixed_point(m, normalization, rng):
    traj, s, sn, r, term = sample_chain(m, rng)
    T = len(traj)
    trans = Transitions(
        traj_index=traj, t=np.zeros(T, dtype=np.int64), state=s[:, None].astype(float),
        action=np.zeros(T, dtype=np.int64), reward=r, next_state=sn[:, None].astype(float),
        terminal=term, truncated=np.zeros(T, bool), behavior_prob=np.ones(T), n_trajectories=m,
    )
    stats = statistics_from_transitions(trans, TabularFeatures(40), np.ones(T), gamma=0.99,
                                        normalization=normalization, length_scale=200.0,
                                        representation="compact")
    A, b, _ = stats.population()
    # state 39 is absorbing: never a current state, so its row/column of A is zero
    return np.linalg.solve(A[:39, :39], b[:39])


def test_chain_transition_normalization_is_unbiased_trajectory_mean_is_not():
    V = chain_values()[:39]
    rng = np.random.default_rng(11)
    errs = {}
    for m in (20_000, 60_000):
        for norm in ("transition", "trajectory_mean"):
            errs[norm, m] = np.abs(_chain_fixed_point(m, norm, rng) - V).max()
    # sampling error at these m is ~5e-4; the paper's normalisation is off by ~1e-2 and stays
    assert errs["transition", 20_000] < 3e-3
    assert errs["transition", 60_000] < 2e-3
    assert errs["trajectory_mean", 20_000] > 6e-3
    assert errs["trajectory_mean", 60_000] > 6e-3


def test_chain_closed_form_matches_bellman_solve():
    # oracle check of the closed form used above: (I - gamma P) V = r
    n, p, g = 40, 0.5, 0.99
    P = np.zeros((n, n))
    for s in range(n - 1):
        P[s, s], P[s, s + 1] = p, 1 - p
    r = np.zeros(n)
    r[n - 2] = 1 - p
    V = np.linalg.solve(np.eye(n - 1) - g * P[: n - 1, : n - 1], r[: n - 1])
    np.testing.assert_allclose(chain_values()[:39], V, rtol=1e-12)
    assert chain_values()[38] == pytest.approx(0.5 / 0.505)

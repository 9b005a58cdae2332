"""The tuning-free default (gpope.core.untuned.release) against independent oracles: closed-form LSTD,
dp-accounting's own Gaussian composition, brute-force bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting.pld import PLDAccountant
from hypothesis import given, settings
from hypothesis import strategies as st

from gpope.core.envs.registry import get_domain, random_mdp_of
from gpope.core.spec import EvaluationSpec
from gpope.core.untuned.release import (
    UntunedSettings,
    plan_untuned,
    release_untuned_rows,
    residual_quantile,
    statistics_norm_bound,
    untuned_dp_event,
    upper_quantile,
    value_range,
)
from gpope.errors import ConfigError, GpopeError


def _data(name: str, m: int, seed: int):
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions

    mdp = random_mdp_of(name)
    spec = EvaluationSpec.from_mapping(mdp.spec_mapping("t"))
    tr = get_domain(name).generate(m, np.random.default_rng(seed), None, mdp.config.max_steps)
    rows = statistics_of_transitions(tr, spec).to_rows()
    truth = np.array([mdp.reference_values()[k] for k, _ in spec.reference_states])
    return spec, truth, statistics_vectors(rows["A"], rows["b"], rows["C"])


@pytest.fixture(scope="module")
def tabular():
    return _data("random_mdp/11", 4000, 1)


def test_without_noise_the_release_is_the_lstd_fixed_point(tabular):
    """Noise -> 0: the clip of the SSP step re-weights long trajectories, and the refinement from
    the unclipped rows' residuals lands on the LSTD fixed point of ALL rows (closed form)."""
    from gpope.core.ssp import split_vector, vector_features

    spec, _, vec = tabular
    n = vector_features(vec.shape[1])
    A, b, _ = split_vector(vec.sum(axis=0, keepdims=True), n)
    keep = np.abs(np.diag(A[0])) > 0
    lstd = np.zeros(n)
    lstd[keep] = np.linalg.solve(A[0][np.ix_(keep, keep)], b[0][keep])
    tiny = plan_untuned(m=len(vec), epsilon=1e6, delta=1e-5, settings=UntunedSettings())
    rel = release_untuned_rows(vec, spec, sigmas=tiny, moments_share=0.1,
                               settings=UntunedSettings(residual_quantile=1.0),
                               rng=np.random.default_rng(0))
    np.testing.assert_allclose(rel.interval.value, spec.reference_values(lstd), atol=2e-3)


def test_a_clip_that_shrinks_one_state_does_not_make_the_refinement_overshoot(tabular):
    """Long stays at one state (5 % of patients, their rows 30 times over) are the rows the
    statistics clip cuts, so the clipped A there is a fraction of the true one and one Newton step
    divided by it overshoots; without noise, the secant of the residual release and the probe
    brings the refined theta back to the LSTD fixed point of all rows (closed form)."""
    from gpope.core.ssp import split_vector, vector_features

    spec, _, vec = tabular
    n = vector_features(vec.shape[1])
    _, _, C = split_vector(vec, n)
    stays = np.random.default_rng(3).choice(np.flatnonzero(C[:, 0, 0] > 0), size=len(vec) // 20)
    rows = np.concatenate([vec, 30.0 * vec[stays]])
    A, b, _ = split_vector(rows.sum(axis=0, keepdims=True), n)
    keep = np.abs(np.diag(A[0])) > 0
    lstd = np.zeros(n)
    lstd[keep] = np.linalg.solve(A[0][np.ix_(keep, keep)], b[0][keep])
    tiny = plan_untuned(m=len(rows), epsilon=1e6, delta=1e-5, settings=UntunedSettings())

    def error(secant_z: float) -> tuple[float, float | None]:
        rel = release_untuned_rows(rows, spec, sigmas=tiny, moments_share=0.1,
                                   settings=UntunedSettings(residual_quantile=1.0,
                                                            secant_z=secant_z),
                                   rng=np.random.default_rng(0))
        return float(np.max(np.abs(rel.theta - lstd))), rel.probe_scale

    assert error(1e12)[0] > 0.1 and error(1e12)[1] is None  # the overshoot is there to correct
    err, scale = error(3.0)
    assert err < 0.03 and 0.0 < scale < 1.0   # values are about 1
    # without the long stays nothing is clipped away enough to move the refined estimate
    assert release_untuned_rows(vec, spec, sigmas=tiny, moments_share=0.1,
                                settings=UntunedSettings(residual_quantile=1.0),
                                rng=np.random.default_rng(0)).probe_scale is None


def test_the_residual_clip_cuts_a_number_of_rows_that_does_not_grow_with_m():
    """The clip leaves min(1 % of m, residual_tail_stds histogram noise stds) rows above it: the
    1 % below m = 300 sigma_q, a fixed count of rows above (hand arithmetic)."""
    s = UntunedSettings()
    assert (s.residual_quantile, s.residual_tail_stds) == (0.99, 3.0)
    sig = plan_untuned(m=20_000, epsilon=1.0, delta=1e-5, settings=s)
    rows = 3.0 * sig.quantile  # the count the rule allows above the clip
    for m in (1_000, 2_000, 20_000, 200_000, 2_000_000):
        above = (1.0 - residual_quantile(s, sig, m)) * m
        assert above == pytest.approx(min(0.01 * m, rows), rel=1e-9)
    assert residual_quantile(s, sig, 1_000) == 0.99
    assert (1.0 - residual_quantile(s, sig, 2_000_000)) * 2_000_000 == pytest.approx(rows)
    with pytest.raises(ConfigError, match="residual_tail_stds"):
        UntunedSettings(residual_tail_stds=0.0)


def test_a_tail_the_noise_hides_cannot_lift_the_residual_clip_past_its_cap():
    """Few rows above the clip is a count the noisy histogram may not resolve: read alone it can
    land at the grid's top; held at 2x the 0.99 reading of the same noisy histogram, never."""
    from gpope.core.mechanisms.quantile import LogGrid
    from gpope.core.untuned.release import _private_quantile

    norms = np.random.default_rng(0).uniform(0.5, 1.0, 2000)[:, None]  # every row's norm <= 1
    idx = np.arange(len(norms))

    def aggregate(kernel, width):
        return kernel(idx, norms)[0]

    grid = LogGrid(lo=1e-3, hi=1e3, bins_per_decade=8)
    lifted = 0
    for seed in range(40):
        def read(q, cap=None, seed=seed):
            return _private_quantile(aggregate, grid, lambda r: r, q, m=2000, sigma=30.0,
                                     rng=np.random.default_rng(seed), cap=cap)
        base, alone = read(0.99), read(0.9999)
        assert read(0.9999, cap=(0.99, 2.0)) == min(alone, 2.0 * base)
        lifted += alone > 2.0 * base
    assert lifted > 0  # the cap is what holds those draws


def test_private_release_is_accurate_and_its_interval_finite(tabular):
    spec, truth, vec = tabular
    sig = plan_untuned(m=len(vec), epsilon=10.0, delta=1e-5, settings=UntunedSettings())
    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1,
                               settings=UntunedSettings(), rng=np.random.default_rng(3))
    iv = rel.interval
    assert np.all(np.isfinite(iv.lower)) and np.all(np.isfinite(iv.upper))
    assert np.max(np.abs(iv.value - truth)) < 0.1
    lo, hi = value_range(spec)
    assert np.all((lo <= iv.lower) & (iv.upper <= hi))


def test_event_composes_to_the_run_epsilon_by_an_independent_accountant():
    s = UntunedSettings()
    sig = plan_untuned(m=20_000, epsilon=1.0, delta=1e-5, settings=s, accountant="pld")
    # shares of one Gaussian mechanism's privacy loss: the composition is exactly it
    assert 2 / sig.quantile**2 + 1 / sig.statistics**2 + 1 / sig.probe**2 + 1 / sig.residual**2 == \
        pytest.approx(1 / sig.total**2, rel=1e-12)
    assert sig.quantile == pytest.approx(sig.total / np.sqrt(s.quantile_share))
    whole = PLDAccountant().compose(untuned_dp_event(sig, 0.1)).get_epsilon(1e-5)
    assert 0.97 <= whole <= 1.0 + 1e-3
    half = plan_untuned(m=20_000, epsilon=1.0, delta=1e-5, settings=s, accountant="pld", share=0.5)
    assert half.total == pytest.approx(sig.total * np.sqrt(2.0))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.0, 1e3), min_size=1, max_size=200), st.floats(0.5, 0.999))
def test_upper_quantile_without_noise_is_an_upper_bound_of_the_true_quantile(xs, q):
    from gpope.core.mechanisms.quantile import LogGrid

    grid = LogGrid(lo=1e-3, hi=1e3, bins_per_decade=4)
    edges = grid.edges()
    counts = np.bincount(np.searchsorted(edges, xs, side="right"), minlength=len(edges) + 1)
    est = upper_quantile(counts.astype(float), edges, q, len(xs))
    # at most (1 - q) m values are >= the estimate, unless it is the top edge
    assert est == edges[-1] or np.sum(np.asarray(xs) >= est) <= (1 - q) * len(xs) + 1e-9


def test_public_bounds_hold_for_generated_data(tabular):
    spec, truth, vec = tabular
    # trajectories are at most length_scale long, so no row exceeds the public norm bound
    assert np.linalg.norm(vec, axis=1).max() <= statistics_norm_bound(spec)
    lo, hi = value_range(spec)
    assert lo <= truth.min() and truth.max() <= hi
    assert value_range(EvaluationSpec.from_mapping(
        {**random_mdp_of("random_mdp/11").spec_mapping("t"), "gamma": 1.0}))[1] == math.inf


def test_settings_refuse_shares_that_leave_nothing():
    with pytest.raises(ConfigError, match="leave nothing"):
        UntunedSettings(quantile_share=0.3, refine_share=0.5)


def test_release_plan_of_the_default_is_charged_and_certified():
    import types

    from gpope.core.evaluation.plan import plan_release

    spec = EvaluationSpec.from_mapping(random_mdp_of("random_mdp/11").spec_mapping("t"))
    base = dict(epsilon=1.0, delta=1e-5, estimator="untuned", sampling="poisson",
                accountant="auto", iterations=1, batch_rate=None, clip=1.0, moments_share=0.1,
                statistics_share=0.1, interval_groups=3, tune="none", in_memory_limit_mb=None,
                policy_value_share=0.0)
    plan = plan_release(types.SimpleNamespace(**base), m=20_000, spec=spec, layout="dense",
                        statistics_clip=None)
    assert plan.estimator == "untuned" and plan.valid_bound and plan.charged_epsilon == 1.0
    assert plan.main.name == "untuned" and plan.interval_groups == 0
    assert plan.spent_epsilon <= 1.0 + 1e-6 and plan.relation == "add_or_remove_one"
    assert "intervals" in plan.releases
    with pytest.raises(GpopeError, match="paper"):  # never charged under a non-bound
        plan_release(types.SimpleNamespace(**{**base, "accountant": "paper"}), m=20_000,
                     spec=spec, layout="dense", statistics_clip=None)


def test_second_order_widths_bound_what_the_delta_method_leaves_out():
    """Monte Carlo against the exact error: with A~ = A + E, the refinement's error is
    err = A^-1 u, its first-order part A~^-1 u; the rest stays inside the returned widths in at
    least 1 - (level's and the noise bound's failure) of draws, and rho >= 1 gives inf."""
    from gpope.core.untuned.release import second_order_widths

    rng = np.random.default_rng(5)
    n, s = 3, 0.04
    A = np.array([[1.0, 0.2, 0.0], [0.1, 0.6, 0.1], [0.0, 0.3, 0.8]])
    L = rng.standard_normal((n, n))
    V = L @ L.T + 0.5 * np.eye(n)
    G = np.array([[1.0, 0.0, 0.0], [0.3, 0.3, 0.4]])
    misses = bounded = 0
    rest_scale = []
    for _ in range(400):
        inv = np.linalg.inv(A + s * rng.standard_normal((n, n)))
        u = rng.multivariate_normal(np.zeros(n), V)
        widths, rho = second_order_widths(G, inv, V, s, level=0.95)
        if rho >= 1.0:
            assert np.all(np.isinf(widths))
            continue
        bounded += 1
        rest = G @ (np.linalg.solve(A, u) - inv @ u)
        rest_scale.append(np.max(np.abs(rest) / np.sqrt(np.einsum("ki,ij,kj->k", G, inv @ V @ inv.T, G))))
        misses += bool(np.any(np.abs(rest) > widths))
    assert bounded > 300
    assert misses / bounded <= 0.10
    assert np.median(rest_scale) > 0.05  # the second-order part is not negligible here
    widths, rho = second_order_widths(G, np.eye(n) * 100.0, V, s, level=0.95)
    assert rho >= 1.0 and np.all(np.isinf(widths))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.floats(0.05, 1.0), st.floats(1e-3, 10.0), st.integers(0, 2**31))
def test_one_trajectory_moves_the_weighted_clipped_sum_by_at_most_the_clip(n, w, clip, seed):
    """The SSP release's sensitivity: whatever the row and the C weight, one trajectory's
    contribution to the clipped weighted sum has L2 norm <= clip (the Gaussian mechanism's
    calibration assumes it)."""
    from gpope.core.ssp import c_block_scale
    from gpope.core.untuned.release import _sum_kernel

    row = np.random.default_rng(seed).standard_normal((1, 2 * n * n + n)) * 10.0 ** (seed % 7 - 3)
    out = _sum_kernel(clip, c_block_scale(n, w))(np.zeros(1), row)[0]
    assert np.linalg.norm(out) <= clip * (1.0 + 1e-12)


def test_c_weight_puts_its_inverse_on_the_released_c_noise_only():
    """release_noisy_statistics with c_noise_scale s: empirical noise std sigma*clip on A and b,
    s*sigma*clip on C (closed form), and the release records s for its post-processing."""
    from gpope.core.ssp import release_noisy_statistics

    n, sigma, clip, s = 3, 2.0, 0.5, 1.0 / 0.3
    noisy = release_noisy_statistics(np.zeros((4000, 2 * n * n + n)), n=n, m=10, sigma=sigma,
                                     clip=clip, rng=np.random.default_rng(0), c_noise_scale=s)
    ab, c = noisy.sums[:, : n * n + n], noisy.sums[:, n * n + n:]
    assert abs(ab.std() / (sigma * clip) - 1.0) < 0.02
    assert abs(c.std() / (sigma * clip * s) - 1.0) < 0.02
    assert noisy.c_noise_scale == s


def test_the_default_releases_c_at_the_inverse_of_its_weight(tabular):
    spec, _, vec = tabular
    st_ = UntunedSettings(second_moment_weight=0.25)
    sig = plan_untuned(m=len(vec), epsilon=10.0, delta=1e-5, settings=st_)
    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1, settings=st_,
                               rng=np.random.default_rng(3))
    assert rel.noisy.c_noise_scale == 4.0
    with pytest.raises(GpopeError, match="second_moment_weight"):
        UntunedSettings(second_moment_weight=1.5)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.floats(1e-4, 1e2), st.integers(0, 2**31))
def test_ridge_solve_is_the_closed_form_on_the_kept_features(n, lam, seed):
    from gpope.core.untuned.release import _ridge_solve

    rng = np.random.default_rng(seed)
    A, b = rng.standard_normal((n, n)), rng.standard_normal(n)
    keep = rng.random(n) < 0.7
    theta = _ridge_solve(A, b, keep, lam)
    Ak = A[np.ix_(keep, keep)]
    expect = np.linalg.solve(Ak.T @ Ak + lam * np.eye(int(keep.sum())), Ak.T @ b[keep])
    np.testing.assert_allclose(theta[keep], expect, rtol=1e-6, atol=1e-9)
    assert np.all(theta[~keep] == 0.0)


def test_an_unidentified_release_is_the_ridge_solve_with_unbounded_intervals(tabular):
    """Where the identification test fails the default releases the ridge solve of its own SSP
    sums (post-processing) and every interval stays unbounded (valid or unbounded)."""
    from gpope.core.ssp import noise_norm_bound, supported_features
    from gpope.core.untuned.release import _ridge_solve

    spec, _, vec = tabular
    st_ = UntunedSettings()
    sig = plan_untuned(m=len(vec), epsilon=0.05, delta=1e-5, settings=st_)
    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1, settings=st_,
                               rng=np.random.default_rng(5))
    assert rel.interval.unidentified
    assert np.all(np.isinf(rel.interval.lower)) and np.all(np.isinf(rel.interval.upper))
    A, b, C = rel.noisy.pooled()
    std = rel.noisy.pooled_noise_std()
    keep = supported_features(C, noise_std=std * rel.noisy.c_noise_scale)
    big = np.abs(A) > st_.sparse_z * std
    if big.mean() < st_.sparse_fraction:  # sparse A~: support from A_jj, solve without the noise
        keep |= np.diag(A) > st_.sparse_z * std  # the threshold the solve keeps entries by
        A = np.where(big, A, 0.0)
    lam = st_.unidentified_ridge * noise_norm_bound(int(keep.sum()), std) ** 2
    np.testing.assert_allclose(rel.theta, _ridge_solve(A, b, keep, lam))
    dense = UntunedSettings(sparse_fraction=0.0)  # never sparse: the plain ridge of A~
    rel = release_untuned_rows(vec, spec, sigmas=sig, moments_share=0.1, settings=dense,
                               rng=np.random.default_rng(5))
    A, b, C = rel.noisy.pooled()
    keep = supported_features(C, noise_std=std * rel.noisy.c_noise_scale)
    lam = st_.unidentified_ridge * noise_norm_bound(int(keep.sum()), std) ** 2
    np.testing.assert_allclose(rel.theta, _ridge_solve(A, b, keep, lam))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.floats(1e-3, 10.0), st.integers(0, 2**31),
       st.sampled_from([0.0, np.inf, -np.inf, np.nan]))
def test_one_trajectory_moves_the_residual_release_by_at_most_its_clips(n, c_r, seed, poison):
    """The refinement's sensitivity: whatever the row (non-finite entries included) and the
    public theta^, one trajectory adds at most ``c_r`` in L2 to the residual sum and at most
    ``c_r^2`` to the moment sum (the multipliers of the plan assume both), and one count to one
    bin of each clip histogram (sensitivity 1 under add/remove)."""
    from gpope.core.mechanisms.quantile import LogGrid
    from gpope.core.ssp import residuals
    from gpope.core.untuned.release import _histogram_kernel, _residual_kernel

    rng = np.random.default_rng(seed)
    row = rng.standard_normal((1, 2 * n * n + n)) * 10.0 ** (seed % 9 - 4)
    if poison != 0.0:
        row[0, rng.integers(row.shape[1])] = poison
    theta = rng.standard_normal(n) * 10.0 ** (seed % 5 - 2)
    out = _residual_kernel(theta, n, c_r)(np.zeros(1), row)[0]
    assert np.all(np.isfinite(out))
    assert np.linalg.norm(out[:n]) <= c_r * (1.0 + 1e-12)
    assert np.linalg.norm(out[n:]) <= c_r * c_r * (1.0 + 1e-12)
    edges = LogGrid(lo=1e-3, hi=1e3, bins_per_decade=4).edges()
    for transform in (lambda r: r, lambda r: residuals(r, theta, n)):
        counts = _histogram_kernel(edges, transform)(np.zeros(1), row)[0]
        assert counts.sum() == 1.0 and np.count_nonzero(counts) == 1

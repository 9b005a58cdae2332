"""The tuning-free default (gpope.core.untuned) against independent oracles: closed-form LSTD,
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
from gpope.core.untuned import (
    UntunedSettings,
    plan_untuned,
    release_untuned_rows,
    statistics_norm_bound,
    untuned_dp_event,
    upper_quantile,
    value_range,
)
from gpope.errors import ConfigError, GpopeError


def _data(name: str, m: int, seed: int):
    from gpope.core.ssp import statistics_vectors
    from gpope.shell.pipeline.stats import statistics_of_transitions

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
    assert 2 / sig.quantile**2 + 1 / sig.statistics**2 + 1 / sig.residual**2 == \
        pytest.approx(1 / sig.total**2, rel=1e-12)
    assert sig.quantile == pytest.approx(sig.total / np.sqrt(s.quantile_share))
    whole = PLDAccountant().compose(untuned_dp_event(sig, 0.1)).get_epsilon(1e-5)
    assert 0.97 <= whole <= 1.0 + 1e-3
    half = plan_untuned(m=20_000, epsilon=1.0, delta=1e-5, settings=s, accountant="pld", share=0.5)
    assert half.total == pytest.approx(sig.total * np.sqrt(2.0))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.0, 1e3), min_size=1, max_size=200), st.floats(0.5, 0.999))
def test_upper_quantile_without_noise_is_an_upper_bound_of_the_true_quantile(xs, q):
    from gpope.core.private_quantile import LogGrid

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
    from gpope.core.untuned import second_order_widths

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

"""SSP mechanism and parametric-bootstrap intervals (gpope.core.ssp, gpope.core.intervals)."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant
from scipy.stats import chi2

from gpope.core import ssp
from gpope.core.accounting import RDP_ORDERS
from gpope.core.envs import chain as chain_env
from gpope.core.intervals import (
    SAMPLING_SD_RATIO,
    anchored_interval,
    bootstrap_interval,
    separated_from_singular,
    separation,
    split_interval,
)
from gpope.core.metrics import mspbe, relative_mspbe
from gpope.core.statistics import statistics_from_transitions
from gpope.errors import ConfigError, DataError


def _chain_vectors(m: int, seed: int) -> tuple[np.ndarray, int]:
    cfg = chain_env.ChainConfig(n_states=6, max_steps=50)
    tr = chain_env.generate(m, np.random.default_rng(seed), cfg)
    st = statistics_from_transitions(tr, chain_env.feature_map(cfg), np.ones(tr.n_transitions),
                                     gamma=cfg.gamma, length_scale=50.0, representation="dense")
    r = st.to_rows()
    return ssp.statistics_vectors(r["A"], r["b"], r["C"]), cfg.n_states


def test_clip_bounds_every_row_and_keeps_small_ones():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 7)) * rng.uniform(0.01, 10, size=(50, 1))
    v[3, 2] = np.nan
    v[4, 1] = np.inf
    out = ssp.clip_statistics(v, 1.5)
    norms = np.linalg.norm(out, axis=1)
    assert np.all(np.isfinite(out)) and np.all(norms <= 1.5 * (1 + 1e-12))
    small = np.linalg.norm(np.nan_to_num(v, posinf=0.0), axis=1) <= 1.5
    small[[3, 4]] = False
    np.testing.assert_array_equal(out[small], v[small])


def test_groups_are_deterministic_keyed_and_balanced():
    idx = np.arange(100_000)
    g1 = ssp.assign_groups(idx, 12345, 10)
    assert np.array_equal(g1, ssp.assign_groups(idx, 12345, 10))
    assert not np.array_equal(g1, ssp.assign_groups(idx, 54321, 10))
    counts = np.bincount(g1, minlength=10)
    # multinomial(1e5, 1/10): sd ~ 95 per cell
    assert np.all(np.abs(counts - 10_000) < 600)


def test_group_sums_equal_total_sum_of_clipped_rows():
    v, n = _chain_vectors(300, 1)
    clipped = ssp.clip_statistics(v, 0.05)
    sums = ssp.clipped_group_sums([(np.arange(300), v)], n=n, clip=0.05, key=7, groups=4)
    np.testing.assert_allclose(sums.sum(axis=0), clipped.sum(axis=0), rtol=1e-12, atol=1e-14)


def test_noise_has_the_calibrated_standard_deviation():
    sigma, clip, draws = 3.0, 0.2, 4000
    rng = np.random.default_rng(2)
    sums = np.zeros((5, 2 * 3 * 3 + 3))
    samples = np.stack([ssp.release_noisy_statistics(sums, n=3, m=10, sigma=sigma, clip=clip,
                                                     rng=rng).sums for _ in range(draws)])
    sd = samples.std(axis=0, ddof=1)
    # each entry: 4000 draws, relative sd of the sample sd ~ 1/sqrt(2*4000) = 1.1 %
    assert np.all(np.abs(sd / (sigma * clip) - 1) < 0.05)
    assert abs(samples.std() / (sigma * clip) - 1) < 0.005
    assert abs(samples.mean()) < 4 * sigma * clip / np.sqrt(samples.size)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_ssp_sigma_is_certified_by_dp_accounting(epsilon):
    delta = 1e-6
    sigma = ssp.ssp_sigma(m=1000, epsilon=epsilon, delta=delta, accountant="rdp")
    acc = RdpAccountant(orders=RDP_ORDERS, neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc.compose(ssp.ssp_dp_event(sigma))
    assert acc.get_epsilon(delta) <= epsilon * 1.001
    acc2 = RdpAccountant(orders=RDP_ORDERS, neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc2.compose(ssp.ssp_dp_event(sigma * 0.97))
    assert acc2.get_epsilon(delta) > epsilon  # not needlessly large
    # the analytic Gaussian mechanism (Balle and Wang 2018) certifies a sigma at most this one
    pld = ssp.ssp_sigma(m=1000, epsilon=epsilon, delta=delta, accountant="pld")
    assert pld <= sigma * 1.01


def test_solver_without_noise_is_the_exact_lstd_fixed_point():
    cfg = chain_env.ChainConfig()
    A, b, C = chain_env.population_statistics(cfg, "transition", 200.0)
    m = 50_000
    theta, lam = ssp.solve_ssp(A * m, b * m, C=C * m, noise_std=0.0)
    assert lam == 0.0
    exact = chain_env.exact_values(cfg)
    np.testing.assert_allclose(theta[:-1], exact[:-1], rtol=1e-9, atol=1e-12)
    assert theta[-1] == 0.0  # the absorbing state is never visited: left out of the solve


def test_adassp_regularises_only_near_singular_noisy_matrices():
    rng = np.random.default_rng(3)
    A = np.diag([100.0, 50.0, 20.0])
    b = np.array([1.0, 2.0, 3.0])
    theta, lam = ssp.solve_ssp(A, b, noise_std=0.1)
    assert lam == 0.0 and np.allclose(theta, np.linalg.solve(A, b))
    A2 = np.diag([100.0, 50.0, 0.01]) + 0.0 * rng.normal(size=(3, 3))
    theta2, lam2 = ssp.solve_ssp(A2, b, noise_std=1.0)
    tau = ssp.noise_norm_bound(3, 1.0)
    assert lam2 == pytest.approx(tau**2 - 0.01**2)
    expected = np.linalg.solve(A2.T @ A2 + lam2 * np.eye(3), A2.T @ b)  # ridge normal equations
    np.testing.assert_allclose(theta2, expected, rtol=1e-10)


def test_private_mspbe_without_noise_equals_the_exact_mspbe():
    v, n = _chain_vectors(400, 4)
    clipped = ssp.clip_statistics(v, 10.0)  # no row clipped
    noisy = ssp.release_noisy_statistics(clipped.sum(axis=0, keepdims=True), n=n, m=400, sigma=0.0,
                                         clip=10.0, rng=np.random.default_rng(0))
    A, b, C = ssp.split_vector(clipped.mean(axis=0), n)
    keep = np.diag(C) > 0
    theta = np.linspace(0.1, 0.9, n) * keep
    val, rel = ssp.private_mspbe(theta, noisy)
    sub = np.ix_(keep, keep)
    assert val == pytest.approx(mspbe(theta[keep], A[sub], b[keep], C[sub]), rel=1e-8)
    assert rel == pytest.approx(relative_mspbe(theta[keep], A[sub], b[keep], C[sub]), rel=1e-8)


def test_bootstrap_interval_is_zero_width_without_noise_and_ordered():
    v, n = _chain_vectors(200, 5)
    one = ssp.clip_statistics(v, 10.0).sum(axis=0, keepdims=True)
    noisy = ssp.release_noisy_statistics(one, n=n, m=200, sigma=0.0, clip=10.0,
                                         rng=np.random.default_rng(0))
    _theta, iv = bootstrap_interval(noisy, None, lambda th: th[:3], rng=np.random.default_rng(1),
                                    regularize=False, draws=50)
    np.testing.assert_allclose(iv.se, 0.0, atol=1e-12)
    np.testing.assert_allclose(iv.lower, iv.value, atol=1e-12)
    noisy2 = ssp.release_noisy_statistics(one, n=n, m=200, sigma=1.0, clip=0.01,
                                          rng=np.random.default_rng(1))
    _, iv2 = bootstrap_interval(noisy2, None, lambda th: th[:3], rng=np.random.default_rng(2),
                                level=0.9, regularize=False, draws=200)
    assert np.all(iv2.lower < iv2.lower_bound) and np.all(iv2.lower_bound <= iv2.value)
    assert np.all(iv2.value < iv2.upper) and iv2.df == 199
    wide = anchored_interval(iv2.value + 0.1, iv2)
    assert np.all(wide.lower <= iv2.lower + 1e-15) and np.all(wide.upper >= iv2.upper - 1e-15)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_replace_one_release_is_calibrated_for_sensitivity_two_clip(epsilon):
    # Uniform-sampling runs are replace-one: one replaced patient moves the sums by 2 clip.
    # Oracle: dp-accounting's PLD of the Gaussian mechanism (std sigma, sensitivity 2).
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    delta = 1e-6
    sigma = ssp.ssp_sigma(m=100, epsilon=epsilon, delta=delta, relation="replace_one")
    oracle = pld_mod.from_gaussian_mechanism(
        standard_deviation=sigma, sensitivity=2.0, value_discretization_interval=1e-4,
    ).get_epsilon_for_delta(delta)
    assert oracle <= epsilon * (1 + 1e-3) and oracle == pytest.approx(epsilon, rel=0.02)
    spent = ssp.ssp_epsilon(m=100, sigma=sigma, delta=delta, relation="replace_one")
    assert spent == pytest.approx(oracle, rel=0.02) and spent <= epsilon * (1 + 1e-9)
    # the stored event, under REPLACE_ONE, gives dp-accounting's RDP epsilon of that release
    acc = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(ssp.ssp_dp_event(sigma, "replace_one"))
    rdp = ssp.ssp_epsilon(m=100, sigma=sigma, delta=delta, accountant="rdp",
                          relation="replace_one")
    assert acc.get_epsilon(delta) == pytest.approx(rdp, rel=0.05)
    with pytest.raises(ConfigError):
        ssp.ssp_sigma(m=100, epsilon=1.0, delta=delta, relation="replace")


def _linear_population(m: int, rng: np.random.Generator, noise: float) -> np.ndarray:
    """(m, 2n^2+n) statistics rows with known means A* (well conditioned), b* and C* = I, n = 3:
    the population fixed point is A*^-1 b* exactly (closed form)."""
    n = 3
    A = np.tile(_A_STAR.reshape(1, -1), (m, 1)) + noise * rng.standard_normal((m, n * n))
    b = np.tile(_B_STAR, (m, 1)) + noise * rng.standard_normal((m, n))
    return ssp.statistics_vectors(A, b, np.tile(np.eye(n).reshape(1, -1), (m, 1)))


_A_STAR = np.array([[0.9, 0.1, 0.0], [-0.2, 0.7, 0.1], [0.0, -0.1, 0.5]])
_B_STAR = np.array([0.3, -0.2, 0.4])


@pytest.mark.parametrize("noise,sigma", [(0.5, 0.05), (0.02, 3.0)])
def test_bootstrap_interval_covers_the_population_fixed_point(noise, sigma):
    """Closed-form case over many fresh samples and noise draws: the nominal 90% interval of the
    whole method (release at sigma, moments at the same sigma, bootstrap) covers A*^-1 b* in
    0.85-0.96 of 150 trials, both when sampling dominates (first case: without the moments
    release the coverage collapses, which the test checks too) and when privacy noise does."""
    truth = np.linalg.solve(_A_STAR, _B_STAR)
    m, clip, n = 300, 4.0, 3
    hits, hits_no_moments = [], []
    for t in range(150):
        rng = np.random.default_rng([11, t])
        vec = _linear_population(m, rng, noise)
        noisy = ssp.release_noisy_statistics(ssp.clip_statistics(vec, clip).sum(0, keepdims=True),
                                             n=n, m=m, sigma=sigma, clip=clip, rng=rng)
        theta = np.linalg.solve(*noisy.pooled()[:2])
        public = ssp.clip_statistics(_linear_population(200, rng, noise), clip)  # a public sample
        bound = float(np.quantile(np.linalg.norm(ssp.residuals(public, theta, n), axis=1), 0.99))
        mom = ssp.release_moments(ssp.clipped_moment_sum(vec, theta, n=n, clip=clip, bound=bound),
                                  n=n, theta=theta, sigma=sigma, bound=bound, rng=rng)
        for moments, out in ((mom, hits), (None, hits_no_moments)):
            _, iv = bootstrap_interval(noisy, moments, lambda th: th, rng=rng, level=0.9,
                                       draws=100, regularize=False)
            # identified (default test on): the coverage measured is the bootstrap's own
            assert not iv.unidentified and np.all(np.isfinite(iv.upper))
            out.append((iv.lower <= truth) & (truth <= iv.upper))
    assert 0.85 <= np.mean(hits) <= 0.97
    if noise > 0.1:
        assert np.mean(hits_no_moments) < 0.7


def test_two_releases_compose_to_the_budgeted_gaussian():
    sigma = 3.0
    s1, s2 = ssp.split_sigma(sigma, 0.1)
    assert 1 / s1**2 + 1 / s2**2 == pytest.approx(1 / sigma**2, rel=1e-12)
    eps = []
    for event in (ssp.ssp_release_event(sigma, 0.1), dp_accounting.GaussianDpEvent(sigma)):
        acc = RdpAccountant(RDP_ORDERS)
        acc.compose(event)
        eps.append(acc.get_epsilon(1e-6))
    assert eps[0] == pytest.approx(eps[1], rel=1e-9)


def test_moment_vectors_have_the_frobenius_norm_and_invert():
    rng = np.random.default_rng(3)
    r = rng.normal(size=(20, 4))
    mv = ssp.moment_vectors(r)
    np.testing.assert_allclose(np.linalg.norm(mv, axis=1), (r**2).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(ssp.moments_matrix(mv.sum(0), 4), r.T @ r, rtol=1e-12, atol=1e-12)
    v, n = _chain_vectors(100, 6)
    theta = rng.normal(size=n)
    worst = ssp.residual_bound(theta, 0.05)
    res = ssp.residuals(ssp.clip_statistics(v, 0.05), theta, n)
    assert np.linalg.norm(res, axis=1).max() <= worst * (1 + 1e-12)




def test_quantities_on_a_feature_below_the_support_threshold_get_unbounded_intervals():
    """The HIV demo's failure in small: a feature the data hardly visits (C_22 * m below the
    noise threshold) is left out of the solve (theta_2 = 0); its interval used to be [0, 0]
    (zero width, missing theta*_2 = A*^-1 b* [2] != 0). Now every quantity that depends on it is
    unbounded and the others stay finite."""
    m, clip, n = 300, 4.0, 3
    rng = np.random.default_rng(3)
    vec = _linear_population(m, rng, 0.05)
    A, b, C = ssp.split_vector(vec, n)
    C[:, 2, 2] = 1e-3  # sum over m = 0.3, below SUPPORT_Z * noise std = 4 * 0.2
    vec = ssp.statistics_vectors(A, b, C)
    noisy = ssp.release_noisy_statistics(ssp.clip_statistics(vec, clip).sum(0, keepdims=True),
                                         n=n, m=m, sigma=0.05, clip=clip, rng=rng)
    assert list(ssp.supported_features(noisy.pooled()[2], noise_std=noisy.pooled_noise_std())) == [
        True, True, False]
    truth = np.linalg.solve(_A_STAR, _B_STAR)
    assert abs(truth[2]) > 0.5
    refs = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    theta, iv = bootstrap_interval(noisy, None, lambda th: np.concatenate([refs @ th, th]),
                                   rng=np.random.default_rng(4), draws=100, regularize=False)
    assert theta[2] == 0.0 and not iv.unidentified  # unbounded by the support rule only
    unbounded = ~np.isfinite(iv.upper)
    assert list(unbounded) == [False, True, False, False, True]
    assert np.all(iv.lower[unbounded] == -np.inf) and np.all(iv.lower_bound[unbounded] == -np.inf)
    assert np.all(np.isfinite(iv.lower[~unbounded])) and np.all(iv.lower <= iv.value)


def test_singularity_test_is_exact_for_a_singular_matrix_and_rejects_a_regular_one():
    """separated_from_singular: for a SINGULAR A (rank k - 1) plus iid N(0, s^2) noise it rejects
    "singular" in at most 1 - level of the draws (exact: ||E v|| ~ s chi_k for the null vector v);
    for a matrix far from singular it rejects in (nearly) every draw."""
    rng = np.random.default_rng(8)
    k, s, level, draws = 4, 0.5, 0.9, 1000
    Q1, Q2 = (np.linalg.qr(rng.normal(size=(k, k)))[0] for _ in range(2))
    singular = (Q1 * np.array([6.0, 3.0, 2.0, 0.0])) @ Q2.T
    regular = (Q1 * np.array([6.0, 5.0, 5.0, 4.0])) @ Q2.T
    rej = [separated_from_singular(singular + s * rng.standard_normal((k, k)), s, level=level,
                                   sampling_ratio=0.0)  # the data set's own A: exact
           for _ in range(draws)]
    # binomial(1000, <= 0.1): sd <= 0.0095 (conservative: s_min <= ||E v||)
    assert np.mean(rej) <= 0.1 + 3 * 0.0095
    assert all(separated_from_singular(regular + s * rng.standard_normal((k, k)), s, level=level,
                                       sampling_ratio=0.0) for _ in range(200))
    assert separated_from_singular(regular, 0.0) and not separated_from_singular(singular * 0, 0.0)
    with pytest.raises(ConfigError):
        separated_from_singular(np.ones((2, 3)), 1.0)


def test_interval_is_unbounded_where_the_release_cannot_exclude_a_singular_population():
    """HIV's failure in small (m = 2000, epsilon 10: the bootstrap replayed the noise around a
    noisy A that the noise had made better conditioned than the near-singular population, 0.885
    at nominal 0.95): with a singular population A the old interval (identification=False)
    undercovers the fixed point of the population's consistent system, the new one is unbounded
    whenever the noisy A is within the noise of singular and covers at least at the nominal
    level; on a well-conditioned population the two are the same finite interval."""
    n, level = 3, 0.9
    Q1, Q2 = (np.linalg.qr(np.random.default_rng(s).normal(size=(n, n)))[0] for s in (0, 1))
    A = (Q1 * np.array([5.0, 2.0, 0.0])) @ Q2.T
    truth = np.linalg.pinv(A) @ (A @ np.array([0.5, -1.0, 0.8]))  # a fixed point of A theta = b
    tot = ssp.statistics_vectors(A[None], (A @ truth)[None], (10 * np.eye(n))[None])
    hits = {True: [], False: []}
    for t in range(40):
        noisy = ssp.release_noisy_statistics(tot, n=n, m=100, sigma=1.0, clip=0.5,
                                             rng=np.random.default_rng([5, t]))
        for ident in (True, False):
            _, iv = bootstrap_interval(noisy, None, lambda th: th, rng=np.random.default_rng([6, t]),
                                       level=level, draws=30, regularize=False, identification=ident)
            hits[ident].append((iv.lower <= truth) & (truth <= iv.upper))
    assert np.mean(hits[True]) >= level and np.mean(hits[True]) > np.mean(hits[False])
    good = ssp.statistics_vectors(_A_STAR[None] * 300, (_A_STAR @ _B_STAR)[None] * 300,
                                  np.eye(3)[None] * 300)
    noisy = ssp.release_noisy_statistics(good, n=3, m=300, sigma=1.0, clip=1.0,
                                         rng=np.random.default_rng(9))
    on, off = (bootstrap_interval(noisy, None, lambda th: th, rng=np.random.default_rng(10),
                                  draws=50, regularize=False, identification=i)[1] for i in (True, False))
    assert np.all(np.isfinite(on.upper)) and np.array_equal(on.lower, off.lower)


def test_identification_is_the_default_and_says_why_through_anchor_and_split():
    """The default bootstrap interval (identification on) of a release whose noisy A is within
    the noise of singular: every quantity unbounded, ``unidentified`` set and the separation
    (s_min(A~) / the test's threshold) <= 1, carried by the gpope hull (anchored_interval) and
    the value/theta split; ``identification=False`` gives finite intervals on the same release;
    a well-identified release keeps finite intervals with ``unidentified`` False."""
    n = 3
    Q1, Q2 = (np.linalg.qr(np.random.default_rng(s).normal(size=(n, n)))[0] for s in (0, 1))
    A = (Q1 * np.array([5.0, 2.0, 0.0])) @ Q2.T
    tot = ssp.statistics_vectors(A[None], (A @ np.ones(n))[None], (10 * np.eye(n))[None])
    noisy = ssp.release_noisy_statistics(tot, n=n, m=100, sigma=1.0, clip=0.5,
                                         rng=np.random.default_rng(2))
    A_noisy, std = noisy.pooled()[0], noisy.pooled_noise_std()
    sep = separation(A_noisy, std)
    assert sep <= 1.0 and not separated_from_singular(A_noisy, std)
    assert sep == pytest.approx(np.linalg.svd(A_noisy, compute_uv=False)[-1]
                                / (std * np.sqrt((1 + SAMPLING_SD_RATIO**2)
                                                 * chi2.ppf(0.95, n))), rel=1e-12)
    _, iv = bootstrap_interval(noisy, None, lambda th: np.concatenate([th[:1] + th[1:2], th]),
                               rng=np.random.default_rng(3), draws=30, regularize=False)
    assert iv.unidentified and iv.separation == pytest.approx(sep, rel=1e-12)
    assert np.all(iv.lower == -np.inf) and np.all(iv.upper == np.inf)
    d = iv.to_dict()
    assert d["unidentified"] is True and d["separation"] == pytest.approx(sep)
    hull = anchored_interval(iv.value + 1.0, iv)
    head, rest = split_interval(hull, 1)
    assert all(x.unidentified and x.separation == iv.separation for x in (hull, head, rest))
    _, off = bootstrap_interval(noisy, None, lambda th: th, rng=np.random.default_rng(3), draws=30,
                                regularize=False, identification=False)
    assert not off.unidentified and np.all(np.isfinite(off.upper))
    good = ssp.statistics_vectors(_A_STAR[None] * 300, (_A_STAR @ _B_STAR)[None] * 300,
                                  np.eye(3)[None] * 300)
    noisy = ssp.release_noisy_statistics(good, n=3, m=300, sigma=1.0, clip=1.0,
                                         rng=np.random.default_rng(9))
    _, ok = bootstrap_interval(noisy, None, lambda th: th, rng=np.random.default_rng(10), draws=30,
                               regularize=False)
    assert not ok.unidentified and ok.separation > 1.0 and np.all(np.isfinite(ok.upper))
    assert separation(np.zeros((0, 0)), 1.0) == np.inf and separation(np.eye(2), 0.0) == np.inf


def test_vector_features_inverts_the_statistics_layout_and_rejects_other_widths():
    for n in (1, 2, 9, 40):
        assert ssp.vector_features(2 * n * n + n) == n
    for width in (0, 2, 4, 170, 172):
        with pytest.raises(DataError, match="2n\\^2\\+n"):
            ssp.vector_features(width)


def test_clipped_moment_sum_with_counts_equals_the_sum_over_the_repeated_rows():
    # oracle: the multiset written out row by row
    rng = np.random.default_rng(3)
    n = 3
    rows = rng.normal(size=(7, 2 * n * n + n)) * 2.0
    counts = np.array([0, 1, 3, 0, 2, 5, 1])
    theta = rng.normal(size=n)
    repeated = np.repeat(rows, counts, axis=0)
    want = ssp.clipped_moment_sum(repeated, theta, n=n, clip=1.5, bound=0.7)
    got = ssp.clipped_moment_sum(rows, theta, n=n, clip=1.5, bound=0.7, counts=counts)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

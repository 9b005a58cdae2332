"""The guard's rule for noisy diagnostics and the private diagnostic's bootstrap interval."""

from __future__ import annotations

import math

import numpy as np

from gpope.core.guard import Diagnostic, private_relative_mspbe, utility_guard
from gpope.core.intervals import separated_from_singular
from gpope.core.metrics import relative_mspbe
from gpope.core.ssp import release_noisy_statistics, statistics_vectors


def test_a_noisy_diagnostic_counts_only_when_conclusive():
    # last session's demo: public 0.59, private point 1.18 with a wide interval -> ok (public decides)
    demo = utility_guard({"public": 0.593, "private": Diagnostic(1.18, 0.3, 2.4)})
    assert demo.verdict == "ok" and not demo.no_better_than_zero
    assert demo.relative_mspbe == {"public": 0.593, "private": 1.18}
    # the private data clearly contradict the public cohort -> loud
    clash = utility_guard({"public": 0.593, "private": Diagnostic(1.6, 1.2, 2.0)})
    assert clash.no_better_than_zero and "private relative MSPBE 1.6, 90% interval" in clash.message
    # only a private diagnostic: ok / no better / inconclusive by its interval
    assert utility_guard({"private": Diagnostic(0.3, 0.1, 0.6)}).verdict == "ok"
    assert utility_guard({"private": Diagnostic(1.5, 1.1, 1.9)}).verdict == "no_better_than_zero"
    unsure = utility_guard({"private": Diagnostic(0.9, 0.2, 1.7)})
    assert unsure.verdict == "unknown" and not unsure.no_better_than_zero
    assert "never the values' accuracy" in unsure.message  # what the guard does not check
    assert "cannot tell" in unsure.message
    assert utility_guard({"private": Diagnostic(math.inf, -math.inf, math.inf)}).verdict == "unknown"
    # exact (public) values keep their plain rule
    assert utility_guard({"public": 1.0, "private": Diagnostic(0.1, 0.0, 0.2)}).no_better_than_zero


def test_bootstrap_interval_covers_the_noise_free_relative_mspbe():
    # Oracle: the relative MSPBE from the exact (noise-free) statistics of the same trajectories.
    rng = np.random.default_rng(0)
    m, n = 400, 4
    A = rng.normal(size=(m, n, n)) * 0.1 + np.eye(n) * 0.5
    b = rng.normal(size=(m, n)) * 0.2 + 0.3
    C = np.einsum("mij,mkj->mik", A, A) * 0.5 + np.eye(n) * 0.2
    truth_theta = np.linalg.solve(A.mean(0), b.mean(0))
    theta = truth_theta * 0.7  # a mediocre release: relative MSPBE well inside (0, 1)
    exact = float(relative_mspbe(theta, A.mean(0), b.mean(0), C.mean(0)))
    assert 0.05 < exact < 0.9
    rows = statistics_vectors(A, b, C)
    clip = float(np.linalg.norm(rows, axis=1).max())
    sums = rows.sum(axis=0, keepdims=True)
    covered = 0
    trials = 40
    for _ in range(trials):
        noisy = release_noisy_statistics(sums, n=n, m=m, sigma=3.0, clip=clip, rng=rng)
        d = private_relative_mspbe(theta, noisy, rng, draws=100, level=0.9)
        covered += d.lower <= exact <= d.upper
    assert covered >= 0.75 * trials  # nominal 90%


def test_a_release_that_does_not_identify_the_fixed_point_gives_an_inconclusive_diagnostic():
    # The same kind of statistics, but noise far above the summed A: the private diagnostic is
    # [0, inf] and the guard ignores it (it must not say "no better than zero" from noise alone).
    rng = np.random.default_rng(1)
    m, n = 400, 4
    A = rng.normal(size=(m, n, n)) * 0.1 + np.eye(n) * 0.5
    b = rng.normal(size=(m, n)) * 0.2 + 0.3
    C = np.einsum("mij,mkj->mik", A, A) * 0.5 + np.eye(n) * 2.0  # C's diagonal stays supported
    rows = statistics_vectors(A, b, C)
    clip = float(np.linalg.norm(rows, axis=1).max())
    sums = rows.sum(axis=0, keepdims=True)
    theta = np.linalg.solve(A.mean(0), b.mean(0))
    std = 110.0  # noise std on each summed entry: above s_min(summed A) / 2.8, below C_jj / 4
    loud = release_noisy_statistics(sums, n=n, m=m, sigma=std / clip, clip=clip, rng=rng)
    A_sum, _, C_sum = loud.pooled()
    assert np.all(np.diag(C_sum) > 4 * std)  # every feature supported: the A test decides
    assert not separated_from_singular(A_sum, std, level=0.9)
    d = private_relative_mspbe(theta, loud, rng, draws=50, level=0.9)
    assert d.lower == 0.0 and d.upper == math.inf
    assert utility_guard({"private": d}).verdict == "unknown"
    # without the gate the bootstrap gives a finite interval from the same release
    raw = private_relative_mspbe(theta, loud, rng, draws=50, level=0.9, identification=False)
    assert math.isfinite(raw.upper)
    # an identified release keeps its bootstrap interval
    quiet = release_noisy_statistics(sums, n=n, m=m, sigma=3.0, clip=clip, rng=rng)
    assert math.isfinite(private_relative_mspbe(theta, quiet, rng, draws=50, level=0.9).upper)

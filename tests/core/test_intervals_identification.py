"""The identification test under a singular POPULATION A: sampling variability of the data's
summed A (up to twice the privacy noise sd per entry) does not push its size above nominal."""

from __future__ import annotations

import numpy as np
import pytest

from gpope.core.intervals import SAMPLING_SD_RATIO, separated_from_singular

TRIALS, K, SIGMA, LEVEL = 2000, 4, 1.0, 0.95


def _rejection_rate(ratio: float, sampling_ratio: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    u = np.linalg.qr(rng.standard_normal((K, K)))[0]
    population = u @ np.diag([40.0, 20.0, 10.0, 0.0]) @ u.T  # singular, rank K - 1
    rejected = 0
    for _ in range(TRIALS):
        data = population + ratio * SIGMA * rng.standard_normal((K, K))  # sampling deviation
        noisy = data + SIGMA * rng.standard_normal((K, K))  # the release's privacy noise
        rejected += separated_from_singular(noisy, SIGMA, level=LEVEL,
                                            sampling_ratio=sampling_ratio)
    return rejected / TRIALS


@pytest.mark.parametrize("ratio", [0.0, 1.0, 2.0])
def test_size_stays_nominal_with_sampling_sd_up_to_twice_the_privacy_sd(ratio):
    slack = 3 * np.sqrt(0.05 * 0.95 / TRIALS)
    assert _rejection_rate(ratio, SAMPLING_SD_RATIO, seed=11) <= (1 - LEVEL) + slack


def test_without_the_sampling_term_the_size_is_exceeded():
    """The privacy-only threshold (ratio 0) over-rejects at sampling sd twice the noise."""
    assert _rejection_rate(2.0, 0.0, seed=12) > 2 * (1 - LEVEL)

"""The released number of patients m~: one Gaussian count, so that add/remove-one adjacency holds.

Under add/remove-one two neighbouring data sets differ by one patient, so the exact m tells them
apart: a run charged under add/remove may publish m only as a noisy count.

* **the release**: ``m~ = max(1, m + Z)``, ``Z`` drawn from the discrete Gaussian
  ``N_Z(0, sigma^2)`` with the OS CSPRNG (exact sampling, integer output); L2 sensitivity 1; the
  clamp at 1 is post-processing.
* **the charge**: ``sigma`` is calibrated with RDP to ``privacy.count_epsilon`` at
  ``privacy.count_delta`` (:func:`count_sigma`) and the ledger stores ``GaussianDpEvent(sigma)``;
  the discrete Gaussian's Rényi divergences are at most the continuous one's (Canonne, Kamath
  and Steinke 2020, Prop. 5), so every RDP bound of that event holds.
* **the margin**: the discrete Gaussian is ``sigma``-subgaussian (CKS 2020, Cor. 9):
  ``P(|m~ - m| > t) <= 2 exp(-t^2 / (2 sigma^2))`` (:func:`count_margin`). A mean ``S / m~``
  with ``|S / m| <= B`` is off by at most ``B t / m~`` (:func:`mean_margin`): an interval that
  adds this and spends ``beta`` of its failure probability on it covers the mean over m.

A count is released once per (dataset, statistics version) and reused by every later run on
that version as public post-processing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpope.core.validation import check_number

__all__ = ["NoisyCount", "count_event", "count_margin", "count_sigma", "dividing_count",
           "mean_margin", "release_count"]


@dataclass(frozen=True, kw_only=True)
class NoisyCount:
    """One released count: m~ (>= 1), the std of its discrete Gaussian noise, its charge
    (add/remove-one, RDP-calibrated), and ``private`` False when drawn from a fixed seed."""

    m_noisy: int
    sigma: float
    epsilon: float
    delta: float
    private: bool = True

    def __post_init__(self) -> None:
        check_number("NoisyCount", "m_noisy", self.m_noisy, ge=1)
        check_number("NoisyCount", "sigma", self.sigma, gt=0.0)

    def margin(self, failure: float) -> int:
        """:func:`count_margin` of this count at failure probability ``failure``."""
        return count_margin(self.sigma, failure)


def count_sigma(epsilon: float, delta: float) -> float:
    """The std of the count's Gaussian noise (sensitivity 1) that the RDP accountant certifies
    at (``epsilon``, ``delta``) under add/remove-one adjacency."""
    from gpope.core.ssp import ssp_sigma

    check_number("count", "epsilon", epsilon, gt=0.0)
    check_number("count", "delta", delta, gt=0.0, lt=1.0)
    return float(ssp_sigma(m=max(2, math.ceil(2.0 / delta)), epsilon=epsilon, delta=delta,
                           accountant="rdp"))


def count_event(sigma: float):
    """The dp-accounting event of one count with noise std ``sigma`` (sensitivity 1)."""
    import dp_accounting

    return dp_accounting.GaussianDpEvent(float(sigma))


def count_margin(sigma: float, failure: float) -> int:
    """The integer ``t`` with ``P(|m~ - m| > t) <= failure`` (the noise is ``sigma``-subgaussian:
    ``t = sigma sqrt(2 ln(2 / failure))``; m~ and m are integers, so its floor; the clamp at 1
    only moves m~ toward m >= 1)."""
    check_number("count_margin", "failure", failure, gt=0.0, lt=1.0)
    return math.floor(float(sigma) * math.sqrt(2.0 * math.log(2.0 / failure)))


def mean_margin(bound: float, *, margin: int, m_noisy: int) -> float:
    """How far ``S / m~`` can be from ``S / m`` when ``|S / m| <= bound`` and
    ``|m~ - m| <= margin``: ``bound * margin / m~``."""
    return float(bound) * float(margin) / float(m_noisy)


def release_count(m: int, *, epsilon: float, delta: float,
                  rng: np.random.Generator | None = None) -> NoisyCount:
    """Release ``m~ = max(1, m + Z)`` (module docstring). Without ``rng`` the noise is the exact
    discrete Gaussian from the OS CSPRNG; with ``rng`` (a fixed seed) it is ``rng``'s normal
    draw rounded to an integer and the count is marked NOT private."""
    from gpope.core.mechanisms.secure_noise import discrete_gaussian

    check_number("release_count", "m", m, ge=0)
    sigma = count_sigma(epsilon, delta)
    if rng is None:
        z = int(discrete_gaussian(1, sigma)[0])
    else:
        z = int(np.rint(rng.normal(0.0, sigma)))
    return NoisyCount(m_noisy=max(1, int(m) + z), sigma=sigma, epsilon=float(epsilon),
                      delta=float(delta), private=rng is None)


def dividing_count(rows: int, count: int | None, margin: int, what: str) -> tuple[int, int]:
    """(the count a release's means divide by, the fewest patients its widths assume): the
    released ``count`` m~ (None: the ``rows`` held, where m is public) and m~ - ``margin``, at
    least 2.

    Raises:
        ConfigError: fewer than 2 rows, or a released count below 2 (``what`` names the release).
    """
    from gpope.errors import ConfigError

    if rows < 2:
        raise ConfigError(f"The {what} needs at least 2 patients; got {rows}.")
    m = rows if count is None else int(count)
    if m < 2:
        raise ConfigError(
            f"The released number of patients is {m}: too few for the {what}; raise "
            "privacy.count_epsilon or evaluate a larger dataset.")
    return m, max(m - int(margin), 2)

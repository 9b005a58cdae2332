"""Secure noise (opt-in, like Opacus' ``secure_mode``): OS-CSPRNG discrete Gaussian on a public grid.

Two weaknesses of textbook floating-point Gaussian noise are closed here:

* **Predictable generator.** numpy's PCG64 is not a cryptographic generator: its 128-bit state
  can be reconstructed from enough outputs, and a user seed makes the noise reproducible. Secure
  noise takes every random bit from the operating system's CSPRNG (``os.urandom``:
  ``getrandom(2)`` on Linux) and has no seed at all: :func:`check_no_seed` refuses one.
* **Floating-point leakage** (Mironov 2012 for Laplace; Jin et al. 2022 for Gaussian samplers):
  ``value + noise`` in doubles has a data-dependent set of reachable bit patterns, so the low
  bits of a release can reveal the value. Secure noise works on a public grid ``gamma``: the
  clipped sum is rounded to the grid (:func:`round_to_grid`), the noise is ``gamma * Z`` with
  ``Z`` an integer drawn from the discrete Gaussian ``N_Z(0, (std / gamma)^2)`` (Canonne, Kamath,
  Steinke 2020, "The Discrete Gaussian for Differential Privacy", Algorithm 3: rejection from
  a discrete Laplace), so every released coordinate is an integer multiple of ``gamma``:
  no low-order bits carry information.

Privacy. The discrete Gaussian's Renyi divergences are at most the continuous Gaussian's with the
same variance (CKS 2020, Prop. 5 and Thm. 14 for vectors), so an RDP accountant of the continuous
mechanism applies with the sensitivity increased by the rounding: ``||round(S) - round(S')||_2
<= ||S - S'||_2 + gamma sqrt(d)``. :func:`rounding_inflation` gives the factor by which the
noise std is raised to cover it (``h -> h + gamma sqrt(d)``), so the noise multiplier the
accountant certified keeps its meaning. Which accountants this covers: RDP of a single release,
and RDP of sampling without replacement (Wang, Balle, Kasiviswanathan 2019, Thm. 27: a bound
for any base mechanism, increasing in its RDP). NOT covered: the PLD accountant (its privacy
curve is computed for the continuous Gaussian) and dp-accounting's Poisson-subsampled RDP (the
exact computation of Mironov, Talwar, Zhang 2019 for the continuous Gaussian). ``gpope
evaluate --secure-noise`` is therefore refused unless the run's accountant is ``rdp`` and its
GPOPE steps sample uniformly (or the estimator is ``ssp``, one unsampled release):
:data:`gpope.core.evaluation.settings.SECURE_NOISE_REFUSAL`.

Implementation error (a bound, not an estimate). The integer sampler is vectorised: the discrete
Laplace magnitude is ``floor(-t log U)`` of a 53-bit uniform ``U`` with a random sign, accepted
with probability ``exp(-(|Y| - s^2/t)^2 / (2 s^2))`` (CKS Alg. 3, ``t = floor(s) + 1``,
``s = scale``). The outputs are exact integers; their law is not exactly ``N_Z(0, s^2)``:

* ``U`` takes the values ``k 2^-53``, so each threshold ``P(mag >= j) = exp(-j / t)`` is realised
  with an absolute error below ``2^-53`` (plus the relative ``2^-52`` of ``log``), and magnitudes
  above ``53 t ln 2 ~ 36.7 t`` are never drawn. Over the ``~37 t`` thresholds that carry mass
  the magnitude's law is off by at most ``~37 t 2^-52`` in total variation.
* The acceptance test compares a double ``exp(...)`` (relative error ``<= 2^-52 (1 + a)`` for
  the exponent ``a``) with a 53-bit uniform (absolute ``2^-53``): at most ``~2^-51`` in total
  variation of the accepted draw.
* Normalising by the acceptance rate (at least ~0.6) gives, per draw, a total-variation distance
  to the exact discrete Gaussian of at most ``tau(s) = (37 s + 40) 2^-51 / 0.6 < (s + 2) 2^-45``.
  Pointwise, the relative error at the mode is of order ``s 2^-52`` (the mode's mass is
  ``~1/(s sqrt(2 pi))`` against an absolute error ``~2^-52``) and grows into the tails like
  ``s 2^-52 exp(y^2 / (2 s^2))``: it is not the flat ``2^-50`` once claimed here.

Consequence for the guarantee. A release of ``k`` draws whose exact mechanism is
``(epsilon, delta)``-DP is ``(epsilon, delta + (1 + e^epsilon) k tau(s))``-DP as implemented.
With ``scale = std / gamma`` large (a fine grid) the added term can matter: choose ``gamma`` so
that ``(1 + e^epsilon) N d tau(std / gamma)`` is far below delta (e.g. ``std / gamma <= 2^10``
keeps it below ``2^-34 N d (1 + e^epsilon)``). An exact big-rational sampler (CKS Alg. 1-2)
removes the term at a cost of orders of magnitude in Python. Expected cost here: about 1.3
candidate draws per sample.
"""

from __future__ import annotations

import math
import os

import numpy as np

from gpope.errors import ConfigError

__all__ = [
    "check_no_seed",
    "discrete_gaussian",
    "os_uniform",
    "round_to_grid",
    "rounding_inflation",
    "secure_gaussian_noise",
]


def check_no_seed(seed: object, where: str) -> None:
    """Raise ConfigError when a seed (or a seeded generator) is given with secure noise."""
    if seed is not None:
        raise ConfigError(
            f"{where}: secure noise draws every random bit from the operating system's CSPRNG "
            f"and refuses a user seed (got {type(seed).__name__} {seed!r}). Drop the seed, or "
            "turn secure noise off for a reproducible (NOT private) run."
        )


def os_uniform(size: int) -> np.ndarray:
    """(size,) uniforms in (0, 1] with 53 random bits each, from ``os.urandom``."""
    raw = np.frombuffer(os.urandom(8 * int(size)), dtype=np.uint64)
    return ((raw >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53


def discrete_gaussian(size: int, scale: float) -> np.ndarray:
    """(size,) int64 draws of the discrete Gaussian N_Z(0, scale^2), OS-CSPRNG randomness.

    Args:
        size: number of draws.
        scale: sigma > 0 of the discrete Gaussian, in grid units (CKS 2020, Alg. 3).
    """
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ConfigError(f"discrete_gaussian needs a finite scale > 0. Got {scale!r} instead.")
    if scale > 2.0**50:
        raise ConfigError(
            f"discrete_gaussian scale {scale:.3g} exceeds 2^50 grid units: use a coarser grid."
        )
    out = np.empty(int(size), dtype=np.int64)
    t = math.floor(scale) + 1.0
    s2 = scale * scale
    filled = 0
    while filled < size:
        k = int((size - filled) * 1.4) + 16
        u = os_uniform(3 * k).reshape(3, k)
        mag = np.floor(-t * np.log(u[0]))  # geometric with P(mag = j) ~ exp(-j / t)
        neg = u[1] < 0.5
        ok = ~(neg & (mag == 0))  # one zero, not two (discrete Laplace)
        y = np.where(neg, -mag, mag)
        accept = ok & (u[2] <= np.exp(-((np.abs(y) - s2 / t) ** 2) / (2.0 * s2)))
        take = y[accept][: size - filled]
        out[filled : filled + len(take)] = take.astype(np.int64)
        filled += len(take)
    return out


def round_to_grid(x: np.ndarray, grid: float) -> np.ndarray:
    """``x`` rounded to the nearest integer multiple of the public ``grid`` (ties to even)."""
    return np.rint(np.asarray(x, dtype=np.float64) / grid) * grid


def rounding_inflation(clip: float, grid: float, dim: int) -> float:
    """Factor ``(clip + grid sqrt(dim)) / clip`` by which secure noise raises its std.

    Rounding a sum of clipped vectors to the grid can move it by up to ``grid sqrt(dim) / 2``,
    so two neighbouring rounded sums differ by at most the sensitivity plus ``grid sqrt(dim)``;
    raising the noise std by this factor keeps the certified noise multiplier valid.
    """
    return (clip + grid * math.sqrt(dim)) / clip


def secure_gaussian_noise(shape: tuple[int, ...], std: float, grid: float) -> np.ndarray:
    """Float array of ``shape``: ``grid * N_Z(0, (std / grid)^2)``, every entry on the grid."""
    n = int(np.prod(shape)) if len(shape) else 1
    return (discrete_gaussian(n, std / grid).astype(np.float64) * grid).reshape(shape)

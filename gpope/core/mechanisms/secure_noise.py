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

Exact sampling (no implementation term in delta). Every probability in the sampler is an
exact rational and every random choice an exact uniform integer from the OS CSPRNG (62-bit words,
rejection for a uniform below any bound): CKS Algorithm 1 for Bernoulli(exp(-gamma)), Algorithm
2 for the discrete Laplace, Algorithm 3 for the discrete Gaussian, vectorised in int64 and
continued in Python integers wherever a fraction would not fit. The output's law is therefore
exactly ``N_Z(0, s^2)`` with ``s^2 = a / b`` the rational just above ``(std / gamma)^2``
(:func:`discrete_gaussian`), and the release is exactly the mechanism the RDP accountant
certifies: nothing is added to delta. (A floating-point sampler, e.g. a 53-bit uniform against a
double ``exp``, misses each probability by up to ``2^-53``; over ``k`` draws that adds
``(1 + e^epsilon) k (s + 2) 2^-45`` to delta, far above delta for a GPOPE run at a fine grid.)

Each released value is a sum of clipped terms rounded to the grid plus ONE discrete Gaussian
draw per coordinate; no sum of discrete Gaussians stands in for a discrete Gaussian (that would
need CKS's Theorem on sums and its extra delta). The default grid is ``std * 2^-12``
(:func:`default_grid`): the noise is about 4096 grid units, fast to sample exactly, and rounding
raises the noise std by ``1 + (std / clip) sqrt(d) 2^-12``. Expected cost: about 4 s per
million draws at the default grid.
"""

from __future__ import annotations

import math
import os
import secrets

import numpy as np

from gpope.errors import ConfigError

__all__ = [
    "DEFAULT_SCALE",
    "check_no_seed",
    "default_grid",
    "discrete_gaussian",
    "os_uniform",
    "round_to_grid",
    "rounding_inflation",
    "secure_gaussian_noise",
    "secure_perturb",
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


_MAX_INT = 2**62  # exact uniform integers below this bound come from one 64-bit word
DEFAULT_SCALE = 2**12  # default noise std in grid units (default_grid)


def _random_below(bound: np.ndarray) -> np.ndarray:
    """Exact uniform integers in ``[0, bound)`` elementwise (1 <= bound < 2^62), OS CSPRNG.

    62-bit words are drawn and a word is rejected when it lies in the incomplete last block of
    ``bound`` values (``word >= (2^62 // bound) * bound``), so every value has probability
    exactly ``1 / bound``.
    """
    bound = np.asarray(bound, dtype=np.int64)
    out = np.empty(bound.shape, dtype=np.int64)
    todo = np.arange(bound.size)
    flat = bound.reshape(-1)
    res = out.reshape(-1)
    while todo.size:
        words = (np.frombuffer(os.urandom(8 * todo.size), dtype=np.uint64)
                 >> np.uint64(2)).astype(np.int64)
        b = flat[todo]
        ok = words < (_MAX_INT // b) * b
        res[todo[ok]] = words[ok] % b[ok]
        todo = todo[~ok]
    return out


def _bernoulli_exp_fraction(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(exp(-num / den)) for ``0 <= num <= den`` (CKS 2020, Algorithm 1).

    ``K = 1``; while Bernoulli(num / (den K)) succeeds, ``K += 1``; the result is ``K`` odd.
    Each Bernoulli(num / (den K)) is ``uniform integer below den K < num``: integers only.
    Vectorised in rounds over the draws still running; a draw whose ``den K`` would reach 2^62
    continues in Python integers (:func:`_fraction_exact`).
    """
    n = len(num)
    result = np.zeros(n, dtype=bool)
    k = np.ones(n, dtype=np.int64)
    active = np.arange(n)
    while active.size:
        big = k[active] >= (_MAX_INT - 1) // den[active]
        for i in active[big]:
            result[i] = _fraction_exact(int(num[i]), int(den[i]), int(k[i]))
        active = active[~big]
        success = _random_below(den[active] * k[active]) < num[active]
        done = active[~success]
        result[done] = (k[done] % 2) == 1
        active = active[success]
        k[active] += 1
    return result


def _bernoulli_exp(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """Exact Bernoulli(exp(-num / den)) for any ``num >= 0`` (CKS 2020, Algorithm 1, gamma > 1):
    ``floor(num / den)`` Bernoulli(exp(-1)) that must all succeed, then the fractional part."""
    whole, rest = np.divmod(num, den)
    alive = np.ones(len(num), dtype=bool)
    for r in range(1, int(whole.max(initial=0)) + 1):
        idx = np.flatnonzero(alive & (whole >= r))
        if idx.size:
            ones = np.ones(idx.size, dtype=np.int64)
            alive[idx] = _bernoulli_exp_fraction(ones, ones)
    idx = np.flatnonzero(alive)
    alive[idx] = _bernoulli_exp_fraction(rest[idx], den[idx])
    return alive


def _fraction_exact(num: int, den: int, k: int = 1) -> bool:
    """:func:`_bernoulli_exp_fraction` for one draw in Python integers, from round ``k``."""
    while secrets.randbelow(den * k) < num:
        k += 1
    return k % 2 == 1


def _bernoulli_exp_exact(num: int, den: int) -> bool:
    """:func:`_bernoulli_exp` for one draw in Python integers (fractions beyond int64)."""
    whole, rest = divmod(num, den)
    return all(_fraction_exact(1, 1) for _ in range(whole)) and _fraction_exact(rest, den)


def _discrete_laplace(size: int, t: int) -> np.ndarray:
    """(size,) exact draws of the discrete Laplace, P(y) proportional to exp(-|y| / t)
    (CKS 2020, Algorithm 2 with s = 1): ``U`` uniform below ``t`` kept with probability
    ``exp(-U / t)``, plus ``t`` times a geometric count of Bernoulli(exp(-1)) successes,
    with a random sign (a negative zero is rejected)."""
    out = np.empty(0, dtype=np.int64)
    while len(out) < size:
        k = int((size - len(out)) * 2.2) + 16
        u = _random_below(np.full(k, t, dtype=np.int64))
        u = u[_bernoulli_exp_fraction(u, np.full(k, t, dtype=np.int64))]
        v = np.zeros(len(u), dtype=np.int64)
        going = np.arange(len(u))
        while going.size:
            ones = np.ones(going.size, dtype=np.int64)
            going = going[_bernoulli_exp_fraction(ones, ones)]
            v[going] += 1
        x = u + t * v
        negative = _random_below(np.full(len(x), 2, dtype=np.int64)) == 1
        keep = ~(negative & (x == 0))
        out = np.concatenate((out, np.where(negative, -x, x)[keep]))
    return out[:size]


def discrete_gaussian(size: int, scale: float) -> np.ndarray:
    """(size,) int64 draws of the discrete Gaussian N_Z(0, s^2), ``s^2 = a / b >= scale^2``, exactly.

    CKS 2020, Algorithm 3 in integer arithmetic only: the variance parameter is the rational
    ``a / b`` (``b`` a power of two, ``a = ceil(scale^2 b)``: at most ``2^-12`` relative above
    ``scale^2``, which only adds noise); candidates ``Y`` come from the discrete Laplace of
    parameter ``t = floor(s) + 1`` and are accepted with probability
    ``exp(-(|Y| b t - a)^2 / (2 a b t^2))``. Every random choice is an exact uniform integer
    from the OS CSPRNG, so the output's law is exactly the discrete Gaussian: no floating point
    touches a probability. Candidates whose acceptance fraction does not fit in int64 (far
    tails, or ``scale`` above about 20 000) take an exact Python-integer path, much slower:
    keep ``scale`` moderate (:func:`default_grid` gives about :data:`DEFAULT_SCALE`).

    Args:
        size: number of draws.
        scale: sigma > 0 of the discrete Gaussian, in grid units.
    """
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ConfigError(f"discrete_gaussian needs a finite scale > 0. Got {scale!r} instead.")
    if scale > 2.0**30:
        raise ConfigError(
            f"discrete_gaussian scale {scale:.3g} exceeds 2^30 grid units: use a coarser grid "
            "(noise_grid of at least the noise std times 2^-12 keeps it fast)."
        )
    # variance a / b >= scale^2 with b a power of two: relative excess below 2^-12
    b = 2 ** max(0, math.ceil(math.log2(2.0**12 / (float(scale) * float(scale)))))
    a = math.ceil(float(scale) * float(scale) * b)
    t = math.isqrt(a // b) + 1  # floor(sqrt(a / b)) + 1
    den = 2 * a * b * t * t
    out = np.empty(0, dtype=np.int64)
    while len(out) < size:
        k = int((size - len(out)) * 1.5) + 16
        y = _discrete_laplace(k, t)
        accept = np.zeros(k, dtype=bool)
        fast = np.abs(y) < (3 * 10**9 + a) // (b * t) if den < _MAX_INT // 2 else np.zeros(k, bool)
        if fast.any():
            gap = np.abs(y[fast]) * (b * t) - a  # |gap| < 3e9: gap^2 fits in int64
            accept[fast] = _bernoulli_exp(gap * gap, np.full(len(gap), den, dtype=np.int64))
        for i in np.flatnonzero(~fast):
            accept[i] = _bernoulli_exp_exact((abs(int(y[i])) * b * t - a) ** 2, den)
        out = np.concatenate((out, y[accept]))
    return out[:size]


def default_grid(std: float, clip: float) -> float:
    """The public grid when none is set: ``std * 2^-12`` (``clip * 2^-20`` without noise).

    Noise of std ``std`` is then ``about 2^12`` grid units, so the exact sampler runs in int64,
    and rounding raises the std by the factor ``1 + (std / clip) sqrt(d) 2^-12``
    (:func:`rounding_inflation`): about 1 % at ``sigma sqrt(d) = 40``.
    """
    return float(std) * 2.0**-12 if std > 0 else float(clip) * 2.0**-20


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


def secure_perturb(values: np.ndarray, std: float, sensitivity: float, *,
                   grid: float | None = None, dim: int | None = None) -> tuple[np.ndarray, float]:
    """(``values`` rounded to the public ``grid`` plus OS-CSPRNG discrete Gaussian noise, the
    noise's std). The std is ``std`` raised by :func:`rounding_inflation` for a released vector of
    ``dim`` coordinates (default: all of ``values``), so a release whose L2 sensitivity is
    ``sensitivity`` keeps the noise multiplier ``std / sensitivity`` it was accounted at. The grid
    defaults to :func:`default_grid`; with ``std`` 0 the values are only rounded."""
    v = np.asarray(values, dtype=np.float64)
    g = default_grid(float(std), float(sensitivity)) if grid is None else float(grid)
    d = max(v.size, 1) if dim is None else int(dim)
    std_out = float(std) * rounding_inflation(float(sensitivity), g, d)
    v = round_to_grid(v, g)
    return (v + secure_gaussian_noise(v.shape, std_out, g) if std_out > 0 else v), std_out

"""Secure noise (opt-in, like Opacus' ``secure_mode``): OS-CSPRNG discrete Gaussian on a public grid.

It closes two weaknesses of textbook floating-point Gaussian noise: a predictable or seeded
generator (every random bit comes from ``os.urandom``, and :func:`check_no_seed` refuses a seed),
and floating-point leakage (Mironov 2012; Jin et al. 2022: the low bits of ``value + noise`` in
doubles can reveal the value). The clipped sum is rounded to a public grid ``gamma`` and the
noise is ``gamma * Z``, ``Z`` from the discrete Gaussian ``N_Z(0, (std / gamma)^2)`` (Canonne,
Kamath, Steinke 2020, Algorithm 3), so every released coordinate is a multiple of ``gamma``.

Privacy. The discrete Gaussian's Renyi divergences are at most the continuous Gaussian's with the
same variance (CKS 2020, Prop. 5 and Thm. 14), so an RDP accountant of the continuous mechanism
applies with the sensitivity raised by the rounding (``h -> h + gamma sqrt(d)``,
:func:`rounding_inflation`): RDP of a single release and of sampling without replacement (Wang,
Balle, Kasiviswanathan 2019, Thm. 27, any base mechanism). NOT covered: PLD and dp-accounting's
Poisson-subsampled RDP (both computed for the continuous Gaussian), hence
:data:`gpope.core.evaluation.settings.SECURE_NOISE_REFUSAL`.

Exact sampling (no implementation term in delta): every probability is an exact rational and
every random choice an exact uniform integer (CKS Algorithms 1-3 in int64, continued in Python
integers where a fraction would not fit), so the law is exactly ``N_Z(0, s^2)``, ``s^2 = a / b``
the rational just above ``(std / gamma)^2``. Each released value gets ONE discrete Gaussian draw
per coordinate. The default grid is ``std * 2^-12`` (:func:`default_grid`).
"""

from __future__ import annotations

import math
import os
import secrets

import numpy as np

from gpope.errors import ConfigError

__all__ = ["DEFAULT_SCALE", "check_no_seed", "default_grid", "discrete_gaussian", "round_to_grid",
           "rounding_inflation", "secure_gaussian_noise", "secure_perturb"]


def check_no_seed(seed: object, where: str) -> None:
    """Raise ConfigError when a seed (or a seeded generator) is given with secure noise."""
    if seed is not None:
        raise ConfigError(
            f"{where}: secure noise draws every random bit from the operating system's CSPRNG "
            f"and refuses a user seed (got {type(seed).__name__} {seed!r}). Drop the seed, or "
            "turn secure noise off for a reproducible (NOT private) run."
        )


_MAX_INT = 2**62  # exact uniform integers below this bound come from one 64-bit word
DEFAULT_SCALE = 2**12  # default noise std in grid units (default_grid)


def _random_below(bound: np.ndarray) -> np.ndarray:
    """Exact uniform integers in ``[0, bound)`` elementwise (1 <= bound < 2^62), OS CSPRNG: 62-bit
    words in the incomplete last block of ``bound`` values are rejected."""
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
    """Exact Bernoulli(exp(-num / den)) for ``0 <= num <= den`` (CKS 2020, Algorithm 1): ``K = 1``;
    while Bernoulli(num / (den K)) succeeds, ``K += 1``; the result is ``K`` odd. Integers only; a
    draw whose ``den K`` would reach 2^62 continues in Python integers."""
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

    CKS 2020, Algorithm 3 in integer arithmetic only: ``b`` a power of two, ``a = ceil(scale^2 b)``
    (at most ``2^-12`` relative above ``scale^2``, which only adds noise); candidates ``Y`` from the
    discrete Laplace of parameter ``t = floor(s) + 1`` are accepted with probability
    ``exp(-(|Y| b t - a)^2 / (2 a b t^2))``. Candidates whose acceptance fraction does not fit in
    int64 take an exact, much slower Python-integer path: keep ``scale`` moderate (``scale`` in grid
    units; :func:`default_grid` gives about :data:`DEFAULT_SCALE`)."""
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
    """The public grid when none is set: ``std * 2^-12`` (``clip * 2^-20`` without noise): the
    noise is about 2^12 grid units, so the exact sampler runs in int64."""
    return float(std) * 2.0**-12 if std > 0 else float(clip) * 2.0**-20


def round_to_grid(x: np.ndarray, grid: float) -> np.ndarray:
    """``x`` rounded to the nearest integer multiple of the public ``grid`` (ties to even)."""
    return np.rint(np.asarray(x, dtype=np.float64) / grid) * grid


def rounding_inflation(clip: float, grid: float, dim: int) -> float:
    """Factor ``(clip + grid sqrt(dim)) / clip`` by which secure noise raises its std: rounding can
    move a sum by up to ``grid sqrt(dim) / 2``, so two neighbouring rounded sums differ by at most
    the sensitivity plus ``grid sqrt(dim)``; the certified noise multiplier keeps its meaning."""
    return (clip + grid * math.sqrt(dim)) / clip


def secure_gaussian_noise(shape: tuple[int, ...], std: float, grid: float) -> np.ndarray:
    """Float array of ``shape``: ``grid * N_Z(0, (std / grid)^2)``, every entry on the grid."""
    n = int(np.prod(shape)) if len(shape) else 1
    return (discrete_gaussian(n, std / grid).astype(np.float64) * grid).reshape(shape)


def secure_perturb(values: np.ndarray, std: float, sensitivity: float, *,
                   grid: float | None = None, dim: int | None = None) -> tuple[np.ndarray, float]:
    """(``values`` rounded to the public ``grid`` plus OS-CSPRNG discrete Gaussian noise, the
    noise's std). The std is ``std`` raised by :func:`rounding_inflation` for ``dim``
    coordinates (default: all of ``values``), so a release of L2 sensitivity ``sensitivity`` keeps
    the noise multiplier ``std / sensitivity`` it was accounted at; with ``std`` 0 the values are
    only rounded."""
    v = np.asarray(values, dtype=np.float64)
    g = default_grid(float(std), float(sensitivity)) if grid is None else float(grid)
    d = max(v.size, 1) if dim is None else int(dim)
    std_out = float(std) * rounding_inflation(float(sensitivity), g, d)
    v = round_to_grid(v, g)
    return (v + secure_gaussian_noise(v.shape, std_out, g) if std_out > 0 else v), std_out

"""Public entry points: epsilon for a noise multiplier, and the noise multiplier for an epsilon.

Both go through the same accountant (:mod:`.registry`: RDP, PLD with an RDP fallback, the
paper's formula, or any registered one), so a calibrated sigma is certified by exactly the
computation that later reports its epsilon: ``epsilon_spent(calibrate_sigma(e)) <= e`` always.

Calibrations are cached on disk (:mod:`.cache`); a cached sigma is re-certified by one
evaluation of the recorded accountant and grid before it is used.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Required, TypedDict, Unpack

from gpope.core.accounting._common import Accountant, Sampling, check_common
from gpope.core.accounting.cache import load_calibration, store_calibration
from gpope.core.accounting.pld import DEFAULT_PLD_GRID, PLDGrid
from gpope.core.accounting.rdp import RDP_ORDERS
from gpope.core.accounting.registry import (
    RunShape,
    accountant_choices,
    implementation,
    resolve_accountant,
)
from gpope.core.accounting.search import SIGMA_MAX, SIGMA_MIN
from gpope.core.validation import check_choice, check_number
from gpope.errors import ConfigError

__all__ = ["RDP_ORDERS", "SIGMA_MAX", "SIGMA_MIN", "Calibration", "calibrate", "calibrate_sigma",
           "epsilon_spent"]


class _RunArgs(TypedDict, total=False):
    m: Required[int]
    iterations: Required[int]
    delta: Required[float]
    accountant: Accountant
    sampling: Sampling
    batch_rate: float | None
    pld_grid: PLDGrid


class SpendArgs(_RunArgs, total=False):
    sigma: Required[float]


class TargetArgs(_RunArgs, total=False):

    epsilon: Required[float]


def _validate(
    owner: str, *, m: object, iterations: object, delta: object, accountant: object = "auto",
    sampling: object = "uniform", batch_rate: object = None,
    pld_grid: object = DEFAULT_PLD_GRID) -> tuple[str, RunShape]:
    """(the resolved accountant, the run's shape) of validated inputs."""
    m_, n_, d_, s_, q = check_common(
        owner, m=m, iterations=iterations, delta=delta, sampling=sampling, batch_rate=batch_rate
    )
    check_choice(owner, "accountant", accountant, accountant_choices())
    if not isinstance(pld_grid, PLDGrid):
        raise ConfigError(
            f"The 'pld_grid' parameter of {owner} must be a PLDGrid. Got {pld_grid!r} instead."
        )
    return resolve_accountant(accountant, s_), RunShape(m_, n_, d_, s_, q, pld_grid)  # type: ignore[arg-type]


def epsilon_spent(**run: Unpack[SpendArgs]) -> float:
    """Epsilon of a GPOPE run with noise multiplier ``sigma`` at the given ``delta``.

    Args (keyword only; :class:`SpendArgs`):
        m: number of trajectories (public); iterations: number of noisy steps ``N``.
        sigma: noise multiplier relative to the clip bound ``h`` (noise std ``h * sigma``).
        delta: target delta in (0, 1).
        accountant: ``"auto"`` (tightest rigorous for the sampling) or a registered one
            (:mod:`.registry`); ``"paper"`` is NOT a valid upper bound.
        sampling: ``"uniform"`` (one trajectory per step, replace-one, sensitivity ``2h``) or
            ``"poisson"`` (rate ``batch_rate``, add/remove, sensitivity ``h``).
        batch_rate: the Poisson rate ``q`` in (0, 1]; ``None`` for uniform sampling.
        pld_grid: how the PLD grid is refined (PLD only).

    Returns:
        The certified epsilon (``inf`` if no finite epsilon is certified).

    Raises:
        ConfigError: invalid inputs.
        AccountingError: unsupported accountant/sampling pair.
    """
    return _epsilon(**run)


def _epsilon(*, sigma: object, **run: Any) -> float:
    acc, shape = _validate("epsilon_spent", **run)
    return implementation(acc).epsilon(shape, check_number("epsilon_spent", "sigma", sigma, gt=0.0))


def calibrate_sigma(**run: Unpack[TargetArgs]) -> float:
    """The smallest noise multiplier (relative to the clip bound) that meets ``epsilon``.

    Arguments as in :func:`epsilon_spent`, with the target ``epsilon > 0`` instead of ``sigma``.

    Guarantee: ``epsilon_spent(..., sigma=calibrate_sigma(...)) <= epsilon`` with the same
    arguments (within about 0.2 % of the smallest such sigma for ``"rdp"``; for ``"pld"``
    certified at the grid :func:`epsilon_spent` uses). ``SIGMA_MIN`` is returned if it already
    meets the target.

    Raises:
        ConfigError: invalid inputs.
        AccountingError: unsupported accountant/sampling pair, or no sigma up to ``SIGMA_MAX``
            meets the target.
    """
    return _calibrated("calibrate_sigma", **run).sigma


@dataclass(frozen=True)
class Calibration:
    """A calibrated noise multiplier and how it is certified (:func:`calibrate`): the ``epsilon``
    :func:`epsilon_spent` reports for it (<= the target), the resolved accountant, the bound that
    ``certified_by`` it (``"rdp"`` also where ``"pld"`` was asked for and RDP was tighter or PLD
    could not certify, with the ``note`` saying why), the PLD grid ``interval`` that certifies it,
    and ``cached`` (read from the disk cache and re-certified)."""

    sigma: float
    epsilon: float
    accountant: str
    certified_by: str
    note: str = ""
    interval: float | None = None
    cached: bool = False


def calibrate(**run: Unpack[TargetArgs]) -> Calibration:
    """:func:`calibrate_sigma` with its certificate (which bound, and a note on RDP fallback)."""
    return _calibrated("calibrate", **run)


def _calibrated(owner: str, *, epsilon: object, **run: Any) -> Calibration:
    acc, shape = _validate(owner, **run)
    return _calibration(acc, shape, check_number(owner, "epsilon", epsilon, gt=0.0))


@functools.lru_cache(maxsize=256)
def _calibration(acc: str, run: RunShape, eps: float) -> Calibration:
    """Calibrate (or read the disk cache and re-certify); always ``epsilon <= eps``."""
    grid = run.pld_grid
    key = {"accountant": acc, "m": run.m, "iterations": run.iterations, "epsilon": eps,
           "delta": run.delta, "sampling": run.sampling, "batch_rate": run.batch_rate,
           "grid": [grid.initial_interval, grid.finest_interval, grid.refine_factor, grid.rtol,
                    grid.max_points, grid.max_step_points], "rdp_orders": len(RDP_ORDERS)}
    impl = implementation(acc)
    cached = load_calibration(key)
    if cached is not None and math.isfinite(cached) and cached > 0:
        cert = impl.certify(run, cached)
        if cert.epsilon <= eps:  # re-certified: a stale or tampered entry is never trusted
            return Calibration(sigma=cached, epsilon=cert.epsilon, accountant=acc,
                               certified_by=cert.certified_by, note=cert.note,
                               interval=cert.interval, cached=True)
    sigma = impl.calibrate(run, eps)
    cert = impl.certify(run, sigma)
    store_calibration(key, sigma)
    return Calibration(sigma=sigma, epsilon=cert.epsilon, accountant=acc,
                       certified_by=cert.certified_by, note=cert.note, interval=cert.interval)

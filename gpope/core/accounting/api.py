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

import dp_accounting

from gpope.core.accounting._common import (
    Accountant,
    Sampling,
    check_common,
    step_event,
)
from gpope.core.accounting.cache import load_calibration, store_calibration
from gpope.core.accounting.pld import DEFAULT_PLD_GRID, PLDGrid
from gpope.core.accounting.rdp import RDP_ORDERS, rdp_step
from gpope.core.accounting.registry import (
    RunShape,
    accountant_choices,
    accountant_names,
    implementation,
    resolve_accountant,
)
from gpope.core.accounting.search import SIGMA_MAX, SIGMA_MIN
from gpope.core.validation import check_choice, check_number
from gpope.errors import ConfigError

__all__ = [
    "RDP_ORDERS",
    "SIGMA_MAX",
    "SIGMA_MIN",
    "Calibration",
    "PrivacySpend",
    "SpendArgs",
    "TargetArgs",
    "calibrate",
    "calibrate_sigma",
    "epsilon_spent",
    "privacy_spend",
]

_rdp_step = rdp_step  # the per-step RDP curve, for callers composing it with other releases


@dataclass(frozen=True)
class PrivacySpend:
    """The privacy spent by one GPOPE run, as certified by ``accountant``.

    Attributes:
        epsilon, delta: the (epsilon, delta)-DP guarantee (for ``accountant="paper"``: the paper's
            formula, not a valid guarantee).
        accountant: the resolved accountant (a registered name, :mod:`.registry`).
        sampling: ``"uniform"`` or ``"poisson"``.
        sigma: noise multiplier relative to the clip bound.
        m: number of trajectories; iterations: number of noisy steps.
        batch_rate: Poisson rate, ``None`` for uniform sampling.
    """

    epsilon: float
    delta: float
    accountant: str
    sampling: str
    sigma: float
    m: int
    iterations: int
    batch_rate: float | None = None

    def __post_init__(self) -> None:
        owner = "PrivacySpend"
        check_number(owner, "epsilon", self.epsilon, ge=0.0)
        check_common(
            owner, m=self.m, iterations=self.iterations, delta=self.delta,
            sampling=self.sampling, batch_rate=self.batch_rate,
        )
        check_choice(owner, "accountant", self.accountant, accountant_names())
        check_number(owner, "sigma", self.sigma, gt=0.0)

    @property
    def dp_event(self) -> dp_accounting.DpEvent:
        """The composed dp-accounting event of the run (see ``gpope_dp_event``)."""
        step = step_event(
            m=self.m, sigma=self.sigma, sampling=self.sampling, batch_rate=self.batch_rate
        )
        return dp_accounting.SelfComposedDpEvent(event=step, count=self.iterations)


class _RunArgs(TypedDict, total=False):
    m: Required[int]
    iterations: Required[int]
    delta: Required[float]
    accountant: Accountant
    sampling: Sampling
    batch_rate: float | None
    pld_grid: PLDGrid


class SpendArgs(_RunArgs, total=False):
    """The arguments of :func:`epsilon_spent` and :func:`privacy_spend` (see
    :func:`epsilon_spent`)."""

    sigma: Required[float]


class TargetArgs(_RunArgs, total=False):
    """The arguments of :func:`calibrate_sigma` and :func:`calibrate` (see
    :func:`calibrate_sigma`)."""

    epsilon: Required[float]


def _validate(
    owner: str, *, m: object, iterations: object, delta: object, accountant: object = "auto",
    sampling: object = "uniform", batch_rate: object = None,
    pld_grid: object = DEFAULT_PLD_GRID,
) -> tuple[str, RunShape]:
    """(the resolved accountant, the run's shape) of validated inputs (the defaults of every
    public entry point)."""
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
        m: number of trajectories (public), ``>= 1``.
        iterations: number of noisy steps ``N``, ``>= 1``.
        sigma: noise multiplier relative to the clip bound ``h`` (noise std ``h * sigma``).
        delta: target delta in (0, 1).
        accountant: ``"auto"`` (the default: tightest rigorous for the sampling, see
            :func:`resolve_accountant`) or a registered accountant (:mod:`.registry`): ``"rdp"``,
            ``"pld"`` or ``"paper"`` (the paper's Lemma 1 used literally: NOT a valid upper bound,
            for reproducing the paper only).
        sampling: ``"uniform"`` (the default: one trajectory per step, replace-one adjacency, sensitivity
            ``2h``) or ``"poisson"`` (rate ``batch_rate``, add/remove adjacency, sensitivity ``h``).
        batch_rate: the Poisson rate ``q`` in (0, 1]; must be ``None`` (the default) for uniform
            sampling.
        pld_grid: how the PLD grid is refined (PLD only; default ``DEFAULT_PLD_GRID``).

    Returns:
        The certified epsilon (``inf`` if no finite epsilon is certified). ``"rdp"`` and
        ``"pld"`` are rigorous upper bounds; PLD reports the smallest value certified by the
        grids it evaluated.

    Raises:
        ConfigError: invalid inputs (house message form).
        AccountingError: unsupported accountant/sampling pair.
    """
    return _spend("epsilon_spent", **run).epsilon


def privacy_spend(**run: Unpack[SpendArgs]) -> PrivacySpend:
    """:func:`epsilon_spent` wrapped in a :class:`PrivacySpend` record (accountant resolved)."""
    return _spend("privacy_spend", **run)


def _spend(owner: str, *, sigma: object, **run: Any) -> PrivacySpend:
    acc, shape = _validate(owner, **run)
    sigma_ = check_number(owner, "sigma", sigma, gt=0.0)
    return PrivacySpend(
        epsilon=implementation(acc).epsilon(shape, sigma_), delta=shape.delta, accountant=acc,
        sampling=shape.sampling, sigma=sigma_, m=shape.m, iterations=shape.iterations,
        batch_rate=shape.batch_rate)


def calibrate_sigma(**run: Unpack[TargetArgs]) -> float:
    """The smallest noise multiplier (relative to the clip bound) that meets ``epsilon``.

    Arguments (keyword only) as in :func:`epsilon_spent`, with the target ``epsilon > 0``
    instead of ``sigma``.

    Guarantee: ``epsilon_spent(..., sigma=calibrate_sigma(...)) <= epsilon`` with the same
    arguments (the returned sigma is certified by the accountant; it is within about 0.2 % of
    the smallest such sigma for ``"rdp"``, exact up to rounding for ``"paper"``). For ``"pld"``
    the search runs on coarse grids first and refines near the answer; the result is certified at
    the grid :func:`epsilon_spent` uses for it. The search range is [``SIGMA_MIN``,
    ``SIGMA_MAX``]; ``SIGMA_MIN`` is returned if it already meets the target.

    Raises:
        ConfigError: invalid inputs (house message form).
        AccountingError: unsupported accountant/sampling pair, or no sigma up to ``SIGMA_MAX``
            meets the target.
    """
    return _calibrated("calibrate_sigma", **run).sigma


@dataclass(frozen=True)
class Calibration:
    """A calibrated noise multiplier and how it is certified (:func:`calibrate`).

    Attributes:
        sigma: the noise multiplier.
        epsilon: the epsilon :func:`epsilon_spent` reports for it (<= the target).
        accountant: the resolved accountant asked for (``"paper"``, ``"rdp"`` or ``"pld"``).
        certified_by: the bound that certifies ``epsilon``: ``"pld"``, ``"rdp"`` (also when
            ``"pld"`` was asked for and RDP was tighter or PLD could not certify) or ``"paper"``.
        note: why RDP stands in for PLD, or ``""``.
        interval: the PLD grid that certifies ``epsilon`` (None unless ``certified_by="pld"``).
        cached: True when read from the on-disk cache (and re-certified).
    """

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

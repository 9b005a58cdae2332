"""Public bounds on importance weights and rewards, enforced before statistics are computed.

An evaluation spec may fix (public configuration, never chosen on the private tables)
``importance_weight_bound`` W > 0, clamping every per-decision ratio to ``[0, W]`` (a propensity
of 1e-320 gives a ratio near 1e307), and ``reward_bounds`` (lo, hi), clamping every raw reward.

Clamping keeps every transition; :func:`clamp_to_public_bounds` counts the clamped values per
reason (a private diagnostic: noise-free functions of the data). A NaN ratio or reward becomes
0 (moved into the range), +-inf the nearest bound. Without a bound nothing is changed (the
statistics then reject non-finite inputs), and the solver's total clip still bounds every
trajectory's influence.
"""

from __future__ import annotations

import math

import numpy as np

from gpope.errors import ConfigError

__all__ = ["CLAMP_REASONS", "check_bounds", "clamp_to_public_bounds"]

#: Reasons a value can be clamped, as reported by the stats stage.
CLAMP_REASONS = ("importance_weight_above_bound", "reward_outside_bounds")


def check_bounds(
    owner: str, importance_weight_bound: object, reward_bounds: object
) -> tuple[float | None, tuple[float, float] | None]:
    """Validated ``(importance_weight_bound, reward_bounds)`` (house message form)."""
    w: float | None = None
    if importance_weight_bound is not None:
        if (isinstance(importance_weight_bound, bool)
                or not isinstance(importance_weight_bound, (int, float))
                or not math.isfinite(importance_weight_bound) or importance_weight_bound <= 0):
            raise ConfigError(
                f"The 'importance_weight_bound' parameter of {owner} must be a finite number > 0 "
                "(the public maximum of pi(a|s) / behavior_prob per decision). Got "
                f"{importance_weight_bound!r} instead."
            )
        w = float(importance_weight_bound)
    r: tuple[float, float] | None = None
    if reward_bounds is not None:
        ok = (isinstance(reward_bounds, (list, tuple)) and len(reward_bounds) == 2
              and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                      and math.isfinite(v) for v in reward_bounds)
              and reward_bounds[0] < reward_bounds[1])
        if not ok:
            raise ConfigError(
                f"The 'reward_bounds' parameter of {owner} must be a pair [low, high] of finite "
                f"numbers with low < high (the public range of a raw reward). Got "
                f"{reward_bounds!r}{_types(reward_bounds)} instead."
            )
        r = (float(reward_bounds[0]), float(reward_bounds[1]))  # type: ignore[index]
    return w, r


def check_return_bounds(owner: str, return_bounds: object,
                        reward_bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """Validated ``return_bounds``: a pair [low, high] of finite numbers with low <= 0 <= high and
    low < high (a record cut before any reward returns 0), set only beside ``reward_bounds``."""
    if return_bounds is None:
        return None
    ok = (isinstance(return_bounds, (list, tuple)) and len(return_bounds) == 2
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  for v in return_bounds)
          and return_bounds[0] <= 0.0 <= return_bounds[1] and return_bounds[0] < return_bounds[1])
    if not ok:
        raise ConfigError(
            f"The 'return_bounds' parameter of {owner} must be a pair [low, high] of finite numbers "
            "with low <= 0 <= high and low < high (the public range of one record's discounted "
            f"return; a record cut before any reward returns 0). Got {return_bounds!r}"
            f"{_types(return_bounds)} instead.")
    if reward_bounds is None:
        raise ConfigError(
            f"{owner} sets 'return_bounds' without 'reward_bounds': the policy value release "
            "needs both; add 'reward_bounds' (the public range of one reward) to the spec.")
    return float(return_bounds[0]), float(return_bounds[1])  # type: ignore[index]


def _types(values: object) -> str:
    """`` (types float, str)`` when some element of ``values`` is not a number, else ''."""
    if not isinstance(values, (list, tuple)) or all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return ""
    return f" (types {', '.join(type(v).__name__ for v in values)}; write numbers without quotes)"


def clamp_to_public_bounds(
    rho: np.ndarray, reward: np.ndarray, *, importance_weight_bound: float | None,
    reward_bounds: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """``(rho, reward, counts)``: the ratios and raw rewards clamped to the spec's public bounds
    (unchanged where a bound is None; finite where bounded) and ``counts[reason]``, the values
    changed for each of :data:`CLAMP_REASONS`."""
    rho = np.asarray(rho, dtype=np.float64)
    reward = np.asarray(reward, dtype=np.float64)
    counts = dict.fromkeys(CLAMP_REASONS, 0)
    if importance_weight_bound is not None:
        w = float(importance_weight_bound)
        bad = ~((rho >= 0.0) & (rho <= w))  # NaN fails both comparisons
        if bad.any():
            rho = np.where(np.isnan(rho), 0.0, np.clip(rho, 0.0, w))
            counts["importance_weight_above_bound"] = int(bad.sum())
    if reward_bounds is not None:
        lo, hi = reward_bounds
        bad = ~((reward >= lo) & (reward <= hi))
        if bad.any():
            reward = np.where(np.isnan(reward), min(max(0.0, lo), hi), np.clip(reward, lo, hi))
            counts["reward_outside_bounds"] = int(bad.sum())
    return rho, reward, counts

"""Feature maps phi: raw states (T, d) -> features (T, n) for linear value functions.

Every map is a small frozen dataclass whose parameters are public (feature ranges are part of the
configuration, never computed from private data). Each map serialises to a JSON-able dict with a
``"kind"`` key; :func:`feature_map_from_dict` inverts it.

Implementations:
    * :class:`TabularFeatures` -- one-hot over ``n_states`` integer states (state column 0).
    * :class:`FourierFeatures` -- the Fourier basis of Konidaris et al. (2011): for every integer
      coefficient vector c in {0..k}^d (optionally with at most ``max_coupling`` non-zero entries)
      phi_c(s) = cos(pi c . x), x = clip((s - low) / (high - low), 0, 1).
    * :class:`ConstantIdentityFeatures` -- [1, x] with x the clipped scaled state.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gpope.core.validation import check_int
from gpope.errors import ConfigError, DataError

MAX_FEATURES = 4096
"""Largest feature count of a Fourier basis: per-trajectory statistics hold 2 n^2 + n numbers."""

__all__ = [
    "ConstantIdentityFeatures",
    "FeatureMap",
    "FourierFeatures",
    "TabularFeatures",
    "feature_map_from_dict",
]


@runtime_checkable
class FeatureMap(Protocol):
    """A deterministic map from raw states to feature vectors.

    Attributes:
        n_features: n, the length of a feature vector.
    """

    n_features: int

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Map states (T, d) to features (T, n) float64."""
        ...

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable description with key ``"kind"``."""
        ...


def _as_states(owner: str, states: np.ndarray, d: int | None) -> np.ndarray:
    arr = np.asarray(states, dtype=np.float64)
    if arr.ndim == 1 and d == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or (d is not None and arr.shape[1] != d):
        want = f"(T, {d})" if d is not None else "(T, d)"
        raise DataError(f"{owner} expects states of shape {want}; got shape {arr.shape}.")
    return arr


def _bounds(owner: str, low: Sequence[float], high: Sequence[float]) -> tuple[tuple, tuple]:
    try:
        lo = tuple(float(v) for v in np.atleast_1d(np.asarray(low, dtype=np.float64)))
        hi = tuple(float(v) for v in np.atleast_1d(np.asarray(high, dtype=np.float64)))
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"The 'low'/'high' parameters of {owner} must be sequences of numbers. "
            f"Got {low!r} and {high!r} instead."
        ) from exc
    if len(lo) != len(hi) or len(lo) == 0:
        raise ConfigError(
            f"The 'low' and 'high' parameters of {owner} must have the same non-zero length "
            f"(one bound per state dimension). Got {len(lo)} and {len(hi)} instead."
        )
    if not all(np.isfinite(lo)) or not all(np.isfinite(hi)) or any(
        h <= lw for lw, h in zip(lo, hi, strict=True)
    ):
        raise ConfigError(
            f"The 'high' parameter of {owner} must be finite and > 'low' in every dimension. "
            f"Got low={lo!r}, high={hi!r} instead."
        )
    return lo, hi


def _scale(states: np.ndarray, low: tuple, high: tuple) -> np.ndarray:
    lo = np.asarray(low)
    hi = np.asarray(high)
    return np.clip((states - lo) / (hi - lo), 0.0, 1.0)


@dataclass(frozen=True)
class TabularFeatures:
    """One-hot features over ``n_states`` integer states held in state column 0.

    Attributes:
        n_states: number of states; states must be integers in 0..n_states-1.
    """

    n_states: int

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "n_states", check_int("TabularFeatures", "n_states", self.n_states, ge=1)
        )

    @property
    def n_features(self) -> int:
        """n = n_states."""
        return self.n_states

    def indices(self, states: np.ndarray) -> np.ndarray:
        """State indices (T,) int64 from states (T, d) (column 0); checks range and integrality."""
        arr = _as_states("TabularFeatures", states, None)
        col = arr[:, 0]
        idx = col.astype(np.int64)
        if len(col) and (
            np.any(idx != col) or idx.min() < 0 or idx.max() >= self.n_states
        ):
            raise DataError(
                f"TabularFeatures needs integer states in 0..{self.n_states - 1} in column 0; "
                "some states are not (their values are private data and are not quoted). Check "
                "n_states or the state encoding."
            )
        return idx

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """One-hot features (T, n_states) float64."""
        idx = self.indices(states)
        out = np.zeros((len(idx), self.n_states))
        out[np.arange(len(idx)), idx] = 1.0
        return out

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "tabular", "n_states": n}``."""
        return {"kind": "tabular", "n_states": self.n_states}


@dataclass(frozen=True)
class FourierFeatures:
    """Fourier basis of order k over a box [low, high] of public bounds.

    Coefficients are all c in {0..k}^d (lexicographic order, c = 0 first, giving the constant
    feature 1) with at most ``max_coupling`` non-zero entries when given. phi_c(s) = cos(pi c . x)
    with x the state scaled to [0, 1] and clipped, so every feature lies in [-1, 1].

    Attributes:
        order: k >= 0.
        low: (d,) lower state bounds.
        high: (d,) upper state bounds, > low.
        max_coupling: None (full basis, (k+1)^d features) or an int in 1..d.
    """

    order: int
    low: tuple[float, ...]
    high: tuple[float, ...]
    max_coupling: int | None = None
    _coefficients: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        order = check_int("FourierFeatures", "order", self.order, ge=0)
        low, high = _bounds("FourierFeatures", self.low, self.high)
        d = len(low)
        coupling = check_int(
            "FourierFeatures", "max_coupling", self.max_coupling, ge=1, le=d, allow_none=True
        )
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "max_coupling", coupling)
        count = sum(
            math.comb(d, j) * order**j for j in range(0, (d if coupling is None else coupling) + 1)
        )
        if count > MAX_FEATURES:
            raise ConfigError(
                f"FourierFeatures(order={order}, d={d}, max_coupling={coupling}) has {count} "
                f"features; at most {MAX_FEATURES} are supported (each trajectory's statistics hold "
                "2 n^2 numbers). Lower 'order' or set 'max_coupling'."
            )
        if coupling is None:
            coeffs = np.array(list(itertools.product(range(order + 1), repeat=d)), dtype=np.float64)
        else:  # only the coupled coefficients (never the (k+1)^d full grid), in the same order
            rows = [np.zeros(d)]
            for j in range(1, coupling + 1):
                for where in itertools.combinations(range(d), j):
                    for values in itertools.product(range(1, order + 1), repeat=j):
                        row = np.zeros(d)
                        row[list(where)] = values
                        rows.append(row)
            coeffs = np.array(rows, dtype=np.float64).reshape(-1, d)
            coeffs = coeffs[np.lexsort(coeffs.T[::-1])]
        coeffs.setflags(write=False)
        object.__setattr__(self, "_coefficients", coeffs)

    @property
    def coefficients(self) -> np.ndarray:
        """(n, d) float64 read-only coefficient matrix; row 0 is the zero vector."""
        return self._coefficients

    @property
    def n_features(self) -> int:
        """n = (k+1)^d, or fewer with max_coupling."""
        return int(self._coefficients.shape[0])

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Features (T, n) in [-1, 1]; column 0 is 1."""
        x = _scale(_as_states("FourierFeatures", states, len(self.low)), self.low, self.high)
        return np.cos(np.pi * (x @ self._coefficients.T))

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "fourier", "order", "low", "high", "max_coupling"}``."""
        return {
            "kind": "fourier",
            "order": self.order,
            "low": list(self.low),
            "high": list(self.high),
            "max_coupling": self.max_coupling,
        }


@dataclass(frozen=True)
class ConstantIdentityFeatures:
    """Features [1, x_1, ..., x_d], x the state scaled to [0, 1] by public bounds and clipped.

    Attributes:
        low: (d,) lower bounds.
        high: (d,) upper bounds, > low.
    """

    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self) -> None:
        low, high = _bounds("ConstantIdentityFeatures", self.low, self.high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def n_features(self) -> int:
        """n = d + 1."""
        return len(self.low) + 1

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Features (T, d + 1): column 0 is 1, the rest lie in [0, 1]."""
        x = _scale(_as_states("ConstantIdentityFeatures", states, len(self.low)), self.low, self.high)
        return np.concatenate([np.ones((x.shape[0], 1)), x], axis=1)

    def to_dict(self) -> dict[str, Any]:
        """``{"kind": "constant_identity", "low", "high"}``."""
        return {"kind": "constant_identity", "low": list(self.low), "high": list(self.high)}


_KINDS = ("tabular", "fourier", "constant_identity")


def feature_map_from_dict(d: Mapping[str, Any]) -> FeatureMap:
    """Rebuild a feature map from :meth:`to_dict` output.

    Raises:
        ConfigError: unknown ``kind`` or missing/invalid parameters.
    """
    if not isinstance(d, Mapping) or d.get("kind") not in _KINDS:
        kind = d.get("kind") if isinstance(d, Mapping) else d
        raise ConfigError(
            f"The 'kind' parameter of a feature map must be one of {', '.join(map(repr, _KINDS))}. "
            f"Got {kind!r} instead."
        )
    params = {k: v for k, v in d.items() if k != "kind"}
    try:
        if d["kind"] == "tabular":
            return TabularFeatures(**params)
        if d["kind"] == "fourier":
            return FourierFeatures(**params)
        return ConstantIdentityFeatures(**params)
    except TypeError as exc:
        raise ConfigError(f"Invalid parameters for feature map {d['kind']!r}: {exc}.") from exc

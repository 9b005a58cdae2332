"""Feature maps phi: raw states (T, d) -> features (T, n) for linear value functions.

Every map is a small frozen dataclass whose parameters are public (feature ranges are part of the
configuration, never computed from private data) and serialises to a dict with a ``"kind"`` key
(:func:`feature_map_from_dict` inverts it): :class:`TabularFeatures` (one-hot over integer states
or the product grid of :class:`DiscreteVariables`), :class:`OneHotFeatures` (the additive one-hot
map), :class:`FourierFeatures` (Konidaris et al. 2011) and :class:`ConstantIdentityFeatures`
(``[1, x]``, x the clipped scaled state).
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

__all__ = ["ConstantIdentityFeatures", "DiscreteVariables", "FeatureMap", "FourierFeatures",
           "OneHotFeatures", "TabularFeatures", "feature_map_from_dict"]


@runtime_checkable
class FeatureMap(Protocol):
    """A deterministic map from raw states (T, d) to float64 features (T, n_features)."""

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
class DiscreteVariables:
    """Several discrete state variables, each with levels 0..k-1, in consecutive state columns in
    the order given (the dataset's ``variables`` order).

    A state is named ``"lactate=2,bp=0"``; its index in the product grid is row-major (the last
    variable varies fastest): ``{lactate: 3, bp: 3}`` numbers the states ``3 * lactate + bp``.
    ``names`` are unique and non-empty; every variable has ``levels`` k_j >= 2."""

    names: tuple[str, ...]
    levels: tuple[int, ...]

    def __post_init__(self) -> None:
        names, levels = tuple(self.names), tuple(self.levels)
        if not names or len(names) != len(levels):
            raise ConfigError(
                "The 'variables' parameter must declare at least one variable, each with its "
                f"number of levels ({{lactate: 3, bp: 2}}). Got names {list(names)!r} and levels "
                f"{list(levels)!r} instead.")
        for name in names:
            if not isinstance(name, str) or not name or "=" in name or "," in name:
                raise ConfigError(
                    "Each discrete variable's name must be a non-empty string without '=' or ','. "
                    f"Got {name!r} instead.")
        if len(set(names)) != len(names):
            raise ConfigError(f"Discrete variable names must be unique. Got {list(names)!r}.")
        checked = tuple(check_int("DiscreteVariables", f"levels of {name!r}", k, ge=2)
                        for name, k in zip(names, levels, strict=True))
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "levels", checked)

    @classmethod
    def parse(cls, value: Any) -> DiscreteVariables:
        """From ``{name: levels, ...}`` (YAML mapping, in order), ``[[name, levels], ...]`` (the
        serialised form) or an instance.

        Raises:
            ConfigError: any other form, or invalid names or levels.
        """
        if isinstance(value, DiscreteVariables):
            return value
        if isinstance(value, Mapping):
            return cls(tuple(value), tuple(value.values()))
        if isinstance(value, (list, tuple)) and all(
                isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
            return cls(tuple(p[0] for p in value), tuple(p[1] for p in value))
        raise ConfigError(
            "The 'variables' parameter must map each discrete variable to its number of levels, "
            f"in state-column order ({{lactate: 3, bp: 2}}). Got {value!r} instead.")

    def to_list(self) -> list[list[Any]]:
        """``[[name, levels], ...]``: ordered, so the spec id tells two orders apart."""
        return [[n, k] for n, k in zip(self.names, self.levels, strict=True)]

    @property
    def size(self) -> int:
        """The number of states of the product grid, prod_j k_j."""
        return math.prod(self.levels)

    def describe(self) -> str:
        """``lactate (levels 0..2), bp (levels 0..1)``, for messages."""
        return ", ".join(f"{n} (levels 0..{k - 1})" for n, k in zip(self.names, self.levels,
                                                                      strict=True))

    def level_columns(self, owner: str, states: np.ndarray) -> np.ndarray:
        """(T, k) int64 levels from states (T, d >= k), the variables in columns 0..k-1.

        Raises:
            DataError: too few columns, or a value that is not an integer level of its variable (the
                values are private and are not quoted).
        """
        arr = _as_states(owner, states, None)
        k = len(self.names)
        if arr.shape[1] < k:
            raise DataError(
                f"{owner} reads {k} discrete variable(s) ({', '.join(self.names)}) from the first "
                f"{k} state columns; the states have {arr.shape[1]}. Declare the variables in "
                "the order of the dataset's 'variables'.")
        cols = arr[:, :k]
        idx = np.zeros(cols.shape, dtype=np.int64)
        np.copyto(idx, cols, casting="unsafe", where=np.isfinite(cols))
        bad = (idx != cols) | (idx < 0) | (idx >= np.asarray(self.levels))
        if len(cols) and np.any(bad):
            j = int(np.flatnonzero(bad.any(axis=0))[0])
            raise DataError(
                f"{owner} needs integer levels 0..{self.levels[j] - 1} of variable "
                f"{self.names[j]!r} in state column {j}; some states are not (their values are "
                "private data and are not quoted). Check the declared levels or the encoding.")
        return idx

    def codes(self, owner: str, states: np.ndarray) -> np.ndarray:
        """(T,) int64 row-major indices of states (T, d) in the product grid."""
        return self.level_columns(owner, states) @ self._strides()

    def _strides(self) -> np.ndarray:
        strides = np.ones(len(self.levels), dtype=np.int64)
        for j in range(len(self.levels) - 2, -1, -1):
            strides[j] = strides[j + 1] * self.levels[j + 1]
        return strides

    def state_names(self) -> list[str]:
        """Every state's name (``"lactate=0,bp=1"``), in index order."""
        grid = itertools.product(*(range(k) for k in self.levels))
        return [",".join(f"{n}={v}" for n, v in zip(self.names, row, strict=True)) for row in grid]

    def parse_state(self, where: str, value: Any) -> tuple[int, ...]:
        """The levels (in variable order) of a state named ``"lactate=2,bp=0"`` or given as
        ``{lactate: 2, bp: 0}``.

        Raises:
            ConfigError: an unknown variable, a level outside its range, a missing variable, or a
                malformed name.
        """
        if isinstance(value, str):
            pairs = []
            for part in value.split(","):
                name, eq, level = part.partition("=")
                if not eq:
                    raise ConfigError(
                        f"{where}: state {value!r} must name every variable as "
                        f"name=level, separated by commas ({self._example()}).")
                pairs.append((name.strip(), level.strip()))
        elif isinstance(value, Mapping):
            pairs = [(str(n), v) for n, v in value.items()]
        else:
            raise ConfigError(f"{where}: a state must be named like {self._example()!r} or "
                              f"given as a mapping of its variables. Got {value!r} instead.")
        given: dict[str, int] = {}
        for name, level in pairs:
            if name not in self.names:
                raise ConfigError(
                    f"{where}: state {value!r} names variable {name!r}, which is not declared; "
                    f"declared: {self.describe()}.")
            if name in given:
                raise ConfigError(f"{where}: state {value!r} gives variable {name!r} twice.")
            k = self.levels[self.names.index(name)]
            try:
                number = float(level)
            except (TypeError, ValueError):
                number = math.nan
            if isinstance(level, bool) or not number.is_integer() or not 0 <= number < k:
                raise ConfigError(
                    f"{where}: state {value!r} gives {name}={level}, outside its declared "
                    f"levels 0..{k - 1}.")
            given[name] = int(number)
        missing = [n for n in self.names if n not in given]
        if missing:
            raise ConfigError(
                f"{where}: state {value!r} gives no level for {', '.join(missing)}; name every "
                f"declared variable ({self._example()}).")
        return tuple(given[n] for n in self.names)

    def _example(self) -> str:
        return ",".join(f"{n}=0" for n in self.names)


@dataclass(frozen=True)
class TabularFeatures:
    """One-hot features over ``n_states`` integer states in state column 0, or over the product
    grid of declared ``variables`` (:class:`DiscreteVariables` or its YAML form; ``n_states`` is
    then the grid's size, given or derived)."""

    n_states: int | None = None
    variables: DiscreteVariables | None = None

    def __post_init__(self) -> None:
        variables, n = self.variables, self.n_states
        if variables is not None:
            variables = DiscreteVariables.parse(variables)
            if n is not None and check_int("TabularFeatures", "n_states", n, ge=1) != variables.size:
                raise ConfigError(
                    f"The 'n_states' parameter of TabularFeatures must equal the product of the "
                    f"declared levels ({variables.size}) or be left out. Got {n!r} instead.")
            n = variables.size
        object.__setattr__(self, "variables", variables)
        object.__setattr__(self, "n_states", check_int("TabularFeatures", "n_states", n, ge=1))

    @property
    def n_features(self) -> int:
        return self.n_states

    @property
    def max_active(self) -> int:
        """At most one nonzero feature per state (a public bound: :mod:`gpope.core.evaluation.loading`)."""
        return 1

    @property
    def pair_support(self) -> int:
        """The feature pairs that can be nonzero in one state together: the diagonal, n (a public
        bound on a trajectory's nonzeros in C)."""
        return self.n_states

    def states(self) -> np.ndarray:
        """(n_states, d) float64: the state whose feature is ``e_s``, for every index ``s``."""
        if self.variables is None:
            return np.arange(self.n_states, dtype=np.float64)[:, None]
        grid = itertools.product(*(range(k) for k in self.variables.levels))
        return np.array(list(grid), dtype=np.float64)

    def indices(self, states: np.ndarray) -> np.ndarray:
        """State indices (T,) int64 from states (T, d); checks range and integrality."""
        if self.variables is not None:
            return self.variables.codes("TabularFeatures", states)
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
        if self.variables is not None:
            return {"kind": "tabular", "variables": self.variables.to_list()}
        return {"kind": "tabular", "n_states": self.n_states}


@dataclass(frozen=True)
class OneHotFeatures:
    """The additive one-hot map over declared discrete variables: V(s) = sum_j f_j(s_j).

    With ``constant`` (the default) the features are ``[1, 1[s_1 = 1], ..., 1[s_1 = k_1 - 1],
    1[s_2 = 1], ...]``: level 0 of each variable is its baseline, n = 1 + sum_j (k_j - 1), and the
    features are linearly independent over the grid. Without it every level has a column (n = sum_j
    k_j); each block sums to 1, so two or more blocks are linearly dependent: that form is accepted
    for one variable only. Not exact where the value has interactions (the tabular map is)."""

    variables: DiscreteVariables
    constant: bool = True

    def __post_init__(self) -> None:
        variables = DiscreteVariables.parse(self.variables)
        if not isinstance(self.constant, bool):
            raise ConfigError(f"The 'constant' parameter of OneHotFeatures must be true or false. "
                              f"Got {self.constant!r} instead.")
        if not self.constant and len(variables.names) > 1:
            raise ConfigError(
                "OneHotFeatures with constant: false over several variables has linearly "
                "dependent features (each variable's block sums to 1), so theta is not identified; "
                "keep constant: true (level 0 of each variable is then its baseline).")
        object.__setattr__(self, "variables", variables)

    @property
    def n_features(self) -> int:
        """1 + sum_j (k_j - 1) with the constant, else sum_j k_j."""
        drop = 1 if self.constant else 0
        return int(self.constant) + sum(k - drop for k in self.variables.levels)

    @property
    def max_active(self) -> int:
        """At most one nonzero feature per variable, plus the constant (a public bound)."""
        return len(self.variables.names) + int(self.constant)

    @property
    def pair_support(self) -> int:
        """The feature pairs that can be nonzero in one state together: all but two levels of one
        variable, n^2 - sum_j (c_j^2 - c_j) for the c_j columns of variable j (a public bound)."""
        drop = 1 if self.constant else 0
        n = self.n_features
        return n * n - sum((k - drop) * (k - drop - 1) for k in self.variables.levels)

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Features (T, n) of 0s and 1s."""
        levels = self.variables.level_columns("OneHotFeatures", states)
        out = np.zeros((len(levels), self.n_features))
        drop = 1 if self.constant else 0
        offset = int(self.constant)
        if self.constant:
            out[:, 0] = 1.0
        rows = np.arange(len(levels))
        for j, k in enumerate(self.variables.levels):
            col = levels[:, j] - drop
            hit = col >= 0
            out[rows[hit], offset + col[hit]] = 1.0
            offset += k - drop
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "one_hot", "variables": self.variables.to_list(),
                "constant": self.constant}


@dataclass(frozen=True)
class FourierFeatures:
    """Fourier basis of order k >= 0 over a box [low, high] of public bounds.

    Coefficients are all c in {0..k}^d (lexicographic, c = 0 first: the constant feature) with at
    most ``max_coupling`` non-zero entries when given; phi_c(s) = cos(pi c . x) with x the state
    scaled to [0, 1] and clipped, so every feature lies in [-1, 1]."""

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
        return {
            "kind": "fourier",
            "order": self.order,
            "low": list(self.low),
            "high": list(self.high),
            "max_coupling": self.max_coupling,
        }


@dataclass(frozen=True)
class ConstantIdentityFeatures:
    """Features [1, x_1, ..., x_d], x the state scaled to [0, 1] by public bounds and clipped."""

    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self) -> None:
        low, high = _bounds("ConstantIdentityFeatures", self.low, self.high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @property
    def n_features(self) -> int:
        return len(self.low) + 1

    def __call__(self, states: np.ndarray) -> np.ndarray:
        """Features (T, d + 1): column 0 is 1, the rest lie in [0, 1]."""
        x = _scale(_as_states("ConstantIdentityFeatures", states, len(self.low)), self.low, self.high)
        return np.concatenate([np.ones((x.shape[0], 1)), x], axis=1)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "constant_identity", "low": list(self.low), "high": list(self.high)}


_KINDS = ("tabular", "one_hot", "fourier", "constant_identity")


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
        if d["kind"] == "one_hot":
            return OneHotFeatures(**params)
        if d["kind"] == "fourier":
            return FourierFeatures(**params)
        return ConstantIdentityFeatures(**params)
    except TypeError as exc:
        raise ConfigError(f"Invalid parameters for feature map {d['kind']!r}: {exc}.") from exc

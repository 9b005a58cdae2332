"""How ``gpope evaluate`` gets the statistics to the driver, decided from public quantities only.

The choice is a branch of the run, so it may depend only on what is public: m as the run uses
it (the exact count, or a released m~), the width n, the feature map's kind and ``max_active``,
the dataset's public episode cap ``max_length`` and the configured memory limit. It never looks
at the private rows (their nonzero count would move by up to 2 n^2 with one patient and give
that patient's presence away through the path taken).

A one-hot map has at most p nonzero features per state (``max_active``), so one step adds at
most ``2 p^2`` entries to a trajectory's A and ``p^2`` to its C, whose entries lie where two
features can be active together (``pair_support``, S). A trajectory of at most L steps holds at
most ``min(2 p^2 L, n^2) + min(p^2 L, S)`` nonzero entries (:func:`sparse_row_bytes`).

* ``"dense"``: the m dense rows fit ``limit_mb`` MiB: all in driver memory.
* ``"sparse"``: a one-hot map whose m rows' public sparse bound fits ``limit_mb`` MiB (or any
  one-hot map when in-memory is forced): the nonzero entries are loaded.
* ``"stream"``: otherwise, or when forced: the sampled rows are fetched block by block.
"""

from __future__ import annotations

from typing import Literal

from gpope.core.validation import check_choice, check_int

__all__ = ["Layout", "is_one_hot", "max_active", "pair_support", "plan_loading", "row_bytes",
           "sparse_row_bytes"]

Layout = Literal["dense", "sparse", "stream"]


def row_bytes(n: int) -> int:
    """Bytes of one statistics row held densely on the driver (A, C: n*n, b: n, plus ids)."""
    return 8 * (2 * n * n + n) + 16


def sparse_row_bytes(n: int, *, active: int, max_length: int, pairs: int | None = None) -> int:
    """A public bound on the bytes of one trajectory's statistics in the sparse layout: 12 bytes
    (int32 position, float64 value) per nonzero entry of [vec A, vec C], at most
    ``min(2 p^2 L, n^2) + min(p^2 L, S)`` of them (S = ``pairs``, None: n^2), plus b and the row's
    ids and offsets."""
    n = check_int("sparse_row_bytes", "n", n, ge=1)
    p = check_int("sparse_row_bytes", "active", active, ge=1)
    length = check_int("sparse_row_bytes", "max_length", max_length, ge=1)
    s = n * n if pairs is None else check_int("sparse_row_bytes", "pairs", pairs, ge=1, le=n * n)
    nonzeros = min(2 * p * p * length, n * n) + min(p * p * length, s)
    return 12 * nonzeros + 8 * n + 24


def max_active(feature_map: object) -> int | None:
    """p, the most nonzero features of any state, for a one-hot map (tabular: 1; additive
    one-hot: its variables plus the constant); None for a map with dense features."""
    p = getattr(feature_map, "max_active", None)
    return p if isinstance(p, int) and p >= 1 else None


def pair_support(feature_map: object) -> int | None:
    """S, the feature pairs a one-hot map can make nonzero in one state together (tabular: n);
    None for a map without the property."""
    s = getattr(feature_map, "pair_support", None)
    return s if isinstance(s, int) and s >= 1 else None


def is_one_hot(feature_map: object) -> bool:
    """True for a one-hot feature map (tabular or additive one-hot): a public property."""
    return max_active(feature_map) is not None


def plan_loading(*, m: int, n: int, path: str, limit_mb: int, one_hot: bool = False,
                 sparse_bytes: int | None = None) -> Layout:
    """The layout of the run's statistics (module docstring): ``"dense"``, ``"sparse"`` or
    ``"stream"``, a function of public inputs only (m as the run uses it, n, ``path``, ``limit_mb``,
    whether the map is one-hot and its public sparse row bound), so equal for any two data sets with
    the same (m, n, sparse_bytes) and settings."""
    check_choice("plan_loading", "path", path, ("auto", "memory", "stream"))
    m = check_int("plan_loading", "m", m, ge=1)
    n = check_int("plan_loading", "n", n, ge=1)
    limit = check_int("plan_loading", "limit_mb", limit_mb, ge=1) * 2**20
    if path == "stream":
        return "stream"
    if m * row_bytes(n) <= limit:
        return "dense"
    if one_hot and sparse_bytes is not None and m * int(sparse_bytes) <= limit:
        return "sparse"
    if path == "memory":
        return "sparse" if one_hot else "dense"
    return "stream"

"""How ``gpope evaluate`` gets the statistics to the driver, decided from public quantities only.

The choice is a branch of the run, so it may depend only on what the design treats as public
(docs/ARCHITECTURE.md, "Data-dependent decisions"): m as the run uses it (the trajectory count
the release is calibrated with: the exact count, or a released noisy count m~; the rule is the
same function of whichever the caller passes), the statistics width n, the feature map's kind
and ``max_active`` (the spec's), the dataset's public episode cap ``max_length`` (enforced at
ingest) and the configured memory limit. It never looks at the private rows (a count of their
nonzero entries would move by up to 2 n^2 with one patient and give that patient's presence away
through the path taken, the interval method and the refusals that follow from it).

A one-hot map (tabular, or the additive one-hot map) has at most p nonzero features per state
(its public ``max_active``), so one decision step adds at most ``2 p^2`` entries to a
trajectory's A (phi_t times phi_t - gamma phi'_t, at most 2p nonzeros) and ``p^2`` to its C;
and C's entries lie where two features can be active in one state (the map's public
``pair_support``, S: n for a tabular map, whose C is diagonal). A trajectory of at most L steps
holds at most ``min(2 p^2 L, n^2) + min(p^2 L, S)`` nonzero entries (:func:`sparse_row_bytes`),
a bound from public quantities only.

* ``"dense"``: the m dense rows (A, C: n x n, b: n) fit ``limit_mb`` MiB: all in driver memory.
* ``"sparse"``: a one-hot map whose m rows' public sparse bound fits ``limit_mb`` MiB (or any
  one-hot map when in-memory is forced, ``path="memory"``): the nonzero entries are loaded.
* ``"stream"``: otherwise (``path="auto"``), or when forced: the sampled rows are fetched block by
  block in sample-plan order (the shell's ``streamed_fetcher``).
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
    """A public bound on the bytes of one trajectory's statistics in the sparse layout.

    Args:
        n: the number of features.
        active: p, the most nonzero features of one state (the map's ``max_active``).
        max_length: L, the public cap on a trajectory's decision steps.
        pairs: S, the feature pairs that can be nonzero in one state together (the map's
            ``pair_support``); None: n^2.

    Returns:
        12 bytes (int32 position, float64 value) per nonzero entry of [vec A, vec C], at most
        ``min(2 p^2 L, n^2) + min(p^2 L, S)`` of them, plus b (n float64) and the row's ids and
        offsets (24 bytes).
    """
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
    """The layout of the run's statistics (see the module docstring): a function of public
    inputs only, never of the private rows (their nonzero count, norms or values).

    Args:
        m: the number of trajectories as the run uses it (public: the exact count, or a
            released noisy count m~).
        n: the number of features.
        path: ``"auto"`` (by the dense, then the sparse size), ``"memory"`` or ``"stream"``
            (forced).
        limit_mb: the driver memory the statistics may take, MiB.
        one_hot: the spec's feature map is one-hot (tabular or additive one-hot).
        sparse_bytes: the public bound on one row's sparse size (:func:`sparse_row_bytes`) of a
            one-hot map, or None (no public episode cap: the sparse layout only when forced).

    Returns:
        ``"dense"``, ``"sparse"`` or ``"stream"``; equal for any two data sets with the same
        (m, n, sparse_bytes) and settings.
    """
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

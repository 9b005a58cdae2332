"""How ``gpope evaluate`` gets the statistics to the driver, decided from public quantities only.

The choice is a branch of the run, so it may depend only on what the design treats as public
(docs/ARCHITECTURE.md, "Data-dependent decisions"): m, the statistics width n, the feature map's
kind and the configured memory limit. It never looks at the private rows (a count of their
nonzero entries would move by up to 2 n^2 with one patient and give that patient's presence away
through the path taken, the interval method and the refusals that follow from it).

* ``"dense"``: the m dense rows (A, C: n x n, b: n) fit ``limit_mb`` MiB: all in driver memory.
* ``"stream"``: otherwise (``path="auto"``), or when forced: the sampled rows are fetched block by
  block through a Spark join.
* ``"sparse"``: only when in-memory is forced (``path="memory"``) past the limit for a one-hot
  (tabular) feature map, whose rows are mostly zero; the nonzero entries are loaded as they are.
"""

from __future__ import annotations

from typing import Literal

from gpope.core.validation import check_choice, check_int

__all__ = ["Layout", "is_one_hot", "plan_loading", "row_bytes"]

Layout = Literal["dense", "sparse", "stream"]


def row_bytes(n: int) -> int:
    """Bytes of one statistics row held densely on the driver (A, C: n*n, b: n, plus ids)."""
    return 8 * (2 * n * n + n) + 16


def is_one_hot(feature_map: object) -> bool:
    """True for a tabular (one-hot) feature map: a public property of the spec."""
    describe = getattr(feature_map, "to_dict", None)
    return callable(describe) and describe().get("kind") == "tabular"


def plan_loading(*, m: int, n: int, path: str, limit_mb: int, one_hot: bool = False) -> Layout:
    """The layout of the run's statistics (see the module docstring); public inputs only.

    Args:
        m: the number of trajectories (public).
        n: the number of features.
        path: ``"auto"`` (by the dense size), ``"memory"`` or ``"stream"`` (forced).
        limit_mb: the driver memory the statistics may take, MiB.
        one_hot: the spec's feature map is one-hot (tabular).

    Returns:
        ``"dense"``, ``"sparse"`` or ``"stream"``; equal for any two data sets with the same
        (m, n) and settings.
    """
    check_choice("plan_loading", "path", path, ("auto", "memory", "stream"))
    m = check_int("plan_loading", "m", m, ge=1)
    n = check_int("plan_loading", "n", n, ge=1)
    limit = check_int("plan_loading", "limit_mb", limit_mb, ge=1) * 2**20
    if path == "stream":
        return "stream"
    if m * row_bytes(n) <= limit:
        return "dense"
    if path == "memory":
        return "sparse" if one_hot else "dense"
    return "stream"

"""Total L2 clipping of per-record vectors: the one clipping function every mechanism calls.

The privacy analysis of every Gaussian mechanism in gpope (the GPOPE steps, the one-shot SSP sums)
needs one property: whatever a single record contains, its clipped contribution has L2 norm at
most ``h``. The textbook formula ``v / max(1, ||v|| / h)`` breaks on floating point:

* a NaN entry gives a NaN row (the release becomes NaN with the record and finite without it:
  infinite privacy loss with the probability that the record is sampled);
* an infinite entry gives ``inf * 0 = NaN``;
* finite entries above ~1.3e154 overflow ``||v||^2`` to inf, which again gives NaN.

:func:`clip_rows` is total: it maps EVERY float row to a row of norm ``<= h`` (a deterministic
function of the row alone, so the sensitivity analysis is unchanged):

* finite rows: ``v * min(1, h / ||v||)`` with the norm computed without overflow (rows whose
  squared norm overflows are rescaled by their largest magnitude first);
* rows with an infinite entry and no NaN: ``h * s / ||s||`` with ``s`` the signs of the infinite
  entries (the limit direction of the row);
* rows with a NaN entry: the zero row (no direction can be recovered).

The common case (finite squared norm) costs one einsum and one multiply.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["clip_rows", "clip_vector"]


def clip_rows(g: np.ndarray, h: float | None) -> np.ndarray:
    """Rows of ``g`` (k, d), any float values, mapped to L2 norm <= ``h`` (module docstring); finite
    rows already inside the ball are unchanged. ``h`` None or inf leaves ``g`` unchanged (no
    clipping: not private)."""
    if h is None or not math.isfinite(h):
        return g
    g = np.asarray(g, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nrm2 = np.einsum("ij,ij->i", g, g)
    ok = np.isfinite(nrm2)
    if ok.all():
        nrm = np.sqrt(nrm2)
        return g * (h / np.maximum(nrm, h))[:, None]
    out = np.empty_like(g)
    good = g[ok]
    out[ok] = good * (h / np.maximum(np.sqrt(nrm2[ok]), h))[:, None]
    bad = np.flatnonzero(~ok)
    for i in bad:
        out[i] = _clip_special(g[i], h)
    return out


def clip_vector(v: np.ndarray, h: float | None) -> np.ndarray:
    """A single vector ``v`` (d,) mapped to L2 norm <= ``h`` (see :func:`clip_rows`)."""
    v = np.asarray(v, dtype=np.float64)
    return clip_rows(v.reshape(1, -1), h).reshape(v.shape)


def _clip_special(v: np.ndarray, h: float) -> np.ndarray:
    """The rare rows: NaN -> 0; infinite entries -> their sign direction; huge -> rescaled."""
    if np.isnan(v).any():
        return np.zeros_like(v)
    inf = np.isinf(v)
    if inf.any():
        s = np.where(inf, np.sign(v), 0.0)
        return s * (h / math.sqrt(float(inf.sum())))
    scale = float(np.max(np.abs(v)))
    u = v / scale  # entries in [-1, 1], norm in [1, sqrt(d)]: no overflow
    nu = math.sqrt(float(u @ u))
    if scale * nu <= h:  # pragma: no cover - a squared norm that overflowed is never <= h
        return v.copy()
    return u * (h / nu)

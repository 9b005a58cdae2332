"""A small on-disk cache of sigma calibrations, shared by processes of the same user.

Each calibration is one JSON file named by the SHA-256 of its canonical inputs (every argument,
the grid settings, the gpope and dp-accounting versions), written to a temporary name and
renamed over the target (``os.replace`` is atomic), so a reader sees no file or a complete one;
unreadable files count as misses, and beyond :data:`MAX_ENTRIES` the oldest are removed.

Entries are hints, not certificates: the caller re-certifies a cached sigma with one accountant
evaluation before use (:func:`gpope.core.accounting.api.calibrate`), so a stale or edited entry
can never lower the noise below a certified bound.

Location: ``$GPOPE_CACHE_DIR`` if set (empty or ``off`` disables the cache), else
``$XDG_CACHE_HOME/gpope`` or ``~/.cache/gpope``; entries live in its ``calibrations/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["MAX_ENTRIES", "cache_dir", "load_calibration", "store_calibration"]

#: At most this many cached calibrations are kept (the oldest are pruned on write).
MAX_ENTRIES = 2000


def cache_dir() -> Path | None:
    """The calibration cache directory, or None when disabled (``GPOPE_CACHE_DIR=off``)."""
    env = os.environ.get("GPOPE_CACHE_DIR")
    if env is not None:
        if env.strip() in ("", "off", "0", "none"):
            return None
        root = Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "gpope"
    return root / "calibrations"


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("gpope", "dp-accounting"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    return out


def _path(key: dict[str, Any]) -> Path | None:
    root = cache_dir()
    if root is None:
        return None
    text = json.dumps({"key": key, "versions": _versions()}, sort_keys=True,
                      separators=(",", ":"))
    return root / (hashlib.sha256(text.encode("utf-8")).hexdigest()[:32] + ".json")


def load_calibration(key: dict[str, Any]) -> float | None:
    """The cached sigma for ``key`` (JSON-serialisable inputs), or None (miss, disabled, bad)."""
    path = _path(key)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("key") != json.loads(json.dumps(key)):
            return None
        return float(data["sigma"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_calibration(key: dict[str, Any], sigma: float) -> None:
    """Record ``sigma`` for ``key`` atomically; failures (read-only home...) are ignored."""
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({"key": key, "sigma": float(sigma), "versions": _versions()},
                             sort_keys=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(payload)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _prune(path.parent)
    except OSError:
        return


def _prune(root: Path) -> None:
    """Remove the oldest entries beyond MAX_ENTRIES (races with other pruners are harmless)."""
    try:
        files = list(root.glob("*.json"))
        if len(files) <= MAX_ENTRIES:
            return
        files.sort(key=lambda f: f.stat().st_mtime if f.exists() else 0.0)
        for f in files[: len(files) - MAX_ENTRIES]:
            f.unlink(missing_ok=True)
    except OSError:
        return

"""The registered lake stores: each ``lake.storage`` name and the class that implements it.

Adding a store is its own module (a :class:`~gpope.shell.lake.store.TableStore`) plus one line in
:data:`STORES`. This module imports nothing, so the settings can list the valid names without
loading a store.
"""

from __future__ import annotations

__all__ = ["STORAGE_CHOICES", "STORES"]

STORES: dict[str, str] = {
    "native": "gpope.shell.lake.native:NativeStore",
    "delta-rs": "gpope.shell.lake.delta_rs:DeltaRsStore",
}
"""``lake.storage`` name -> ``module:Class`` of its store, in the order ``auto`` tries them."""

STORAGE_CHOICES: tuple[str, ...] = ("auto", *STORES)
"""Valid ``lake.storage`` values: ``auto`` (the first store available in the session) or a name."""

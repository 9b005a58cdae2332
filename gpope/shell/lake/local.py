"""The JVM-free readers' access to a path-based lake: Delta logs read with delta-rs only.

``gpope query``, ``gpope budget``, ``gpope maintain`` and the checks a command runs before Spark
starts read local Delta tables without a JVM. They reach them through this module, so that only
``gpope.shell.lake`` knows which library reads a Delta log.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from gpope.errors import QueryError

if TYPE_CHECKING:
    import pyarrow as pa

    from gpope.config import LakeSettings
    from gpope.shell.lake.delta_rs import DeltaRsTables, StagedFileWriter

__all__ = ["check_local_root", "dataset_folders", "latest_version", "local_store", "local_tables",
           "snapshot", "staged_file_writer"]

#: Attempts at a consistent snapshot of the lake's table versions before giving up.
_SNAPSHOT_ATTEMPTS = 50


def local_tables() -> DeltaRsTables:
    """The JVM-free reader of local Delta tables: history, column comments, Arrow datasets and
    tables at a version, partition presence."""
    from gpope.shell.lake.delta_rs import DeltaRsTables

    return DeltaRsTables()


def local_store(settings: LakeSettings) -> DeltaRsTables | None:
    """:func:`local_tables` for the lake ``settings`` names, or None when it is a Unity Catalog
    schema or a non-local root (readers then go through Spark)."""
    from gpope.shell.lake.names import local_root

    if settings.catalog is not None or local_root(str(settings.root)) is None:
        return None
    return local_tables()


def staged_file_writer(folder: str, partition_values: Mapping[str, str | None], schema: pa.Schema,
                       table_name: str) -> StagedFileWriter:
    """The writer a Spark Python worker writes its Parquet files with into the staging folder
    of :meth:`gpope.shell.lake.Lake.worker_staging` (``folder``, ``partition_values`` and
    ``schema`` from that staging); its ``close()`` returns the report the staging commits."""
    from gpope.shell.lake.delta_rs import StagedFileWriter

    return StagedFileWriter(folder, partition_values, schema, table_name)


def dataset_folders(root: str | Path) -> list[tuple[str, str]]:
    """``(layer, dataset)`` for every dataset folder of the local lake at ``root``.

    Guarantees: one pair per ``<root>/<layer>/<dataset>`` folder; the shared gold tables (and any
    folder that is itself a Delta table) are not datasets; a missing layer contributes nothing.
    Reads directory listings only.
    """
    from gpope.shell.lake.names import LAYERS, SHARED_TABLES

    found: list[tuple[str, str]] = []
    for layer in LAYERS:
        try:
            entries = [e for e in os.scandir(Path(root) / layer) if e.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            continue
        found += [(layer, e.name) for e in entries
                  if e.name not in SHARED_TABLES and not os.path.isdir(Path(e.path) / "_delta_log")]
    return found


def check_local_root(root: str) -> None:
    """Refuse a local lake root the Delta storage path cannot address (the character named).

    Raises:
        ConfigError: the root holds a character delta-rs cannot address, or is a file.
    """
    from gpope.shell.lake.delta_rs import check_local_root as check

    check(root)


def latest_version(path: str | Path) -> int | None:
    """The newest committed version of the local Delta table at ``path`` (None: no commit yet).

    Reads only the ``_delta_log`` listing (``<20 digits>.json`` commit files), so it costs one
    directory listing whatever the table's size.
    """
    try:
        names = os.listdir(Path(path) / "_delta_log")
    except FileNotFoundError:
        return None
    versions = [int(n[:20]) for n in names
                if len(n) == 25 and n.endswith(".json") and n[:20].isdigit()]
    return max(versions) if versions else None


def snapshot(paths: Iterable[str]) -> dict[str, int | None]:
    """The version of every table in ``paths`` as of ONE instant: the versions are listed twice
    in a row until both listings agree; versions only grow, so every table had exactly that
    version between them, a state the lake really was in.

    Raises:
        QueryError: the tables kept changing through every attempt.
    """
    paths = list(paths)
    first = {p: latest_version(p) for p in paths}
    for _ in range(_SNAPSHOT_ATTEMPTS):
        second = {p: latest_version(p) for p in paths}
        if second == first:
            return first
        first = second
        time.sleep(0.01)
    raise QueryError(
        f"The lake's tables changed during each of {_SNAPSHOT_ATTEMPTS} attempts at a consistent "
        "read (many writers committing at once); run the query again."
    )

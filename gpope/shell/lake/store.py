"""The store interface: what the table layer asks of a storage backend.

A store reads and writes Delta tables at *locations* (a path, or a Unity Catalog name when opened
``by_name``). ``native`` (:class:`~gpope.shell.lake.native.NativeStore`) is Spark's own ``delta``
format (Databricks); ``delta-rs`` (:class:`~gpope.shell.lake.delta_rs.DeltaRsStore`) has Spark
write Parquet that delta-rs commits (no Delta JARs: local runs and tests). :func:`store_class`
chooses once; adding a store is its own module plus one entry in
:data:`gpope.shell.lake.registry.STORES`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from gpope.errors import ConfigError
from gpope.shell.lake.base import HistoryEntry, PartitionValue, WriteSpec
from gpope.shell.lake.registry import STORAGE_CHOICES, STORES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["TableStore", "load_store", "store_class"]


class TableStore(Protocol):
    """One storage backend. Every method raises
    :class:`~gpope.shell.lake.base.MissingTableError` for a location without a table (the table
    layer turns it into a :class:`~gpope.errors.TableNotFoundError` naming the stage to run)."""

    name: ClassVar[str]
    """The ``lake.storage`` value that selects this store."""

    def __init__(self, spark: SparkSession | None, *, by_name: bool = False) -> None: ...

    @classmethod
    def available(cls, spark: SparkSession) -> bool:
        """Whether the store works in ``spark`` (``auto`` takes the first available store)."""
        ...

    @classmethod
    def check_lake(cls, spark: SparkSession, root: str, *, local: bool, by_name: bool) -> None:
        """Raise ConfigError, saying what to do, when the store cannot serve this lake."""
        ...

    def exists(self, location: str) -> bool: ...

    def version(self, location: str) -> int: ...

    def history(self, location: str) -> list[HistoryEntry]:
        """Every commit, oldest first."""
        ...

    def read(self, location: str, version: int | None = None) -> DataFrame:
        """The table (as of ``version``) as a lazy Spark DataFrame, columns in table order."""
        ...

    def read_arrow(self, location: str, version: int | None = None) -> pa.Table:
        """A small table read whole into Arrow on the driver."""
        ...

    def data_files(
        self, location: str, version: int | None = None,
        partition: Mapping[str, PartitionValue] | None = None,
    ) -> list[str] | None:  # fmt: skip
        """Local Parquet files holding the rows, for JVM-free readers; None when the files are
        the engine's business (the caller then reads :meth:`read`)."""
        ...

    def write(self, df: DataFrame, location: str, spec: WriteSpec) -> int:
        """Write ``df`` in one atomic commit (validated against ``spec.schema``); return its
        version."""
        ...

    def append_arrow(
        self, location: str, data: pa.Table, *, create_schema: StructType | None = None,
        merge_schema: bool = False, description: str | None = None,
        commit_metadata: Mapping[str, str] | None = None, table_name: str,
    ) -> int:  # fmt: skip
        """Append small driver-side rows in one atomic commit; return its version."""
        ...

    def arrow_writer(self, location: str, spec: WriteSpec) -> Any:
        """A writer of Arrow tables into an unpartitioned table: ``write(table)`` repeatedly,
        then ``commit()`` (one atomic commit, returns the version) or ``abort()``."""
        ...

    def worker_staging(self, location: str, spec: WriteSpec) -> Any | None:
        """A folder Spark's Python workers write Parquet files into, committed by the driver;
        None when the store has no such path (the caller then writes a DataFrame)."""
        ...

    def delete_rows(
        self, location: str, column: str, values: set[str], *, user_metadata: str,
        table_name: str,
    ) -> int | None:  # fmt: skip
        """Remove the rows whose ``column`` is in ``values`` in one commit; return its version,
        or None when no row matched (nothing committed)."""
        ...


def load_store(name: str) -> type[TableStore]:
    """The store class registered as ``name`` (:data:`gpope.shell.lake.registry.STORES`)."""
    module, _, cls = STORES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def store_class(spark: SparkSession, mode: str) -> type[TableStore]:
    """The store ``mode`` names, or with ``auto`` the first store available in ``spark``.

    Raises:
        ConfigError: an unknown mode, or no store available.
    """
    if mode not in STORAGE_CHOICES:
        raise ConfigError(
            f"The lake storage must be one of {', '.join(STORAGE_CHOICES)}. Got {mode!r} instead."
        )
    if mode != "auto":
        return load_store(mode)
    for name in STORES:
        store = load_store(name)
        if store.available(spark):
            return store
    raise ConfigError(  # pragma: no cover - delta-rs is always available
        f"No lake storage is available in this Spark session (tried {', '.join(STORES)})."
    )


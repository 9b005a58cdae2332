"""The table layer: one object that reads and writes every gpope Delta table.

:class:`Lake` maps a :class:`~gpope.shell.lake.names.TableRef` to a location (a path under the
lake root, or a Unity Catalog name) and holds one :class:`~gpope.shell.lake.store.TableStore`,
chosen when it is created; nothing outside this package knows which. The module-level functions
are the short form taking a :class:`~gpope.config.LakeSettings`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Required, TypedDict, TypeVar, Unpack

from gpope.errors import ConfigError, CorruptTableError, TableNotFoundError
from gpope.shell.lake.base import (
    HistoryEntry,
    MissingDataFilesError,
    MissingTableError,
    PartitionValue,
    StorageMode,
    WriteMode,
    WriteSpec,
    check_write_mode,
    encode_user_metadata,
)
from gpope.shell.lake.names import (
    TableRef,
    check_name,
    creator_hint,
    local_root,
    repair_hint,
    table_path,
    uc_table_name,
)
from gpope.shell.lake.store import TableStore, store_class

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from gpope.config import LakeSettings

__all__ = ["Lake", "ReadOptions", "WriteOptions", "read_shared_table", "read_table",
           "shared_table_location", "table_location", "write_shared_table", "write_table"]

_T = TypeVar("_T")


class ReadOptions(TypedDict, total=False):
    """The keywords of :meth:`Lake.read`."""

    version: int | None
    hint: str | None


class WriteOptions(TypedDict, total=False):
    """The keywords of :meth:`Lake.write`."""

    mode: Required[WriteMode]
    schema: StructType | None
    partition_by: list[str] | None
    replace_where: Mapping[str, PartitionValue] | None
    run_id: str | None
    merge_schema: bool


class Lake:
    """Read and write the lake's Delta tables: path-based under ``root`` (local paths made
    absolute), or Unity Catalog ``catalog.schema``; ``mode`` ``"auto"`` (the first registered
    store available in the session) or a store's name.

    Raises:
        ConfigError: an unknown mode; only one of catalog/schema; Unity Catalog or a non-local
            root with the delta-rs path.

    Guarantees:
        Every write is one atomic Delta commit; a ``replace_where`` write replaces its partition
        (re-running it never duplicates rows); reads of a missing table raise
        :class:`~gpope.errors.TableNotFoundError` naming the location and the stage that creates it.
    """

    def __init__(
        self,
        spark: SparkSession,
        root: str | Path = "lake",
        *,
        catalog: str | None = None,
        schema: str | None = None,
        mode: StorageMode = "auto",
    ) -> None:
        if (catalog is None) != (schema is None):
            raise ConfigError(
                "Lake needs both 'catalog' and 'schema' for Unity Catalog tables, or neither. "
                f"Got catalog={catalog!r}, schema={schema!r}."
            )
        if catalog is not None and schema is not None:
            check_name("catalog", catalog)
            check_name("schema", schema)
        self.spark = spark
        self.catalog = catalog
        self.schema = schema
        local = local_root(str(root))
        self.root = str(local) if local is not None else str(root)
        chosen = store_class(spark, mode)
        chosen.check_lake(spark, self.root, local=local is not None, by_name=catalog is not None)
        self.storage: str = chosen.name
        self.store: TableStore = chosen(spark, by_name=catalog is not None)

    @classmethod
    def from_settings(cls, spark: SparkSession, settings: LakeSettings) -> Lake:
        """The lake described by ``settings`` (root, Unity Catalog mapping, storage mode)."""
        return cls(spark, settings.root, catalog=settings.catalog, schema=settings.schema,
                   mode=settings.storage)

    def __repr__(self) -> str:
        where = f"{self.catalog}.{self.schema}" if self.catalog else self.root
        return f"Lake({where!r}, storage={self.storage!r})"

    # ------------------------------------------------------------------ names
    @property
    def by_name(self) -> bool:
        """True when tables are Unity Catalog tables addressed by name."""
        return self.catalog is not None

    def location(self, ref: TableRef) -> str:
        """Where ``ref`` lives: its Unity Catalog name, or its path under the lake root."""
        if self.catalog is not None and self.schema is not None:
            return uc_table_name(self.catalog, self.schema, ref)
        return table_path(self.root, ref)

    def _address(self, ref: TableRef) -> str:
        if self.catalog is not None and self.schema is not None:
            return uc_table_name(self.catalog, self.schema, ref, quoted=True)
        return table_path(self.root, ref)

    def _not_found(self, ref: TableRef, hint: str | None) -> TableNotFoundError:
        return TableNotFoundError(
            f"Delta table {ref} does not exist at {self.location(ref)}. {hint or creator_hint(ref)}"
        )

    def _found(self, ref: TableRef, hint: str | None, call: Callable[[str], _T]) -> _T:
        """``call(location)``, a missing table raised as TableNotFoundError naming its creator,
        missing data files as CorruptTableError naming the table and its repair."""
        try:
            return call(self._address(ref))
        except MissingTableError:
            raise self._not_found(ref, hint) from None
        except MissingDataFilesError as exc:
            at = "its latest version" if exc.version is None else f"version {exc.version}"
            raise CorruptTableError(
                f"Delta table {ref} at {self.location(ref)} is damaged: {len(exc.files)} data "
                f"file(s) that {at} lists are missing (e.g. {Path(exc.files[0]).name}). "
                f"{repair_hint(ref)}") from None

    # ------------------------------------------------------------------ metadata
    def exists(self, ref: TableRef) -> bool:
        return self.store.exists(self._address(ref))

    def version(self, ref: TableRef) -> int:
        """The table's latest version (0 after its first commit; TableNotFoundError naming the
        stage that creates a missing table)."""
        return self._found(ref, None, self.store.version)

    def history(self, ref: TableRef, *, hint: str | None = None) -> list[HistoryEntry]:
        """Every commit of the table, oldest first (TableNotFoundError as :meth:`version`, with
        ``hint`` as the advice when given)."""
        return self._found(ref, hint, self.store.history)

    # ------------------------------------------------------------------ reads
    def read(
        self, ref: TableRef, *, version: int | None = None, hint: str | None = None
    ) -> DataFrame:
        """The table (latest, or as of ``version``) as a lazy Spark DataFrame.

        Guarantees: the table's columns in the table's order, partition columns included; an
        empty table reads as an empty DataFrame with the table's schema.

        Raises:
            TableNotFoundError: the table does not exist.
            ConfigError: ``version`` does not exist.
        """
        return self._found(ref, hint, lambda at: self.store.read(at, version))

    def read_arrow(self, ref: TableRef, *, version: int | None = None) -> pa.Table:
        """A small table read whole into Arrow on the driver (delta-rs reads it directly)."""
        return self._found(ref, None, lambda at: self.store.read_arrow(at, version))

    def data_files(self, ref: TableRef, *, version: int | None = None,
                   partition: Mapping[str, PartitionValue] | None = None) -> list[str] | None:
        """The local Parquet files holding the table's rows (as of ``version``; only those of
        ``partition`` when given), for readers that need no JVM. None with the native storage
        (the files are Delta's business): the caller reads :meth:`read`.

        Raises:
            ConfigError: ``version`` does not exist, or a ``partition`` key is not a partition
                column.
        """
        return self._found(ref, None, lambda at: self.store.data_files(at, version, partition))

    # ------------------------------------------------------------------ writes
    def write(self, df: DataFrame, ref: TableRef, **options: Unpack[WriteOptions]) -> int:
        """Write ``df`` to the table in one atomic commit; create the table if needed.

        Args:
            df: the rows; validated against ``schema`` (names exact, types equal or safely
                widened, NOT NULL enforced).
            mode: ``"append"``, ``"overwrite"`` (all rows) or ``"replace_where"`` (the rows of
                the partition ``replace_where``, ``{partition column: value}``).
            schema: the table contract; default: ``gpope.shell.schemas.TABLE_SCHEMAS[ref.table]``.
            partition_by: partition columns when the table is created (None keeps the table's).
            run_id: the multi-table stage run this commit belongs to: invisible to pinned readers
                until the run's manifest is committed (:mod:`gpope.shell.lake.manifest`).
            merge_schema: the contract's nullable last columns an existing table lacks are added
                first (:func:`~gpope.shell.lake.base.columns_to_add`).

        Returns:
            The table version the commit created.

        Raises:
            ConfigError: bad mode, or replace_where missing/given for the wrong mode, or naming a
                column that is not a partition column.
            SchemaError: the DataFrame or the existing table does not match the contract.
            DataError: rows outside the replace_where partition.
            CommitError: the write or the commit failed; nothing was committed and no new file
                is left behind.
        """
        spec = _write_spec(ref, **options)
        return self.store.write(df, self._address(ref), spec)

    def arrow_writer(
        self,
        ref: TableRef,
        *,
        mode: WriteMode,
        schema: StructType | None = None,
        run_id: str | None = None,
    ) -> Any:
        """A writer for Arrow tables already on the driver: ``write(table)`` repeatedly, then
        ``commit()`` (one atomic commit, returns the version) or ``abort()``. Unpartitioned
        tables and ``append``/``overwrite`` only; ``run_id`` as for :meth:`write`.

        Raises:
            ConfigError: a partitioned table, or another mode.
            SchemaError: the existing table, or a written Arrow table, does not match the contract.
        """
        check_write_mode(mode)  # the store refuses replace_where: it needs a DataFrame write
        spec = WriteSpec(
            schema=schema if schema is not None else _contract(ref), mode=mode,
            user_metadata=encode_user_metadata(mode, None, run_id), table_name=str(ref),
        )  # fmt: skip
        return self.store.arrow_writer(self._address(ref), spec)

    def worker_staging(self, ref: TableRef, **options: Unpack[WriteOptions]) -> Any | None:
        """A staging folder that Spark's Python workers write the table's Parquet files into,
        committed by the driver in one atomic commit with the checks of :meth:`write`; a context
        manager (an exception deletes what was staged). None with the native storage: the caller
        then uses :meth:`write`. Arguments as for :meth:`write`."""
        spec = _write_spec(ref, **options)
        return self.store.worker_staging(self._address(ref), spec)

    def delete_rows(self, ref: TableRef, column: str, values: set[str]) -> int | None:
        """Remove the rows whose ``column`` is in ``values``, in one untagged commit (history
        mode ``delete``), so no reader at the latest version sees them; returns its version, or
        None when no row matched (CommitError: nothing was removed)."""
        return self.store.delete_rows(
            self._address(ref), column, values,
            user_metadata=encode_user_metadata("delete", None), table_name=str(ref),
        )  # fmt: skip


def _contract(ref: TableRef) -> StructType:
    from gpope.shell.schemas import TABLE_SCHEMAS

    contract = TABLE_SCHEMAS.get(ref.table)
    if contract is None:
        raise ConfigError(
            f"Table {ref} has no contract in gpope.shell.schemas.TABLE_SCHEMAS; pass schema=... "
            "to Lake.write."
        )
    return contract


# ---------------------------------------------------------------------- short forms
def _write_spec(
    ref: TableRef,
    *,
    mode: WriteMode,
    schema: StructType | None = None,
    partition_by: list[str] | None = None,
    replace_where: Mapping[str, PartitionValue] | None = None,
    run_id: str | None = None,
    merge_schema: bool = False,
) -> WriteSpec:
    """The store's :class:`WriteSpec` of a :meth:`Lake.write` (contract schema by default)."""
    check_write_mode(mode)
    if (mode == "replace_where") != (replace_where is not None):
        raise ConfigError(
            "replace_where={...} is required with mode='replace_where' and not allowed with "
            f"other modes. Got mode={mode!r}, replace_where={replace_where!r}."
        )
    return WriteSpec(
        schema=schema if schema is not None else _contract(ref),
        mode=mode,
        user_metadata=encode_user_metadata(mode, replace_where, run_id),
        table_name=str(ref),
        partition_by=list(partition_by) if partition_by is not None else None,
        replace_where=replace_where,
        merge_schema=merge_schema,
    )


def _ref(layer: str, dataset: str, table: str) -> TableRef:
    return TableRef(layer, table, dataset)  # type: ignore[arg-type]


def _settings_location(settings: LakeSettings, ref: TableRef) -> str:
    if settings.catalog is not None and settings.schema is not None:
        return uc_table_name(settings.catalog, settings.schema, ref)
    return table_path(settings.root, ref)


def table_location(settings: LakeSettings, layer: str, dataset: str, table: str) -> str:
    """Where the per-dataset table lives (path or Unity Catalog name); no Spark needed."""
    return _settings_location(settings, _ref(layer, dataset, table))


def shared_table_location(settings: LakeSettings, table: str) -> str:
    """Where the shared gold table lives (path or Unity Catalog name); no Spark needed."""
    return _settings_location(settings, TableRef.shared(table))


def read_table(
    spark: SparkSession,
    settings: LakeSettings,
    layer: str,
    dataset: str,
    table: str,
    **options: Unpack[ReadOptions],
) -> DataFrame:
    """:meth:`Lake.read` of ``<layer>/<dataset>/<table>``."""
    return Lake.from_settings(spark, settings).read(_ref(layer, dataset, table), **options)


def read_shared_table(
    spark: SparkSession, settings: LakeSettings, table: str, **options: Unpack[ReadOptions]
) -> DataFrame:
    """:meth:`Lake.read` of the shared gold table ``table``."""
    return Lake.from_settings(spark, settings).read(TableRef.shared(table), **options)


def write_table(
    df: DataFrame,
    settings: LakeSettings,
    layer: str,
    dataset: str,
    table: str,
    **options: Unpack[WriteOptions],
) -> int:
    """:meth:`Lake.write` to ``<layer>/<dataset>/<table>`` (session taken from ``df``)."""
    lake = Lake.from_settings(df.sparkSession, settings)
    return lake.write(df, _ref(layer, dataset, table), **options)


def write_shared_table(
    df: DataFrame, settings: LakeSettings, table: str, **options: Unpack[WriteOptions]
) -> int:
    """:meth:`Lake.write` to the shared gold table ``table`` (session taken from ``df``)."""
    return Lake.from_settings(df.sparkSession, settings).write(df, TableRef.shared(table), **options)

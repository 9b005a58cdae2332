"""Table names: which Delta table a :class:`TableRef` means, as a path or a Unity Catalog name.

Pure string logic (no Spark, no I/O); nothing else in gpope builds table locations by hand.

Layout (docs/ARCHITECTURE.md section 2):

=====================  ==========================================  ====================================
ref                    path-based lake (``root``)                  Unity Catalog (``catalog.schema``)
=====================  ==========================================  ====================================
per-dataset table      ``<root>/<layer>/<dataset>/<table>``        ``<catalog>.<schema>.<dataset>__<table>``
shared table           ``<root>/gold/<table>``                     ``<catalog>.<schema>.<table>``
=====================  ==========================================  ====================================

In Unity Catalog the dataset is part of the table name, so per-dataset tables keep the columns
they have on a path-based lake; table names are unique across layers. Names are letters, digits
and ``_`` only: every form is a valid path segment and SQL identifier without escaping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from gpope.errors import ConfigError

__all__ = ["CREATORS", "LAYERS", "MAX_NAME_LENGTH", "SHARED_TABLES", "Layer", "TableRef",
           "check_name", "creator_hint", "repair_hint", "spark_path", "table_path", "uc_table_name"]

Layer = Literal["bronze", "silver", "gold"]
LAYERS: tuple[str, ...] = get_args(Layer)
SHARED_TABLES: frozenset[str] = frozenset(
    {"released_estimates", "released_values", "privacy_ledger", "pipeline_runs", "released_counts"}
)
"""Tables shared by all datasets; they live in the gold layer without a dataset segment."""

_NAME = re.compile(r"[A-Za-z0-9_]+")
MAX_NAME_LENGTH = 128
"""Longest dataset/table/catalog name (Unity Catalog names are at most 255 characters, and a
dataset is part of a table name there)."""
_UC_SEPARATOR = "__"

_BRONZE_CREATOR = ("`gpope load --dataset {dataset} --observations FILE --treatments FILE "
                   "--outcomes FILE` (your own files), or `gpope simulate --dataset {dataset}` "
                   "(a simulated cohort)")
#: Which command creates each known table (for "table not found" messages and the query views).
CREATORS: dict[str, str] = {
    "observations": _BRONZE_CREATOR,
    "treatments": _BRONZE_CREATOR,
    "outcomes": _BRONZE_CREATOR,
    "simulation": "`gpope simulate --dataset {dataset}`",
    "transitions": "`gpope ingest --dataset {dataset}`",
    "rejected_events": "`gpope ingest --dataset {dataset}`",
    "trajectory_stats": "`gpope stats --dataset {dataset} --spec FILE`",
    "released_estimates": "`gpope evaluate`",
    "released_values": "`gpope evaluate`",
    "pipeline_runs": "`gpope simulate`, `gpope ingest` or `gpope evaluate`",
    "privacy_ledger": "`gpope evaluate` or `gpope budget set`",
    "released_counts": "gpope.shell.pipeline.released_count.public_count (once per statistics "
                       "version)",
}


def check_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid name segment, else raise ConfigError.

    Guarantees: 1 to :data:`MAX_NAME_LENGTH` characters, all letters, digits or ``_`` (the whole
    string: a trailing newline is refused too).
    """
    if (
        not isinstance(value, str)
        or not _NAME.fullmatch(value)
        or len(value) > MAX_NAME_LENGTH
    ):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise ConfigError(
            f"The {kind!r} name must be 1 to {MAX_NAME_LENGTH} characters, each a letter, digit "
            f"or '_'. Got {shown}" + (f" ({len(value)} characters)." if isinstance(value, str) else ".")
        )
    return value


@dataclass(frozen=True)
class TableRef:
    """A logical table: layer, table name and the dataset (None: a shared gold table).

    Raises:
        ConfigError: unknown layer, invalid name, a shared table given a dataset (or the reverse).
    """

    layer: Layer
    table: str
    dataset: str | None = None

    def __post_init__(self) -> None:
        if self.layer not in LAYERS:
            raise ConfigError(
                f"The 'layer' of a TableRef must be one of {', '.join(LAYERS)}. "
                f"Got {self.layer!r} instead."
            )
        check_name("table", self.table)
        if self.dataset is None:
            if self.layer != "gold":
                raise ConfigError(
                    f"Table {self.layer}/{self.table} needs a dataset: only gold tables can be "
                    "shared across datasets."
                )
        else:
            check_name("dataset", self.dataset)
            if self.table in SHARED_TABLES:
                raise ConfigError(
                    f"Table {self.table!r} is shared by all datasets; use "
                    f"TableRef.shared({self.table!r}) instead of giving dataset={self.dataset!r}."
                )

    @classmethod
    def shared(cls, table: str) -> TableRef:
        """The shared gold table ``table`` (e.g. ``privacy_ledger``)."""
        return cls("gold", table)

    def __str__(self) -> str:
        if self.dataset is None:
            return f"{self.layer}/{self.table}"
        return f"{self.layer}/{self.dataset}/{self.table}"


def table_path(root: str | Path, ref: TableRef) -> str:
    """The location of ``ref`` under a path-based lake root.

    Local roots (a plain path or ``file:`` URI) give an absolute local path; other URIs
    (``dbfs:/``, ``s3://``, ``abfss://``...) are joined with ``/`` and kept as URIs.

    Guarantees: ``<root>/<layer>/<dataset>/<table>``, or ``<root>/gold/<table>`` for shared tables.
    """
    parts = [ref.layer, ref.table] if ref.dataset is None else [ref.layer, ref.dataset, ref.table]
    root_str = str(root)
    local = local_root(root_str)
    if local is not None:
        return str(local.joinpath(*parts))
    return "/".join([root_str.rstrip("/"), *parts])


def local_root(root: str) -> Path | None:
    """The absolute local directory of ``root``, or None when it is a non-local URI."""
    if root.startswith("file://"):
        return Path(root[len("file://") :]).resolve()
    if root.startswith("file:"):
        return Path(root[len("file:") :]).resolve()
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", root) and not re.match(r"^[A-Za-z]:[\\/]", root):
        return None  # a URI scheme (dbfs:, s3:, abfss:...), not a Windows drive letter
    return Path(root).expanduser().resolve()


def spark_path(path: str | Path) -> str:
    """A local path as Spark/Hadoop reads it literally: ``file:`` + glob characters escaped."""
    return "file:" + re.sub(r"([\\*?\[\]{}])", r"\\\1", str(path))


def uc_table_name(catalog: str, schema: str, ref: TableRef, *, quoted: bool = False) -> str:
    """The Unity Catalog name of ``ref``: ``catalog.schema.dataset__table`` or
    ``catalog.schema.table``, each part in backticks when ``quoted`` (ConfigError for an invalid
    catalog or schema)."""
    check_name("catalog", catalog)
    check_name("schema", schema)
    table = ref.table if ref.dataset is None else f"{ref.dataset}{_UC_SEPARATOR}{ref.table}"
    parts = (catalog, schema, table)
    return ".".join(f"`{p}`" for p in parts) if quoted else ".".join(parts)


#: Tables no stage can write again: their repair is a backup.
_NOT_REBUILT = ("privacy_ledger", "released_estimates", "released_values", "pipeline_runs")


def repair_hint(ref: TableRef) -> str:
    """A sentence naming how to repair ``ref`` when its files are damaged or missing."""
    creator = CREATORS.get(ref.table)
    if creator is None or ref.table in _NOT_REBUILT:
        return ("Restore the table's missing files from a backup (no stage can write this "
                "table's history again).")
    return (f"Re-run {creator.format(dataset=ref.dataset or 'NAME')} to write it again, or "
            "restore the missing files from a backup.")


def creator_hint(ref: TableRef) -> str:
    """A sentence naming the command that creates ``ref`` (for TableNotFoundError messages)."""
    creator = CREATORS.get(ref.table)
    if creator is None:
        return "Check the lake root (--lake) and run the stage that writes this table first."
    return (
        f"It is created by {creator.format(dataset=ref.dataset or 'NAME')}; run that first "
        "with the same lake (--lake / --catalog --schema)."
    )

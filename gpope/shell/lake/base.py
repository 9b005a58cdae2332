"""Small records shared by the storage backends: write modes, history entries, literals."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, get_args

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["WRITE_MODES", "HistoryEntry", "MissingDataFilesError", "MissingTableError",
           "PartitionValue", "StorageMode", "WriteMode", "WriteSpec", "check_data_files",
           "check_write_mode", "columns_to_add", "decode_user_metadata",
           "decode_user_metadata_run", "encode_user_metadata", "partition_string",
           "replace_where_sql", "spark_error", "spark_write_cause", "sql_in", "user_metadata_field"]

WriteMode = Literal["append", "overwrite", "replace_where"]
WRITE_MODES: tuple[str, ...] = get_args(WriteMode)
StorageMode = str  # ``auto`` or a registered store's name
PartitionValue = str | int | bool | dt.date | None

_USER_METADATA_KEY = "gpope.mode"
_RUN_KEY = "gpope.run"


class MissingTableError(LookupError):
    """Internal: the location holds no Delta table (the table layer turns it into a user error)."""


class MissingDataFilesError(LookupError):
    """Internal: ``files`` the table's log lists at ``version`` (None: the latest) are gone
    (the table layer names the table and its repair)."""

    def __init__(self, files: list[str], version: int | None) -> None:
        super().__init__(f"{len(files)} data file(s) missing, e.g. {files[0]}")
        self.files = files
        self.version = version


def check_data_files(paths: list[str], version: int | None) -> list[str]:
    """``paths`` when every file exists locally.

    Raises:
        MissingDataFilesError: some are missing (deleted by hand, a faulty copy or vacuum).
    """
    import os

    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise MissingDataFilesError(missing, version)
    return paths


@dataclass(frozen=True)
class WriteSpec:
    """How one commit writes a table: what the table layer hands every store's writers
    (``partition_by`` None keeps the table's; ``merge_schema``: see :func:`columns_to_add`)."""

    schema: StructType
    mode: WriteMode
    user_metadata: str
    table_name: str
    partition_by: list[str] | None = None
    replace_where: Mapping[str, PartitionValue] | None = None
    merge_schema: bool = False


@dataclass(frozen=True)
class HistoryEntry:
    """One commit of a Delta table: its version, UTC time, the engine's operation and
    parameters, the gpope write ``mode`` and stage ``run_id`` (None for commits made otherwise)
    and the commit's other fields as the engine reports them (``info``)."""

    version: int
    timestamp: dt.datetime
    operation: str
    mode: str | None
    parameters: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


def columns_to_add(current: StructType, contract: StructType) -> list[Any]:
    """The contract's fields a ``merge_schema`` write adds to a table of schema ``current``.

    Only an additive change qualifies: ``current`` has the contract's first columns (names and
    types; the store's own check compares the rest) and every missing column is nullable, so
    older rows read null. Anything else returns ``[]`` and the store's check reports the mismatch.
    """
    def shape(f: Any) -> tuple[str, Any]:
        return f.name, f.dataType.jsonValue()

    have, want = current.fields, contract.fields
    if len(have) >= len(want) or [shape(f) for f in have] != [shape(f) for f in want[:len(have)]]:
        return []
    extra = list(want[len(have):])
    return extra if all(f.nullable for f in extra) else []


def check_write_mode(mode: object) -> WriteMode:
    """Return ``mode`` if it is a write mode, else raise ConfigError listing the valid ones."""
    if mode not in WRITE_MODES:
        raise ConfigError(
            f"The 'mode' parameter of a table write must be one of {', '.join(WRITE_MODES)}. "
            f"Got {mode!r} instead."
        )
    return mode  # type: ignore[return-value]


def partition_string(value: PartitionValue) -> str | None:
    """The Delta partition-value string of ``value`` (``None`` stays null).

    Guarantees: the same strings Spark writes in partition directories and Delta stores in
    ``partitionValues``: ``"true"``/``"false"``, decimal integers, ISO dates, strings as is.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    raise ConfigError(
        "replace_where values must be str, int, bool, date or None (partition columns of those "
        f"types). Got {value!r} of type {type(value).__name__}."
    )


def _sql_literal(value: PartitionValue) -> str:
    text = str(partition_string(value))
    if isinstance(value, bool):
        return text.upper()
    if isinstance(value, int):
        return text
    if isinstance(value, dt.date):
        return f"DATE '{text}'"
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def replace_where_sql(replace_where: Mapping[str, PartitionValue]) -> str:
    """A Spark SQL predicate equal to the conjunction ``column = value`` of ``replace_where``."""
    terms = []
    for column, value in replace_where.items():
        name = "`" + column.replace("`", "``") + "`"
        terms.append(f"{name} IS NULL" if value is None else f"{name} = {_sql_literal(value)}")
    return " AND ".join(terms)


def sql_in(column: str, values: Iterable[str]) -> str:
    """A predicate ``column IN ('v1', ...)`` that Spark SQL and delta-rs parse alike.

    Raises:
        ConfigError: a column or value that is not a plain name (letters, digits, ``_``, ``-``,
            ``.``): such text would need quoting rules the two engines do not share.
    """
    import re

    texts = [column, *values]
    bad = [t for t in texts if not re.fullmatch(r"[A-Za-z0-9_.-]+", t)]
    if bad:
        raise ConfigError(f"Row predicates take plain names only; got {bad[:3]!r}.")
    return f"{column} IN (" + ", ".join(f"'{v}'" for v in sorted(values)) + ")"


def encode_user_metadata(
    mode: WriteMode | Literal["delete", "add_columns"],
    replace_where: Mapping[str, PartitionValue] | None,
    run_id: str | None = None,
) -> str:
    """The commit's ``userMetadata`` string: the gpope write mode (or ``delete`` for a row
    removal, ``add_columns`` for a schema change) and stage run (every store)."""
    payload: dict[str, Any] = {_USER_METADATA_KEY: mode}
    if run_id is not None:
        payload[_RUN_KEY] = run_id
    if replace_where:
        payload["replace_where"] = {k: partition_string(v) for k, v in replace_where.items()}
    return json.dumps(payload, sort_keys=True)


def user_metadata_field(text: object, key: str) -> str | None:
    """The string ``key`` of a ``userMetadata`` JSON object, or None when absent or unparsable."""
    if not isinstance(text, str):
        return None
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    value = payload.get(key) if isinstance(payload, dict) else None
    return value if isinstance(value, str) else None


def decode_user_metadata(text: object) -> str | None:
    """The gpope write mode recorded by :func:`encode_user_metadata`, or None."""
    return user_metadata_field(text, _USER_METADATA_KEY)


def decode_user_metadata_run(text: object) -> str | None:
    """The stage run id recorded by :func:`encode_user_metadata`, or None."""
    return user_metadata_field(text, _RUN_KEY)


_ERROR_LINE = r"^\s*((?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception)): (.+)$"


def spark_error(exc: BaseException) -> tuple[type[Exception] | None, str]:
    """The real error behind an exception Spark raised: ``(gpope error type or None, message)``.

    An error raised in a Python worker reaches the driver wrapped (``PythonException``,
    ``Py4JJavaError``) with a first line such as "An exception was thrown from the Python worker";
    the cause is the last ``Type: message`` line of the worker's traceback. When that type is a
    :mod:`gpope.errors` class it is returned too, so callers re-raise the same error.
    """
    import re

    from gpope import errors

    text = str(exc)
    found = re.findall(_ERROR_LINE, text, flags=re.MULTILINE)
    if not found:
        first = text.strip().splitlines()[0] if text.strip() else ""
        return None, f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    name, message = found[-1]
    cls = getattr(errors, name.rsplit(".", 1)[-1], None)
    if isinstance(cls, type) and issubclass(cls, errors.GpopeError):
        return cls, message.strip()
    return None, f"{name.rsplit('.', 1)[-1]}: {message.strip()}"


def spark_write_cause(exc: BaseException, table_name: str) -> str:
    """For a failed write of ``table_name``: re-raise the gpope error a Spark worker raised (same
    type, its message, "nothing was committed"), else return the cause's message for the caller's
    own :class:`~gpope.errors.CommitError`."""
    cls, cause = spark_error(exc)
    if cls is not None:  # a gpope error raised inside a Spark worker: keep it
        raise cls(f"{cause} (while writing {table_name}; nothing was committed)") from exc
    return cause

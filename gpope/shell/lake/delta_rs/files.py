"""The staged Parquet files of a delta-rs write: staging folders, footer checks, statistics
(steps 2 to 4 of the protocol in :mod:`gpope.shell.lake.delta_rs`). Nothing here opens the log.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import socket
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import CommitError, ConfigError, DataError, SchemaError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["HIVE_NULL", "STAGING_FOLDER", "STALE_STAGING_HOURS", "StagedFile",
           "check_replace_where", "check_replace_where_columns", "conform_arrow", "drop_staging",
           "new_staging", "remove_empty_dirs", "remove_stale_staging", "stage_files", "without"]

STAGING_FOLDER = "_gpope_staging"
"""Folder of a table where Spark writes before the commit (``_``: ignored by every reader)."""

STALE_STAGING_HOURS = 24.0
"""Staging folders older than this were left by killed runs; the next write removes them."""
#: This host in staging folder names (``-h<host>-p<pid>-``), so a later write on the same host
#: removes the folders of killed processes at once instead of after STALE_STAGING_HOURS.
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
_OWNER = re.compile(r"-h([0-9a-f]{8})-p([0-9]+)-")
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


@dataclass(frozen=True)
class StagedFile:
    path: str  # relative to the table root, safe characters only
    size: int
    modification_time: int  # ms since epoch
    partition_values: dict[str, str | None]
    num_records: int
    stats: str

def new_staging(root: Path, table_name: str) -> tuple[Path, str, Path]:
    """Create the table folder and a fresh staging folder (stale ones removed)."""
    _check_writable(root, table_name)
    token = (f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}-h{_HOST}-p{os.getpid()}-"
             f"{uuid.uuid4().hex[:12]}")
    staging_root = root / STAGING_FOLDER
    remove_stale_staging(staging_root)
    return root, token, staging_root / token

def drop_staging(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    staging_root = staging.parent
    if staging_root.is_dir() and not any(staging_root.iterdir()):
        try:
            staging_root.rmdir()
        except OSError:  # another writer staged meanwhile
            pass

def _check_writable(root: Path, table_name: str) -> None:
    """Create the table folder, or raise ConfigError naming the folder that refuses writes."""
    try:
        (root / STAGING_FOLDER).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"Cannot write {table_name}: {exc.strerror or exc} at {exc.filename or root!s}. The "
            "lake must be a writable directory (check --lake and its permissions)."
        ) from exc

def _owner_dead(folder: Path) -> bool:
    """True when ``folder`` was staged by a process of this host that no longer runs."""
    match = _OWNER.search(folder.name)
    if match is None or match.group(1) != _HOST:
        return False
    try:
        os.kill(int(match.group(2)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, ValueError):
        return False
    return False


def remove_stale_staging(staging_root: Path) -> None:
    """Delete staging folders that killed runs left behind: their process (on this host) is
    gone, or they are older than STALE_STAGING_HOURS (the run's own drop removes the root
    once it is empty)."""
    if not staging_root.is_dir():
        return
    cutoff = time.time() - STALE_STAGING_HOURS * 3600
    for folder in staging_root.iterdir():
        try:
            if _owner_dead(folder) or folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
        except FileNotFoundError:  # another writer removed it
            continue

def remove_empty_dirs(root: Path, files: list[Path]) -> None:
    """Remove the now-empty partition folders of ``files`` (up to, not including, ``root``)."""
    for directory in sorted({f.parent for f in files}, key=lambda d: -len(d.parts)):
        while directory != root and root in directory.parents:
            try:
                directory.rmdir()
            except OSError:  # not empty (other files live there), or gone
                break
            directory = directory.parent

def without(schema: StructType, columns: list[str]) -> StructType:
    from pyspark.sql.types import StructType

    return StructType([f for f in schema.fields if f.name not in set(columns)])

def stage_files(
    root: Path,
    staging: Path,
    token: str,
    partitions: list[str],
    data_schema: StructType,
    table_name: str,
    moved: list[Path],
    reported: set[str] | None = None,
) -> list[StagedFile]:
    """Check every file Spark staged, move it to its Hive-style place, build add-action records.

    With ``reported`` (paths relative to ``staging``), only those files are taken (a file a
    failed task attempt left is not), and each of them must exist. Appends each moved file to
    ``moved`` as soon as it is moved (so a failure can delete it).
    """
    import pyarrow.parquet as pq

    found: list[tuple[Path, Path, dict[str, str | None]]] = []
    for directory, _, names in os.walk(staging):
        for name in names:
            file = Path(directory) / name
            if reported is not None and file.relative_to(staging).as_posix() not in reported:
                continue
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                relative = file.parent.relative_to(staging)
                found.append((file, relative, _partition_values(relative, partitions)))
    if reported is not None and len(found) != len(reported):
        missing = sorted(reported - {f.relative_to(staging).as_posix() for f, _, _ in found})
        raise CommitError(
            f"The Spark tasks writing {table_name} reported files that are not staged under "
            f"{staging} (or not Parquet files): {missing[:5]}. Nothing was committed."
        )
    expected = [(f.name, _spark_type_key(f.dataType)) for f in data_schema.fields]
    staged = []
    for index, (file, relative, values) in enumerate(sorted(found)):
        metadata = pq.read_metadata(file)
        arrow_schema = metadata.schema.to_arrow_schema()
        got = [(f.name, _arrow_type_key(f.type)) for f in arrow_schema]
        if got != expected:
            raise SchemaError(
                f"A Parquet file written for {table_name} has columns {got}, but the table's "
                f"data columns are {expected}. Nothing was committed."
            )
        if metadata.num_rows == 0:
            continue
        name = f"part-{index:05d}-{token}.snappy.parquet"
        if urllib.parse.quote(relative.as_posix(), safe="/=") != relative.as_posix():
            # Readers disagree on how an escaped folder name is encoded in the log (delta-rs
            # opens the encoded path literally): keep such rare values out of folder names.
            relative = Path("gpope-escaped")
        target = root / relative / name
        target.parent.mkdir(parents=True, exist_ok=True)
        file.rename(target)
        moved.append(target)
        stat = target.stat()
        staged.append(
            StagedFile(
                path=(relative / name).as_posix(),
                size=stat.st_size,
                modification_time=int(stat.st_mtime * 1000),
                partition_values=values,
                num_records=metadata.num_rows,
                stats=_stats(metadata, arrow_schema),
            )
        )
    return staged

def _partition_values(relative: Path, partitions: list[str]) -> dict[str, str | None]:
    parts = [p for p in relative.parts if p not in ("", ".")]
    names = [p.split("=", 1)[0] for p in parts]
    if names != partitions:
        raise CommitError(
            f"Spark wrote a file under {relative}, which does not match the partition columns "
            f"{partitions}. Nothing was committed."
        )
    values: dict[str, str | None] = {}
    for part in parts:
        name, raw = part.split("=", 1)
        values[name] = None if raw == HIVE_NULL else urllib.parse.unquote(raw)
    return values

def check_replace_where_columns(
    replace_where: Mapping[str, str | None] | None, partitions: list[str], table_name: str
) -> None:
    if replace_where is not None:
        unknown = sorted(set(replace_where) - set(partitions))
        if unknown or not replace_where:
            raise ConfigError(
                f"replace_where on {table_name} must name partition columns {partitions}; "
                f"got {sorted(replace_where)}. Partition the table by the columns a job "
                "replaces (partition_by=...)."
            )

def check_replace_where(
    files: list[StagedFile], replace_where: Mapping[str, str | None], table_name: str
) -> None:
    for file in files:
        outside = {
            c: file.partition_values.get(c)
            for c, v in replace_where.items()
            if file.partition_values.get(c) != v
        }
        if outside:
            raise DataError(
                f"The rows written to {table_name} with replace_where={dict(replace_where)} "
                f"include rows with {outside}; a replace_where write may only contain rows of the "
                "partition it replaces. Nothing was committed."
            )

def conform_arrow(table: pa.Table, schema: pa.Schema, table_name: str) -> pa.Table:
    """``table`` with exactly ``schema``'s columns and types, or SchemaError (see contract rules)."""
    import pyarrow as pa

    names = table.column_names
    want = schema.names
    if names != want:
        raise SchemaError(
            f"The Arrow table written to {table_name} has columns {names}; the contract's are "
            f"{want} (same names, same order)."
        )
    columns = []
    for field in schema:
        column = table.column(field.name)
        if not field.nullable and column.null_count:
            raise SchemaError(
                f"Column {field.name!r} of {table_name} is NOT NULL in the contract, but the "
                "Arrow table has null values there. Nothing was committed."
            )
        if column.type != field.type:
            naive_time = pa.types.is_timestamp(column.type) and pa.types.is_timestamp(field.type)
            if not (naive_time and column.type.unit == field.type.unit and column.type.tz is None):
                try:
                    column = column.cast(field.type, safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise SchemaError(
                        f"Column {field.name!r} of the Arrow table written to {table_name} has "
                        f"type {column.type}, which does not convert without loss to "
                        f"{field.type} ({exc})."
                    ) from exc
            else:  # a naive timestamp is UTC wall-clock time (the lake's time zone)
                column = column.cast(field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema)

def _stats(metadata: Any, arrow_schema: pa.Schema) -> str:
    """Delta file statistics of flat columns: ``numRecords``, ``nullCount``, min and max values.

    Min/max come from the row-group statistics of the footer; a column gets them only when every
    row group has them and they are finite (floats) and short (strings up to 32 characters, so
    no truncated bound is ever recorded as exact).
    """
    import pyarrow as pa

    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    paths = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    null_count: dict[str, int] = {}
    minimum: dict[str, Any] = {}
    maximum: dict[str, Any] = {}
    for field in arrow_schema:
        if pa.types.is_nested(field.type) or field.name not in paths:
            continue
        column, total = paths[field.name], 0
        lows: list[Any] = []
        highs: list[Any] = []
        bounded = True
        for group in range(metadata.num_row_groups):
            column_stats = metadata.row_group(group).column(column).statistics
            if column_stats is None or not column_stats.has_null_count:
                break
            total += column_stats.null_count
            if column_stats.has_min_max:
                lows.append(column_stats.min)
                highs.append(column_stats.max)
            elif column_stats.null_count != metadata.row_group(group).num_rows:
                bounded = False
        else:
            null_count[field.name] = total
            if bounded and lows:
                low = _json_bound(min(lows), field.type)
                high = _json_bound(max(highs), field.type, upper=True)
                if low is not None and high is not None:
                    minimum[field.name], maximum[field.name] = low, high
    if minimum:
        stats["minValues"] = minimum
        stats["maxValues"] = maximum
    if null_count:
        stats["nullCount"] = null_count
    return json.dumps(stats, allow_nan=False)

def _json_bound(value: Any, dtype: pa.DataType, *, upper: bool = False) -> Any:
    """A footer min/max as the JSON value Delta statistics use, or None if it cannot be exact.

    Timestamps have millisecond precision in Delta statistics: an upper bound is rounded up.
    """
    import math

    import pyarrow as pa

    if value is None:
        return None
    if pa.types.is_timestamp(dtype):
        if not isinstance(value, dt.datetime):
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        if upper and value.microsecond % 1000:
            value += dt.timedelta(microseconds=1000 - value.microsecond % 1000)
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if pa.types.is_date(dtype):
        return value.isoformat() if isinstance(value, dt.date) else None
    if pa.types.is_boolean(dtype):
        return bool(value)
    if pa.types.is_integer(dtype):
        return int(value)
    if pa.types.is_floating(dtype):
        number = float(value)
        return number if math.isfinite(number) else None
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        text = value.decode() if isinstance(value, bytes) else str(value)
        return text if len(text) <= 32 else None
    return None

def _spark_type_key(dtype: Any) -> str:
    """A canonical type string (no nullability, no list field names) of a Spark type."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, ArrayType):
        return f"array<{_spark_type_key(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"map<{_spark_type_key(dtype.keyType)},{_spark_type_key(dtype.valueType)}>"
    if isinstance(dtype, StructType):
        return (
            "struct<"
            + ",".join(f"{f.name}:{_spark_type_key(f.dataType)}" for f in dtype.fields)
            + ">"
        )
    return {
        "timestamp": "timestamp[us,UTC]",
        "timestamp_ntz": "timestamp[us]",
        "tinyint": "int8",
        "smallint": "int16",
        "int": "int32",
        "bigint": "int64",
        "float": "float",
        "double": "double",
        "boolean": "bool",
        "string": "string",
        "binary": "binary",
        "date": "date32",
    }.get(dtype.simpleString(), dtype.simpleString())

def _arrow_type_key(dtype: pa.DataType) -> str:
    """The same canonical string for an Arrow type read from a Parquet footer."""
    import pyarrow as pa

    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return f"array<{_arrow_type_key(dtype.value_type)}>"
    if pa.types.is_map(dtype):
        return f"map<{_arrow_type_key(dtype.key_type)},{_arrow_type_key(dtype.item_type)}>"
    if pa.types.is_struct(dtype):
        return "struct<" + ",".join(f"{f.name}:{_arrow_type_key(f.type)}" for f in dtype) + ">"
    if pa.types.is_timestamp(dtype):
        tz = "UTC" if dtype.tz in ("UTC", "+00:00", "Etc/UTC") else dtype.tz
        return f"timestamp[{dtype.unit}{',' + tz if tz else ''}]"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "string"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return "binary"
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    return {"float32": "float", "float64": "double"}.get(str(dtype), str(dtype))

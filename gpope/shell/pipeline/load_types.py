"""Extracts as tools write them: the Parquet types and times of ``gpope load``'s files.

pandas and pyarrow write times as ``TIMESTAMP(NANOS)``, which Spark cannot read as a timestamp;
tz-aware columns are instants, naive columns wall-clock times. :func:`inspect_parquet` reads the
local footers (before Spark starts) and refuses, in one line, a contract column of a type the
contract cannot hold or a time unit that differs between files; :data:`NANOS_AS_LONG` makes Spark
read nanosecond columns as longs and :func:`times_as_instants` turns them into UTC instants
(naive times read in the declared zone); :func:`localize_text` does the same for CSV text times.
Nothing here copies the data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpope.errors import ConfigError, SchemaError

if TYPE_CHECKING:
    from pyspark.sql import Column, SparkSession

__all__ = ["NANOS_AS_LONG", "ParquetTimes", "check_time_zone", "inspect_parquet",
           "localize_text", "set_nanos_as_long", "times_as_instants"]

#: The Spark SQL setting under which Parquet ``TIMESTAMP(NANOS)`` columns read as longs.
NANOS_AS_LONG = "spark.sql.legacy.parquet.nanosAsLong"

#: Per contract type, the kinds of Parquet column that load accepts for it (kinds of
#: :func:`_kind`), and what to do instead.
_ACCEPTED: dict[str, tuple[frozenset[str], str]] = {
    "string": (frozenset({"text", "integer", "uint64", "null"}),
               "ids and codes are text or integers: convert the column "
               "(pandas: df[COLUMN] = df[COLUMN].astype('Int64') or .astype(str))"),
    "timestamp": (frozenset({"timestamp", "text", "null"}),
                  "times are timestamps (any unit, with or without a time zone) or text: "
                  "convert the column (pandas: df[COLUMN] = pd.to_datetime(df[COLUMN]))"),
    "double": (frozenset({"integer", "float", "text", "null"}),
               "numbers are integers or 32/64-bit floats: convert the column "
               "(pandas: df[COLUMN] = df[COLUMN].astype('float64'))"),
}
#: The contract's type of each bronze column (the full schemas are in gpope.shell.schemas).
_CONTRACT_TYPE = {"patient_id": "string", "variable": "string", "action": "string",
                  "time": "timestamp", "value": "double", "propensity": "double",
                  "reward": "double"}


def check_time_zone(zone: str | None) -> str | None:
    """``zone`` if it names a time zone of the IANA database (``Europe/Berlin``, ``UTC``).

    Raises:
        ConfigError: an unknown zone name.
    """
    if zone is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"--time-zone {zone!r} is not a time zone name; give an IANA name "
                          "such as Europe/Berlin, America/New_York or UTC.") from None
    return zone


@dataclass(frozen=True)
class ParquetTimes:
    """How a table's Parquet files hold their times (source column names, before renames).

    Attributes:
        nanos: ``TIMESTAMP(NANOS)`` columns: Spark reads them as longs (:data:`NANOS_AS_LONG`).
        naive: timestamp columns without a time zone (``isAdjustedToUTC=false``, or legacy
            ``INT96`` times, which carry none): wall-clock times.
    """

    nanos: frozenset[str] = frozenset()
    naive: frozenset[str] = frozenset()


def _kind(dtype: object) -> str:
    """The kind of an Arrow type as load's rules see it (``text``, ``integer``...)."""
    import pyarrow as pa

    if pa.types.is_dictionary(dtype):
        dtype = dtype.value_type
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return "text"
    if pa.types.is_uint64(dtype):  # Spark reads it as decimal(20,0)
        return "uint64"
    if pa.types.is_integer(dtype):
        return "integer"
    if pa.types.is_float32(dtype) or pa.types.is_float64(dtype):
        return "float"
    if pa.types.is_timestamp(dtype):
        return "timestamp"
    if pa.types.is_null(dtype):
        return "null"
    return str(dtype)


def inspect_parquet(table: str, files: Sequence[str], renamed: Mapping[str, str],
                    contract: Sequence[str]) -> ParquetTimes:
    """The times of ``table``'s local Parquet ``files`` (footers only), after checking that
    every contract column present has a type load reads into the contract's and each timestamp
    column one unit and one time-zone kind across the files (else SchemaError naming them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sources = {renamed.get(c, c): c for c in contract}
    seen: dict[str, tuple[str, str]] = {}  # column -> (its timestamp type, the first file)
    nanos: set[str] = set()
    naive: set[str] = set()
    for path in files:
        try:
            with pq.ParquetFile(path) as footer:  # one read of the footer per file
                schema, stored = footer.schema_arrow, footer.metadata.schema
        except Exception:  # an unreadable file is reported by Spark, with its own error
            continue
        # legacy INT96 times (Impala, Hive, old Spark): pyarrow says ns, Spark reads timestamps
        int96 = {stored.column(i).path for i in range(len(stored))
                 if stored.column(i).physical_type == "INT96"}
        for field in schema:
            bronze = sources.get(field.name)
            if bronze is not None:
                accepted, advice = _ACCEPTED[_CONTRACT_TYPE[bronze]]
                if _kind(field.type) not in accepted:
                    raise SchemaError(
                        f"The {table} file {path}: column {field.name!r} (bronze {bronze}) has "
                        f"Parquet type {field.type}, which the bronze contract cannot read as "
                        f"{_CONTRACT_TYPE[bronze]}; {advice.replace('COLUMN', repr(field.name))},"
                        " then write the file and load again.")
            if not pa.types.is_timestamp(field.type):
                continue
            kind = f"{field.type} (INT96)" if field.name in int96 else str(field.type)
            if field.name in seen and seen[field.name][0] != kind:
                raise SchemaError(
                    f"The {table} files give column {field.name!r} two types: "
                    f"{seen[field.name][0]} in {seen[field.name][1]} and {kind} in {path}; "
                    "write every file of a table with the same time unit and time zone, then "
                    "load again.")
            seen.setdefault(field.name, (kind, path))
            if field.type.unit == "ns" and field.name not in int96:
                nanos.add(field.name)
            if field.type.tz is None:
                naive.add(field.name)
    return ParquetTimes(nanos=frozenset(nanos), naive=frozenset(naive))


def set_nanos_as_long(spark: SparkSession, value: str | None, *, where: str | None = None
                      ) -> None:
    """Set :data:`NANOS_AS_LONG` to ``value`` on the session (None: unset it). With ``where``
    (the files that need it) a session that refuses the setting raises SchemaError saying how to
    write the files instead; without, it is a best-effort restore."""
    try:
        if value is None:
            spark.conf.unset(NANOS_AS_LONG)
        else:
            spark.conf.set(NANOS_AS_LONG, value)
    except Exception as exc:
        if where is None:
            return
        raise SchemaError(
            f"{where} hold(s) nanosecond times (as pandas writes them), and this Spark session "
            f"refuses the setting that reads them, {NANOS_AS_LONG} ({type(exc).__name__}); write "
            "the times in microseconds (pandas: df.to_parquet(path, coerce_timestamps='us', "
            "allow_truncated_timestamps=True)), then load again.") from None


def times_as_instants(name: str, *, nanos: bool, naive: bool, zone: str | None) -> Column:
    """A timestamp column (UTC instants) from a Parquet time column as Spark read it:
    nanoseconds since the epoch (``nanos``, floored to the microsecond) or a timestamp; a
    ``naive`` time is a wall-clock time in ``zone`` (UTC when None)."""
    from pyspark.sql import functions as F

    quoted = "`" + name.replace("`", "``") + "`"
    if nanos:  # floor division, exact in longs
        column = F.timestamp_micros(F.expr(f"({quoted} - pmod({quoted}, 1000)) div 1000"))
    else:
        column = F.col(quoted).cast("timestamp")  # timestamp_ntz: its wall clock read as UTC
    if naive and zone is not None:
        column = F.to_utc_timestamp(column, zone)
    return column


#: Text times without an offset or zone: ``2024-03-01``, ``2024-03-01 08:30``,
#: ``2024-03-01T08:30:00.123456789`` (what ``DataFrame.to_csv`` writes for naive times).
_LOCAL_TEXT = r"^\s*\d{4}-\d{1,2}-\d{1,2}([ T]\d{1,2}(:\d{1,2}(:\d{1,2}(\.\d+)?)?)?)?\s*$"


def localize_text(column: Column, zone: str) -> Column:
    """A text time column with each time that has no UTC offset replaced by its UTC instant as
    wall-clock time in ``zone`` (ISO text ending in ``Z``); times with an offset, and text that
    is no time (quarantined by ``gpope ingest`` as ``unparsable time``), are kept as they are.
    The session's time zone must be UTC (gpope's sessions are)."""
    from pyspark.sql import functions as F

    local = column.try_cast("timestamp")
    utc = F.date_format(F.to_utc_timestamp(local, zone), "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")
    return F.when(column.rlike(_LOCAL_TEXT) & local.isNotNull(), utc).otherwise(column)

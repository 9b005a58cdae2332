"""Bronze tables checked against their contract before ingest.

Raw tables come from other tools, so each is checked here, once: a missing ``propensity`` column
is allowed (not logged: ``behavior_prob`` null); any other missing column, or one whose type
cannot hold the contract's values, stops ingest with one line (:class:`~gpope.errors.SchemaError`);
a lossless type is cast; a **string** column where the contract has a number or a timestamp is
parsed row by row, a row that does not parse quarantined as ``unparsable <column>`` with its raw
row. :func:`conform_bronze` adds two private columns for :mod:`.ingest_frames`: ``_unparsable``
(the reason, or null) and ``_raw`` (such a row as JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpope.errors import SchemaError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["OPTIONAL_COLUMNS", "RAW_COLUMN", "UNPARSABLE_COLUMN", "conform_bronze",
           "propensities_logged", "unparsable_reason"]

UNPARSABLE_COLUMN = "_unparsable"
RAW_COLUMN = "_raw"
_PARSED_TYPES = ("double", "timestamp")

#: Contract columns a delivery may leave out (table -> columns): read as null.
OPTIONAL_COLUMNS = {"treatments": ("propensity",)}


def propensities_logged(columns: list[str] | tuple[str, ...]) -> bool:
    """Whether a bronze treatments table with these columns (its schema, public) logs the
    behaviour probabilities: it has a ``propensity`` column. Without one the evaluation estimates
    them (docs/OWN_DATA.md, "Without logged propensities")."""
    return "propensity" in columns


def unparsable_reason(column: str) -> str:
    """The rejection reason of a value of ``column`` that does not parse."""
    return f"unparsable {column}"


def conform_bronze(df: DataFrame, table: str, location: str) -> DataFrame:
    """``df`` with exactly the bronze contract's columns of ``table`` and the parse markers.

    Raises:
        SchemaError: a contract column is missing or has a type that cannot hold its values.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType, StringType

    from gpope.shell.lake.contract import is_safe_cast
    from gpope.shell.schemas import TABLE_SCHEMAS

    contract = TABLE_SCHEMAS[table]
    have = {f.name: f.dataType for f in df.schema.fields}
    columns, failures = [], []
    for field in contract.fields:
        expected = field.dataType.simpleString()
        if field.name not in have and field.name in OPTIONAL_COLUMNS.get(table, ()):
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
            continue
        if field.name not in have:
            raise SchemaError(
                f"Bronze table {location}: column {field.name!r} is missing (expected "
                f"{expected}); found columns {sorted(have)}. Deliver the column, then ingest again."
            )
        src = have[field.name]
        found = src.simpleString()
        col = F.col(f"`{field.name}`")
        if found == expected:
            columns.append(col.alias(field.name))
        elif is_safe_cast(src, field.dataType) or (
            expected == "string" and (found in ("tinyint", "smallint", "int", "bigint")
                                      or (isinstance(src, DecimalType) and src.scale == 0))
        ):  # integral ids and codes as text (an unsigned 64-bit one reads as decimal(20,0))
            columns.append(col.cast(field.dataType).alias(field.name))
        elif isinstance(src, StringType) and expected in _PARSED_TYPES:
            parsed = col.try_cast(field.dataType)
            columns.append(parsed.alias(field.name))
            failures.append((col.isNotNull() & parsed.isNull(), unparsable_reason(field.name)))
        else:
            raise SchemaError(
                f"Bronze table {location}: column {field.name!r} has type {found}, expected "
                f"{expected} (a string column is parsed row by row; {found} cannot be). Fix the "
                "delivery, then ingest again."
            )
    if failures:
        reason = F.when(failures[0][0], F.lit(failures[0][1]))
        for condition, text in failures[1:]:
            reason = reason.when(condition, F.lit(text))
        raw = F.to_json(
            F.struct(*[F.col(f"`{f.name}`") for f in contract.fields]), {"ignoreNullFields": "false"}
        )
        return df.select(
            *columns,
            reason.alias(UNPARSABLE_COLUMN),
            F.when(reason.isNotNull(), raw).alias(RAW_COLUMN),
        )
    return df.select(
        *columns,
        F.lit(None).cast("string").alias(UNPARSABLE_COLUMN),
        F.lit(None).cast("string").alias(RAW_COLUMN),
    )

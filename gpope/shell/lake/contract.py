"""Validate a DataFrame against a table contract (a pyspark ``StructType``) before writing.

Rules:

- Column names must match the contract exactly (case-sensitive); missing and extra columns are
  reported together in one :class:`~gpope.errors.SchemaError`.
- Types must be equal, or widen without loss: integral types to wider integral types;
  byte/short/int/float to double; byte/short to float; a ``NULL``-typed column to anything;
  arrays element-wise. Anything else (long to double, double to float, string to number...) is
  refused instead of cast silently.
- Nullability: where the contract says NOT NULL and the DataFrame cannot prove it, a guard is added
  that fails the write with a message naming the column when a null turns up (top-level columns
  and array elements), the check Delta itself makes on a cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpope.errors import SchemaError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

__all__ = ["NULL_GUARD_MARKER", "conform", "is_safe_cast", "null_guard_column"]

NULL_GUARD_MARKER = "gpope NOT NULL violated in column "
"""Prefix of the error a null guard raises inside Spark (the writer turns it into SchemaError)."""

_INTEGRAL_RANK = {"tinyint": 1, "smallint": 2, "int": 3, "bigint": 4}


def is_safe_cast(src: DataType, dst: DataType) -> bool:
    """True when every value of type ``src`` converts to ``dst`` without loss (see module rules)."""
    from pyspark.sql.types import ArrayType, NullType

    if src.simpleString() == dst.simpleString():  # equal up to nullability
        return True
    if isinstance(src, NullType):
        return True
    if isinstance(src, ArrayType) and isinstance(dst, ArrayType):
        return is_safe_cast(src.elementType, dst.elementType)
    s, d = src.simpleString(), dst.simpleString()
    if s in _INTEGRAL_RANK and d in _INTEGRAL_RANK:
        return _INTEGRAL_RANK[s] <= _INTEGRAL_RANK[d]
    if d == "double":
        return s in ("tinyint", "smallint", "int", "float")
    if d == "float":
        return s in ("tinyint", "smallint")
    return False


def conform(df: DataFrame, schema: StructType, *, table: str) -> DataFrame:
    """``df`` with exactly the contract's columns in order, cast where the cast is safe, with
    null guards on NOT NULL columns it does not already guarantee.

    Raises:
        SchemaError: duplicate, missing or extra columns, or a type that cannot be cast safely.
    """
    from pyspark.sql import functions as F

    names = [f.name for f in df.schema.fields]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaError(f"The DataFrame written to {table} has duplicate columns {duplicates}.")
    have = {f.name: f for f in df.schema.fields}
    want = [f.name for f in schema.fields]
    missing = [n for n in want if n not in have]
    extra = [n for n in names if n not in set(want)]
    if missing or extra:
        raise SchemaError(
            f"The DataFrame written to {table} does not have the contract's columns: missing "
            f"{missing}, unexpected {extra}. Expected exactly {want} "
            "(select/rename the columns to match gpope.shell.schemas)."
        )
    bad = [
        f"{f.name}: got {have[f.name].dataType.simpleString()}, "
        f"expected {f.dataType.simpleString()}"
        for f in schema.fields
        if not is_safe_cast(have[f.name].dataType, f.dataType)
    ]
    if bad:
        raise SchemaError(
            f"The DataFrame written to {table} has column types that cannot be cast safely to "
            f"the contract: {'; '.join(bad)}. Cast them explicitly in the producing job."
        )
    columns = []
    for field in schema.fields:
        src = have[field.name]
        col = F.col(f"`{field.name}`")
        if src.dataType.simpleString() != field.dataType.simpleString():
            col = col.cast(field.dataType)
        guarded = null_guard_column(col, field.name, src.nullable, src.dataType, field)
        columns.append(guarded.alias(field.name, metadata=field.metadata or {}))
    return df.select(*columns)


def null_guard_column(
    col: Column, name: str, src_nullable: bool, src_type: DataType, field: object
) -> Column:
    """``col`` wrapped so that a null where the contract forbids one fails the Spark job.

    Only the checks the source schema does not already guarantee are added: a top-level null
    for a NOT NULL column, a null element for an array whose elements are NOT NULL.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, StructField

    if not isinstance(field, StructField):  # pragma: no cover - internal misuse
        raise TypeError("field must be a StructField")
    conditions = []
    if not field.nullable and src_nullable:
        conditions.append(col.isNull())
    dst_type = field.dataType
    if (
        isinstance(dst_type, ArrayType)
        and not dst_type.containsNull
        and (not isinstance(src_type, ArrayType) or src_type.containsNull)
    ):
        conditions.append(F.coalesce(F.exists(col, lambda e: e.isNull()), F.lit(False)))
    if not conditions:
        return col
    condition = conditions[0]
    for extra in conditions[1:]:
        condition = condition | extra
    return F.when(condition, F.raise_error(F.lit(NULL_GUARD_MARKER + name))).otherwise(col)

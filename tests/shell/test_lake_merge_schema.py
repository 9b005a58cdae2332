"""Which contract changes a merge_schema write applies to an existing table (no Spark needed):
only nullable columns added at the contract's end; anything else is left to the store's check."""

from __future__ import annotations

from pyspark.sql.types import DoubleType, StringType, StructField, StructType

from gpope.shell.lake.base import columns_to_add


def _schema(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(n, t, nullable) for n, t, nullable in fields])  # type: ignore[arg-type]


OLD = _schema(("state", StringType(), False), ("value", DoubleType(), False))


def test_nullable_columns_at_the_end_are_added():
    new = _schema(("state", StringType(), False), ("value", DoubleType(), False),
                  ("estimand", StringType(), True), ("note", StringType(), True))
    assert [f.name for f in columns_to_add(OLD, new)] == ["estimand", "note"]
    assert columns_to_add(new, new) == [] and columns_to_add(new, OLD) == []


def test_other_changes_are_not_merged():
    not_null = _schema(("state", StringType(), False), ("value", DoubleType(), False),
                       ("estimand", StringType(), False))
    retyped = _schema(("state", StringType(), False), ("value", StringType(), False),
                      ("estimand", StringType(), True))
    inserted = _schema(("state", StringType(), False), ("estimand", StringType(), True),
                       ("value", DoubleType(), False))
    for contract in (not_null, retyped, inserted):
        assert columns_to_add(OLD, contract) == []

"""The table contracts of DESIGN.md section 2, defined once as Spark schemas.

Column names and types here are the contract every job writes and every reader relies on; the
table layer validates DataFrames against them before committing.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "OBSERVATIONS",
    "OUTCOMES",
    "PRIVACY_LEDGER",
    "REJECTED_EVENTS",
    "RELEASED_ESTIMATES",
    "TABLE_SCHEMAS",
    "TRAJECTORY_STATS",
    "TRANSITIONS",
    "TREATMENTS",
]


def _schema(*fields: tuple[str, object, bool]) -> StructType:
    return StructType([StructField(name, dtype, nullable) for name, dtype, nullable in fields])  # type: ignore[arg-type]


# bronze: raw, as delivered (nullable: bad rows are quarantined by ingest, not refused on write)
OBSERVATIONS = _schema(
    ("patient_id", StringType(), True),
    ("time", TimestampType(), True),
    ("variable", StringType(), True),
    ("value", DoubleType(), True),
)
TREATMENTS = _schema(
    ("patient_id", StringType(), True),
    ("time", TimestampType(), True),
    ("action", StringType(), True),
    ("propensity", DoubleType(), True),
)
OUTCOMES = _schema(
    ("patient_id", StringType(), True),
    ("time", TimestampType(), True),
    ("reward", DoubleType(), True),
)

# silver
TRANSITIONS = _schema(
    ("patient_id", StringType(), False),
    ("traj_index", LongType(), False),
    ("t", IntegerType(), False),
    ("state", ArrayType(DoubleType(), False), False),
    ("action", IntegerType(), False),
    ("behavior_prob", DoubleType(), False),
    ("reward", DoubleType(), False),
    ("next_state", ArrayType(DoubleType(), False), False),
    ("terminal", BooleanType(), False),
    ("truncated", BooleanType(), False),
)
REJECTED_EVENTS = _schema(
    ("table", StringType(), False),
    ("reason", StringType(), False),
    ("row", StringType(), False),
)

# gold
TRAJECTORY_STATS = _schema(
    ("spec_id", StringType(), False),
    ("traj_index", LongType(), False),
    ("tau", IntegerType(), False),
    ("A", ArrayType(DoubleType(), False), False),
    ("b", ArrayType(DoubleType(), False), False),
    ("C", ArrayType(DoubleType(), False), False),
)
RELEASED_ESTIMATES = _schema(
    ("run_id", StringType(), False),
    ("dataset", StringType(), False),
    ("spec_id", StringType(), False),
    ("policy", StringType(), False),
    ("epsilon", DoubleType(), False),
    ("delta", DoubleType(), False),
    ("accountant", StringType(), False),
    ("created_at", TimestampType(), False),
    ("theta", ArrayType(DoubleType(), False), False),
    ("reference_states", ArrayType(StringType(), False), False),
    ("values", ArrayType(DoubleType(), False), False),
    ("private", BooleanType(), False),  # False: fixed seed (experiments/tests), not a DP release
)
PRIVACY_LEDGER = _schema(
    ("dataset", StringType(), False),
    ("run_id", StringType(), False),
    ("mechanism", StringType(), False),
    ("epsilon", DoubleType(), False),
    ("delta", DoubleType(), False),
    ("accountant", StringType(), False),
    ("status", StringType(), False),
    ("created_at", TimestampType(), False),
)

TABLE_SCHEMAS: dict[str, StructType] = {
    "observations": OBSERVATIONS,
    "treatments": TREATMENTS,
    "outcomes": OUTCOMES,
    "transitions": TRANSITIONS,
    "rejected_events": REJECTED_EVENTS,
    "trajectory_stats": TRAJECTORY_STATS,
    "released_estimates": RELEASED_ESTIMATES,
    "privacy_ledger": PRIVACY_LEDGER,
}

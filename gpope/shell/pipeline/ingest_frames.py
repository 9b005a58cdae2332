"""Bronze event tables -> silver transitions and rejected events, as pure DataFrame transformations.

Everything here is a function of DataFrames (no table I/O), built only from Spark SQL operators
(filters, joins, window functions, aggregations): no Python UDF, no Python worker, linear in the
number of events and partitioned by patient, so it runs unchanged on ``local[*]``, a
``local-cluster`` or Databricks. :mod:`gpope.shell.pipeline.ingest` reads and writes the tables.

The rules (docs/ARCHITECTURE.md section 2), all driven by the public :class:`~gpope.config.DatasetSettings`:

* **Decision steps** are a patient's valid treatment events ordered by time: ``t = 0, 1, ...``.
  One trajectory per patient; ``traj_index`` is dense ``0..m-1`` in ``patient_id`` order.
* **State** at a step: for each configured variable the last valid observation at or before the
  step's time (forward fill), else the configured default (0.0 when none), followed, when
  ``missing_indicators`` is on, by one 0/1 column per variable that is 1 while it was never observed.
* **next_state** of step k is the state at step k+1. For the last step it is the state after every
  remaining observation of the patient (or, for a cut trajectory, the state at the first dropped
  step). **terminal** when the configured ``terminal_variable`` was observed after the last
  treatment; otherwise the last step is **truncated**. Every other step is neither.
* **reward** of step k is the sum of the outcomes with time in ``(t_k, t_{k+1}]``; for the last step
  all outcomes after ``t_k`` (of a cut trajectory: up to the first dropped step). Summation is in
  sorted order of the values, so the result does not depend on partitioning.
* **Overflow**: a patient whose finite rewards sum (in absolute value) to more than a double can
  hold would get an infinite or NaN reward after aggregation: all the patient's rows are
  quarantined as :data:`REWARD_OVERFLOW` (one trajectory per patient: no partial trajectory), so
  every value in silver is finite.
* **behavior_prob** is the logged propensity; **action** is the position of the action string in
  the configured vocabulary.
* **max_length** L: a trajectory with more than L valid treatments keeps its first L steps (the
  last kept step truncated); its later treatments, and its observations and outcomes after the
  first dropped step's time, are rejected with reason :data:`BEYOND_MAX_LENGTH`.

Every raw row either is used or lands in ``rejected_events`` with exactly one reason (the first
that applies, in the order of :data:`REASONS`), so rows in = rows used + rows rejected per table.
Duplicates: a row identical to another one in every column (a double delivery) is used once, each
extra copy is rejected as :data:`DUPLICATE_ROW` (all tables). Conflicting rows at the same time
reject *all* rows involved as :data:`DUPLICATED_TIMESTAMP` (two different treatments of a patient
at the same time, or two different values of one variable at the same time): which one is right
cannot be decided. Different outcomes at the same time are simply summed. Out-of-order rows do not exist as a reason: row order
in a table carries no meaning, every rule orders by ``time``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpope.config import DatasetSettings
from gpope.errors import ConfigError
from gpope.shell.pipeline.ingest_contract import RAW_COLUMN, UNPARSABLE_COLUMN, unparsable_reason
from gpope.shell.pipeline.load import BRONZE_COLUMNS as _RAW_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["BEYOND_MAX_LENGTH", "DUPLICATED_TIMESTAMP", "DUPLICATE_ROW", "NO_TREATMENT",
           "OUTCOME_BEFORE_FIRST_TREATMENT", "REASONS", "REWARD_OVERFLOW",
           "TERMINAL_BEFORE_LAST_TREATMENT", "SilverFrames", "build_silver", "dense_index"]

NULL_PATIENT = "null patient_id"
EMPTY_PATIENT = "empty patient_id"  # '' or blanks: no patient to keep one history for
NULL_TIME = "null time"
NULL_ACTION = "null action"
NULL_VARIABLE = "null variable"
BAD_PROPENSITY = "null or non-finite propensity"
PROPENSITY_RANGE = "propensity not in (0, 1]"
UNKNOWN_ACTION = "unknown action"
BAD_VALUE = "null or non-finite value"
UNCONFIGURED_VARIABLE = "unconfigured variable"
BAD_REWARD = "null or non-finite reward"
DUPLICATE_ROW = "duplicate row"
DUPLICATED_TIMESTAMP = "duplicated timestamp"
NO_TREATMENT = "patient has no treatment"
BEYOND_MAX_LENGTH = "beyond max_length"
OUTCOME_BEFORE_FIRST_TREATMENT = "outcome at or before first treatment"
TERMINAL_BEFORE_LAST_TREATMENT = "terminal event before last treatment"
REWARD_OVERFLOW = "patient's rewards overflow (sum not finite)"

#: Every rejection reason per bronze table, in the order they are checked (first match wins).
REASONS: dict[str, tuple[str, ...]] = {
    "treatments": (
        unparsable_reason("time"), unparsable_reason("propensity"), NULL_PATIENT, EMPTY_PATIENT, NULL_TIME, NULL_ACTION, BAD_PROPENSITY, PROPENSITY_RANGE, UNKNOWN_ACTION,
        REWARD_OVERFLOW, DUPLICATE_ROW, DUPLICATED_TIMESTAMP, BEYOND_MAX_LENGTH,
    ),
    "observations": (
        unparsable_reason("time"), unparsable_reason("value"),
        NULL_PATIENT, EMPTY_PATIENT, NULL_TIME, NULL_VARIABLE, BAD_VALUE, UNCONFIGURED_VARIABLE,
        REWARD_OVERFLOW, DUPLICATE_ROW, DUPLICATED_TIMESTAMP, NO_TREATMENT, BEYOND_MAX_LENGTH, TERMINAL_BEFORE_LAST_TREATMENT,
    ),
    "outcomes": (
        unparsable_reason("time"), unparsable_reason("reward"),
        NULL_PATIENT, EMPTY_PATIENT, NULL_TIME, BAD_REWARD, REWARD_OVERFLOW, DUPLICATE_ROW, NO_TREATMENT,
        BEYOND_MAX_LENGTH,
        OUTCOME_BEFORE_FIRST_TREATMENT,
    ),
}

_REASON = "_reason"
_OVERFLOW = "_overflow"


@dataclass(frozen=True)
class SilverFrames:
    """The lazily evaluated outputs of :func:`build_silver`: ``transitions`` and
    ``rejected_events`` (their silver schemas), ``outcome_counts`` (``table, reason, count`` for
    every bronze row, reason null: used) and the ``cached`` intermediates that :meth:`release`
    unpersists."""

    transitions: DataFrame
    rejected_events: DataFrame
    outcome_counts: DataFrame
    cached: tuple[DataFrame, ...] = ()

    def release(self) -> None:
        """Unpersist the cached intermediate DataFrames (call after the outputs are written)."""
        for df in self.cached:
            df.unpersist()


def _check_settings(settings: DatasetSettings) -> None:
    if not settings.actions:
        raise ConfigError(
            "DatasetSettings.actions is empty: ingest needs the action vocabulary to index "
            "treatments. List the actions under 'datasets: <name>: actions:' in the --conf file."
        )
    if not settings.variables:
        raise ConfigError(
            "DatasetSettings.variables is empty: ingest needs at least one state variable. List "
            "them under 'datasets: <name>: variables:' in the --conf file."
        )


def _non_finite(col: Column) -> Column:
    from pyspark.sql import functions as F

    return col.isNull() | F.isnan(col) | (F.abs(col) == F.lit(float("inf")))


def _first_reason(*checks: tuple[Column, str]) -> Column:
    """The reason of the first rule whose condition is true (null: no rule applies).

    Every event table is checked in one order: a value that did not parse
    (:mod:`~gpope.shell.pipeline.ingest_contract`), the patient id (null, empty), the time
    (null), then the table's own ``checks`` in their order, last the patient's reward overflow.
    """
    from pyspark.sql import functions as F

    rules = [
        (F.col("patient_id").isNull(), NULL_PATIENT),
        (F.trim(F.col("patient_id")) == "", EMPTY_PATIENT),
        (F.col("time").isNull(), NULL_TIME),
        *checks,
        (F.coalesce(F.col(_OVERFLOW), F.lit(False)), REWARD_OVERFLOW),
    ]
    expr = F.when(F.col(UNPARSABLE_COLUMN).isNotNull(), F.col(UNPARSABLE_COLUMN))
    for cond, reason in rules:
        expr = expr.when(cond, F.lit(reason))
    return expr


def _inputs(df: DataFrame, table: str) -> DataFrame:
    """The raw columns of ``table`` plus the parse markers (null when ``df`` has none)."""
    from pyspark.sql import functions as F

    markers = [
        F.col(c) if c in df.columns else F.lit(None).cast("string").alias(c)
        for c in (UNPARSABLE_COLUMN, RAW_COLUMN)
    ]
    return df.select(*_RAW_COLUMNS[table], *markers)


def _add_reason(df: DataFrame, cond: Column, reason: str) -> DataFrame:
    """Set ``_reason`` to ``reason`` on rows that have none yet and satisfy ``cond``."""
    from pyspark.sql import functions as F

    return df.withColumn(
        _REASON, F.when(F.col(_REASON).isNull() & cond, F.lit(reason)).otherwise(F.col(_REASON))
    )


def _mark_duplicates(
    df: DataFrame, columns: tuple[str, ...], *, conflict: tuple[str, ...] | None
) -> DataFrame:
    """Mark exact copies (:data:`DUPLICATE_ROW`) and conflicts (:data:`DUPLICATED_TIMESTAMP`).

    Among a patient's rows without a reason yet: a row equal in ``columns`` to the previous one
    (in sorted order) is an extra copy; then rows sharing the ``conflict`` key (after removing
    copies) all conflict. Both windows are partitioned by patient only, so they reuse one shuffle.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    bad = F.col(_REASON).isNotNull().cast("int")
    df = df.withColumn("_bad", bad)
    in_order = Window.partitionBy("patient_id").orderBy("_bad", *columns)
    same_as_previous = F.lag("_bad").over(in_order) == 0
    for col in columns:
        same_as_previous = same_as_previous & F.lag(col).over(in_order).eqNullSafe(F.col(col))
    df = _add_reason(df, F.coalesce(same_as_previous, F.lit(False)), DUPLICATE_ROW)
    if conflict is not None:
        df = df.withColumn("_bad", bad)
        peers = (
            Window.partitionBy("patient_id")
            .orderBy("_bad", *conflict)
            .rangeBetween(Window.currentRow, Window.currentRow)
        )
        df = _add_reason(df, F.count(F.lit(1)).over(peers) > 1, DUPLICATED_TIMESTAMP)
    return df.drop("_bad")


def _annotate_treatments(treatments: DataFrame, settings: DatasetSettings, *,
                         logged: bool = True) -> DataFrame:
    """Treatments with ``_reason`` and ``_k`` (0-based step of each valid row, before the cut).
    ``logged`` False (no propensity column delivered): the propensity rules do not apply."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    p = F.col("propensity")
    checks = [(F.col("action").isNull(), NULL_ACTION)]
    if logged:
        checks += [(_non_finite(p), BAD_PROPENSITY), ((p <= 0) | (p > 1), PROPENSITY_RANGE)]
    checks.append((~F.col("action").isin(list(settings.actions)), UNKNOWN_ACTION))
    df = treatments.withColumn(_REASON, _first_reason(*checks))
    df = _mark_duplicates(df, ("time", "action", "propensity"), conflict=("time",))
    ok = F.col(_REASON).isNull().cast("int")
    by_time = Window.partitionBy("patient_id").orderBy("time")
    upto = by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    df = df.withColumn("_k", F.when(F.col(_REASON).isNull(), F.sum(ok).over(upto) - 1))
    return _add_reason(df, F.col("_k") >= settings.max_length, BEYOND_MAX_LENGTH)


def _patient_table(treatments: DataFrame, settings: DatasetSettings) -> DataFrame:
    """Per patient with a valid treatment: first/last kept time, cut time, steps, last valid time."""
    from pyspark.sql import functions as F

    valid = treatments.filter(
        F.col(_REASON).isNull() | (F.col(_REASON) == BEYOND_MAX_LENGTH)
    )
    kept = F.col("_k") < settings.max_length
    return valid.groupBy("patient_id").agg(
        F.min("time").alias("_first_time"),
        F.max(F.when(kept, F.col("time"))).alias("_last_time"),
        F.max("time").alias("_last_valid_time"),
        F.min(F.when(F.col("_k") == settings.max_length, F.col("time"))).alias("_cut_time"),
        F.sum(kept.cast("int")).alias("_n_steps"),
    )


def _annotate_observations(
    observations: DataFrame, patients: DataFrame, settings: DatasetSettings
) -> DataFrame:
    from pyspark.sql import functions as F

    configured = list(dict.fromkeys([*settings.variables, *filter(None, [settings.terminal_variable])]))
    df = observations.withColumn(
        _REASON,
        _first_reason(
            (F.col("variable").isNull(), NULL_VARIABLE),
            (_non_finite(F.col("value")), BAD_VALUE),
            (~F.col("variable").isin(configured), UNCONFIGURED_VARIABLE),
        ),
    )
    df = _mark_duplicates(df, ("variable", "time", "value"), conflict=("variable", "time"))
    df = _against_patients(df, patients)
    term = settings.terminal_variable
    if term is not None and term not in settings.variables:
        df = _add_reason(
            df,
            (F.col("variable") == term) & (F.col("time") <= F.col("_last_valid_time")),
            TERMINAL_BEFORE_LAST_TREATMENT,
        )
    return df


def _annotate_outcomes(outcomes: DataFrame, patients: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    df = outcomes.withColumn(_REASON, _first_reason((_non_finite(F.col("reward")), BAD_REWARD)))
    df = _mark_duplicates(df, ("time", "reward"), conflict=None)
    df = _against_patients(df, patients)
    return _add_reason(df, F.col("time") <= F.col("_first_time"), OUTCOME_BEFORE_FIRST_TREATMENT)


def _against_patients(df: DataFrame, patients: DataFrame) -> DataFrame:
    """Event rows joined with their patient's treatment times (:func:`_patient_table`); rows of a
    patient with no valid treatment, or after the patient's cut time, get their reason."""
    from pyspark.sql import functions as F

    df = df.join(patients, on="patient_id", how="left")
    df = _add_reason(df, F.col("_first_time").isNull(), NO_TREATMENT)
    return _add_reason(df, F.col("time") > F.col("_cut_time"), BEYOND_MAX_LENGTH)


def _with_overflow(df: DataFrame, overflow: DataFrame) -> DataFrame:
    """``df`` with ``_overflow`` true for rows of patients in ``overflow`` (null otherwise)."""
    from pyspark.sql import functions as F

    return df.join(F.broadcast(overflow), on="patient_id", how="left")


def _overflowing_patients(outcomes: DataFrame) -> DataFrame:
    """Patients whose finite rewards have a non-finite absolute sum: ``patient_id, _overflow``.

    Every reward sum of such a patient's steps is bounded by this sum, so outside this set no
    aggregated reward can overflow; the set is tiny (usually empty) and broadcast.
    """
    from pyspark.sql import functions as F

    valid = outcomes.filter(
        F.col("patient_id").isNotNull() & F.col("time").isNotNull() & ~_non_finite(F.col("reward"))
    )
    total = F.sum(F.abs(F.col("reward")))
    return (
        valid.groupBy("patient_id")
        .agg(total.alias("_total"))
        .filter(_non_finite(F.col("_total")))
        .select("patient_id", F.lit(True).alias(_OVERFLOW))
    )


def dense_index(df: DataFrame, key: str, name: str) -> DataFrame:
    """The rows' ``key`` (unique, non-null) with ``name`` = its rank 0..n-1 in ascending key order.

    Scales with the data: a range-partitioned sort, a per-partition running number
    (``monotonically_increasing_id`` is ``partition << 33 | position``), and the partition sizes
    (one small collect) turned into offsets. The sorted ids are checkpointed locally so that the
    partition boundaries, which Spark picks by sampling, are the same for counting and numbering.

    Guarantees: deterministic (depends only on the set of keys), dense, no gaps, no ties.
    """
    from pyspark.sql import functions as F

    n_parts = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or "8")
    ids = (
        df.select(key)
        .repartitionByRange(n_parts, key)
        .sortWithinPartitions(key)
        .withColumn("_mid", F.monotonically_increasing_id())
        .localCheckpoint(eager=True)
    )
    part = F.shiftright(F.col("_mid"), 33)
    pos = F.col("_mid").bitwiseAND(F.lit((1 << 33) - 1))
    sizes = sorted(
        (int(r["_part"]), int(r["n"]))
        for r in ids.groupBy(part.alias("_part")).agg(F.count(F.lit(1)).alias("n")).collect()
    )
    offsets: list[object] = []
    total = 0
    for p, n in sizes:
        offsets += [F.lit(p), F.lit(total)]
        total += n
    if not offsets:
        return ids.select(key, F.lit(0).cast("long").alias(name)).limit(0)
    offset = F.element_at(F.create_map(*offsets), part)  # type: ignore[arg-type]
    return ids.select(key, (offset + pos).cast("long").alias(name))


def _transitions(
    treatments: DataFrame,
    observations: DataFrame,
    outcomes: DataFrame,
    patients: DataFrame,
    index: DataFrame,
    settings: DatasetSettings,
) -> DataFrame:
    """Build the silver transitions from the annotated tables (valid rows only are used).

    One event stream per patient (decisions, observations, outcomes, terminal events and an end
    row), ordered by ``(_end, time, _ord)``: observations and outcomes at a decision's time come
    before it (state "at or before"; reward window ``(t_k, t_{k+1}]``); the end row, after
    everything, carries the state after the last step. All window functions share the patient
    partitioning, so the stream is shuffled once.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ok = F.col(_REASON).isNull()
    actions = F.array(*[F.lit(a) for a in settings.actions])
    term = settings.terminal_variable
    columns = {
        "_end": "int", "time": "timestamp", "_ord": "int", "k": "long", "variable": "string",
        "value": "double", "reward": "double", "_action": "int", "_prob": "double",
        "_terminal": "boolean",
    }  # fmt: skip

    def events(df: DataFrame, **given: Column) -> DataFrame:
        cols = [F.col("patient_id")]
        for name, dtype in columns.items():
            col = given.get(name, F.lit(None))
            cols.append(col.cast(dtype).alias(name))
        return df.select(*cols)

    zero, one = F.lit(0), F.lit(1)
    stream = (
        events(
            treatments.filter(ok), _end=zero, time=F.col("time"), _ord=one, k=F.col("_k"),
            _action=F.array_position(actions, F.col("action")) - 1, _prob=F.col("propensity"),
        )
        .unionByName(events(
            observations.filter(ok & F.col("variable").isin(list(settings.variables))),
            _end=zero, time=F.col("time"), _ord=zero, variable=F.col("variable"),
            value=F.col("value"),
        ))
        .unionByName(events(
            outcomes.filter(ok), _end=zero, time=F.col("time"), _ord=zero,
            reward=F.col("reward"),
        ))
        .unionByName(events(
            patients, _end=one, _ord=F.lit(2), k=F.col("_n_steps"),
        ))
    )  # fmt: skip
    if term is not None:
        stream = stream.unionByName(events(
            observations.filter(
                ok & (F.col("variable") == term) & (F.col("time") > F.col("_last_time"))
                & F.col("_cut_time").isNull()
            ),
            _end=zero, time=F.col("time"), _ord=zero, _terminal=F.lit(True),
        ))  # fmt: skip
    by_time = Window.partitionBy("patient_id").orderBy("_end", "time", "_ord")
    upto = by_time.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    whole = by_time.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    last_seen = [
        F.last(F.when(F.col("variable") == v, F.col("value")), ignorenulls=True).over(upto)
        for v in settings.variables
    ]
    entries = [
        F.coalesce(seen, F.lit(float(settings.defaults.get(v, 0.0))))
        for v, seen in zip(settings.variables, last_seen, strict=True)
    ]
    if settings.missing_indicators:
        entries += [F.when(seen.isNull(), F.lit(1.0)).otherwise(F.lit(0.0)) for seen in last_seen]
    stepped = stream.select(
        "patient_id", "_ord", "k", "reward", "_action", "_prob",
        F.array(*entries).alias("state"),
        (F.sum((F.col("_ord") == 1).cast("long")).over(upto) - 1).alias("_step"),
        F.coalesce(F.max("_terminal").over(whole), F.lit(False)).alias("_ended"),
    )  # fmt: skip
    # Reward of step k: the outcomes between decision k and decision k + 1, summed in sorted order
    # of the values (deterministic whatever the row order inside the partition).
    in_step = Window.partitionBy("patient_id", "_step")
    stepped = stepped.withColumn(
        "_reward",
        F.aggregate(
            F.array_sort(F.collect_list("reward").over(in_step)),
            F.lit(0.0),
            lambda acc, x: acc + x,
        ),
    )
    by_step = Window.partitionBy("patient_id").orderBy("k")
    steps = (
        stepped.filter(F.col("_ord") >= 1)
        .withColumn("next_state", F.lead("state").over(by_step))
        .withColumn("_next_ord", F.lead("_ord").over(by_step))
        .filter(F.col("_ord") == 1)
    )
    is_last = F.col("_next_ord") == 2
    return (
        steps.join(index, on="patient_id", how="inner")
        .select(
            "patient_id",
            "traj_index",
            F.col("k").cast("int").alias("t"),
            "state",
            F.col("_action").alias("action"),
            F.col("_prob").alias("behavior_prob"),
            F.col("_reward").alias("reward"),
            "next_state",
            (is_last & F.col("_ended")).alias("terminal"),
            (is_last & ~F.col("_ended")).alias("truncated"),
        )
        .sortWithinPartitions("traj_index", "t")
    )


def _rejected(annotated: dict[str, DataFrame]) -> DataFrame:
    from pyspark.sql import functions as F

    parts = [
        df.filter(F.col(_REASON).isNotNull()).select(
            F.lit(table).alias("table"),
            F.col(_REASON).alias("reason"),
            F.coalesce(
                F.col(RAW_COLUMN),  # as delivered, for a value that did not parse
                F.to_json(F.struct(*_RAW_COLUMNS[table]), {"ignoreNullFields": "false"}),
            ).alias("row"),
        )
        for table, df in annotated.items()
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out.sortWithinPartitions("table", "reason", "row")


def _counts(annotated: dict[str, DataFrame]) -> DataFrame:
    from pyspark.sql import functions as F

    parts = [
        df.select(F.lit(table).alias("table"), F.col(_REASON).alias("reason"))
        for table, df in annotated.items()
    ]
    out = parts[0]
    for part in parts[1:]:
        out = out.unionByName(part)
    return out.groupBy("table", "reason").agg(F.count(F.lit(1)).alias("count"))


def build_silver(
    observations: DataFrame,
    treatments: DataFrame,
    outcomes: DataFrame,
    settings: DatasetSettings,
    *,
    logged: bool = True,
) -> SilverFrames:
    """The silver tables of the three bronze DataFrames (lazily, except one small ranking job),
    under the dataset's public settings; ``logged`` False: the delivery had no ``propensity``
    column (every ``behavior_prob`` null). The annotated bronze rows, which all outputs read, are
    cached: call :meth:`SilverFrames.release` once the outputs are written.

    Raises:
        ConfigError: the settings name no action or no variable.
    """
    _check_settings(settings)
    overflow = _overflowing_patients(_inputs(outcomes, "outcomes")).persist()
    treat = _annotate_treatments(
        _with_overflow(_inputs(treatments, "treatments"), overflow), settings, logged=logged
    ).persist()
    patients = _patient_table(treat, settings).persist()
    obs = _annotate_observations(
        _with_overflow(_inputs(observations, "observations"), overflow), patients, settings
    ).persist()
    outs = _annotate_outcomes(_with_overflow(_inputs(outcomes, "outcomes"), overflow),
                              patients).persist()
    annotated = {"treatments": treat, "observations": obs, "outcomes": outs}
    index = dense_index(patients, "patient_id", "traj_index")
    return SilverFrames(
        transitions=_transitions(treat, obs, outs, patients, index, settings),
        rejected_events=_rejected(annotated),
        outcome_counts=_counts(annotated),
        cached=(overflow, treat, patients, obs, outs),
    )

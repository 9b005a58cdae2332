"""The first-state check of ``gpope ingest``: state variables not known at a patient's first decision.

The state at a decision is each variable's last value observed at or before the decision's time
(docs/OWN_DATA.md, 'The bronze contract'); before a variable's first observation it takes its
``defaults`` value (0.0 when none). A variable charted just after the decision it informs (a
score recorded minutes after the order, say) is never known at a patient's first decision and is
one step late at every later one, so every state, and every value, is silently wrong. Ingest
cannot tell that from a variable that is really unknown at admission, so it counts, per variable
whose absence the dataset does not declare (no ``defaults`` entry for it and no
``missing_indicators: true``), the patients whose first treatment precedes the variable's first
observation; :class:`~gpope.shell.pipeline.ingest.IngestReport` warns when that is at least half
of the patients. Simulated cohorts (``domain`` set) are never checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpope.config import DatasetSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["unknown_at_first_decision"]


def unknown_at_first_decision(observations: DataFrame, treatments: DataFrame,
                              settings: DatasetSettings) -> tuple[int, dict[str, int]]:
    """Per undeclared-absence state variable, the patients with no observation of it at or
    before their first treatment, and the patients checked.

    Args:
        observations: the conformed bronze observations (typed ``time``).
        treatments: the conformed bronze treatments.
        settings: the dataset's settings.

    Returns:
        ``(patients, {variable: unknown})``: the patients with a timed treatment row, and for
        every variable of ``settings.variables`` without a ``defaults`` entry how many of them
        had it unobserved at their first treatment; ``(0, {})``, with no Spark job, when
        ``missing_indicators`` is on, every variable has a default, or ``domain`` is set.
    """
    checked = [v for v in settings.variables if v not in settings.defaults]
    if settings.domain is not None or settings.missing_indicators or not checked:
        return 0, {}
    from pyspark.sql import functions as F

    timed = F.col("patient_id").isNotNull() & F.col("time").isNotNull()
    first = treatments.where(timed).groupBy("patient_id").agg(F.min("time").alias("_first"))
    seen = (observations.where(timed & F.col("variable").isin(checked))
            .groupBy("patient_id", "variable").agg(F.min("time").alias("_seen")))
    known = {str(r["variable"]): int(r["n"]) for r in (
        first.join(seen, on="patient_id", how="inner").where(F.col("_seen") <= F.col("_first"))
        .groupBy("variable").agg(F.count(F.lit(1)).alias("n")).collect())}
    patients = first.count()
    return patients, {v: patients - known.get(v, 0) for v in checked}

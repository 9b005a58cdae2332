"""The first-state check of ``gpope ingest``: state variables not known at a patient's first decision.

A variable charted just after the decision it informs is never known at a first decision and is
one step late at every later one, so every state is silently wrong. Ingest cannot tell that from a
variable really unknown at admission, so it counts, per variable whose absence is not declared (no
``defaults`` entry, no ``missing_indicators``), the patients whose first treatment precedes its
first observation; :class:`~gpope.shell.pipeline.ingest.IngestReport` warns when that is at least
half of them. Simulated cohorts are never checked.
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

    Returns ``(patients, {variable: unknown})``; ``(0, {})``, with no Spark job, when
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

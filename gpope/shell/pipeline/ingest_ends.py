"""How episodes end when nothing is declared: the undeclared end-marker check of ``gpope ingest``.

Without ``terminal_variable`` or ``no_terminal_events: true``, ingest assumes every record stopping
before ``max_length`` is a truncation. It refuses instead of guessing when the data contradict
that: an undeclared observation variable with at least half of its rows after the patient's last
treatment looks like an end-of-episode event whose meaning only the user knows. Simulated cohorts
(``domain`` set) are never checked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpope.config import DatasetSettings
from gpope.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["check_end_convention", "undeclared_end_markers"]


def undeclared_end_markers(observations: DataFrame, treatments: DataFrame,
                           settings: DatasetSettings) -> dict[str, int]:
    """``{variable: patients with it after their last treatment}`` for each undeclared
    variable with at least half of its rows (of treated patients) after the patient's last
    treatment; empty, with no Spark job, when the settings declare how episodes end."""
    if (settings.domain is not None or settings.terminal_variable is not None
            or settings.no_terminal_events):  # the end convention is declared
        return {}
    from pyspark.sql import functions as F

    last = (treatments.where(F.col("patient_id").isNotNull() & F.col("time").isNotNull())
            .groupBy("patient_id").agg(F.max("time").alias("_last")))
    undeclared = observations.where(
        F.col("patient_id").isNotNull() & F.col("time").isNotNull()
        & F.col("variable").isNotNull() & ~F.col("variable").isin(list(settings.variables)))
    after = F.col("time") > F.col("_last")
    rows = (undeclared.join(last, on="patient_id", how="inner").groupBy("variable")
            .agg(F.count(F.lit(1)).alias("rows"), F.sum(after.cast("long")).alias("after"),
                 F.countDistinct(F.when(after, F.col("patient_id"))).alias("patients"))
            .where(2 * F.col("after") >= F.col("rows")).collect())
    return {str(r["variable"]): int(r["patients"]) for r in sorted(rows, key=lambda r: r[0])}


def check_end_convention(observations: DataFrame, treatments: DataFrame,
                         settings: DatasetSettings, dataset: str) -> None:
    """Refuse to ingest ``dataset`` when its data make an undeclared end convention ambiguous.

    Raises:
        ConfigError: an undeclared end marker exists (:func:`undeclared_end_markers`); the one
            line names it and both declarations that settle it. Nothing has been written then.
    """
    markers = undeclared_end_markers(observations, treatments, settings)
    if not markers:
        return
    name, patients = next(iter(markers.items()))
    others = f" (also: {', '.join(map(repr, list(markers)[1:]))})" if len(markers) > 1 else ""
    raise ConfigError(
        f"Ingest of {dataset!r} refused, nothing written: the observations hold {name!r}{others}, "
        f"a variable not declared for the dataset and observed after the last treatment of "
        f"{patients} patient(s) (at least half of its rows are), so it looks like an "
        "end-of-episode event; with no terminal_variable declared, every early stop would be "
        f"bootstrapped as a truncation. Under 'datasets: {dataset}:' declare "
        f"'terminal_variable: {name}' if it marks a real end (death, discharge, goal), or "
        "'no_terminal_events: true' if episodes never end, then ingest again (docs/OWN_DATA.md, "
        "'How an episode ends')."
    )

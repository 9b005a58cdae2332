"""Which silver version a spec's statistics were computed from, and the evaluate stage's refusal
of statistics older than the latest ingest.

``gpope stats`` commits a ``stats`` manifest (:func:`record_source`) recording the pinned silver
``transitions`` version it read. :func:`check_fresh` refuses statistics of an older version
before anything is reserved, naming the ``gpope stats`` command that brings them up to date;
with ``allow_stale_stats`` the run goes ahead and records the note. Statistics without a
``stats`` manifest are fresh only where no ``gpope ingest`` ever committed the dataset.
Everything read here is public: table versions and manifest times.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpope.errors import StaleStatisticsError, TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec
    from gpope.shell.lake.manifest import Manifest, PipelineRuns

__all__ = ["ALLOW_FLAG", "SPEC_PLACEHOLDER", "StatsSource", "check_fresh", "record_source", "stats_source"]

#: The evaluate flag that accepts stale statistics (recorded in the run).
ALLOW_FLAG = "--allow-stale-stats"
#: Stands for the spec's file in the command the refusal names (the CLI puts in the path given).
SPEC_PLACEHOLDER = "<the spec file>"


@dataclass(frozen=True)
class StatsSource:
    """Where the statistics a run reads came from (``built_from``, None without a ``stats``
    manifest), against the transitions version readers see now (``current``)."""

    built_from: int | None
    current: int | None
    ingested: bool

    @property
    def stale(self) -> bool:
        """The statistics cannot be shown to come from the silver data readers see now."""
        if self.current is None:
            return False  # no silver table: nothing newer to compare with
        if self.built_from is None:
            return self.ingested
        return self.built_from != self.current

    def describe(self, dataset: str, spec: EvaluationSpec) -> str:
        """What is stale, in words (no command)."""
        what = f"The trajectory_stats of spec {spec.name!r} in dataset {dataset!r}"
        if self.built_from is None:
            return (f"{what} record no silver version (computed by an earlier gpope or another "
                    f"tool), and the dataset's silver transitions are at version {self.current}")
        return (f"{what} were computed from silver transitions version {self.built_from}, but "
                f"the latest ingest committed version {self.current}")


def record_source(spark: SparkSession, config: GpopeConfig, *, dataset: str,
                  spec: EvaluationSpec, stats_version: int,
                  transitions_version: int) -> Manifest:
    """Commit the ``stats`` manifest of a stats run (one append to ``pipeline_runs``)."""
    from gpope.shell.lake import TableRef
    from gpope.shell.lake.manifest import PipelineRuns, new_run_id

    return PipelineRuns(config.lake, spark=spark).commit(
        run_id=new_run_id(), stage="stats", dataset=dataset, key=spec.spec_id,
        tables={TableRef("gold", "trajectory_stats", dataset): stats_version},
        details={"inputs": {str(TableRef("silver", "transitions", dataset)):
                            int(transitions_version)},
                 "spec_name": spec.name})


def _built_from(runs: PipelineRuns, dataset: str, spec_id: str,
                stats_version: int) -> Manifest | None:
    """The last ``stats`` manifest of the spec at or below ``stats_version``: the run whose rows
    that version holds (a later commit without its manifest holds rows at least as new)."""
    from gpope.shell.lake import TableRef

    table = str(TableRef("gold", "trajectory_stats", dataset))
    below = [m for m in runs.manifests(stage="stats", dataset=dataset)
             if m.key == spec_id and (m.version(table) or 0) <= stats_version]
    return max(below, key=lambda m: m.version(table) or 0) if below else None


def stats_source(spark: SparkSession, config: GpopeConfig, *, dataset: str,
                 spec: EvaluationSpec, stats_version: int) -> StatsSource:
    """The silver version the spec's statistics at ``stats_version`` were computed from, and the
    version readers see now."""
    from gpope.shell import lake
    from gpope.shell.lake.manifest import PipelineRuns, pin

    runs = PipelineRuns(config.lake, spark=spark)
    built = _built_from(runs, dataset, spec.spec_id, stats_version)
    ref = lake.TableRef("silver", "transitions", dataset)
    try:
        current, _ = pin(lake.Lake.from_settings(spark, config.lake), ref, runs.committed())
    except TableNotFoundError:
        current = None
    source = None if built is None else built.details.get("inputs", {}).get(str(ref))
    return StatsSource(
        built_from=None if source is None else int(source), current=current,
        ingested=bool(runs.manifests(stage="ingest", dataset=dataset)))


def check_fresh(spark: SparkSession, config: GpopeConfig, *, dataset: str,
                spec: EvaluationSpec, stats_version: int, allow: bool = False) -> str | None:
    """Refuse statistics older than the latest ingest; with ``allow``, return the one-line note
    the run records (None for fresh statistics).

    Raises:
        StaleStatisticsError: stale statistics without ``allow`` (nothing reserved yet).
    """
    source = stats_source(spark, config, dataset=dataset, spec=spec, stats_version=stats_version)
    if not source.stale:
        return None
    what = source.describe(dataset, spec)
    rerun = f"gpope stats --dataset {dataset} --spec {SPEC_PLACEHOLDER}"
    if not allow:
        raise StaleStatisticsError(
            f"{what}; run `{rerun}` first (or pass {ALLOW_FLAG} to release from the older "
            "statistics, recorded in the run).")
    return (f"STALE STATISTICS ({ALLOW_FLAG}): {what}; this release is from the older "
            f"statistics. `{rerun}` brings them up to date.")

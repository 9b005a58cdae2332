"""Atomic multi-table steps: the ``pipeline_runs`` manifest table (DESIGN.md section 2).

Delta commits one table at a time. A stage that writes several tables is made atomic by a
manifest:

1. The stage draws a run id (:func:`new_run_id`) and writes each of its tables in one Delta commit
   *tagged* with it (in the commit's ``userMetadata``). Until step 2 these commits are invisible.
2. One append to the shared gold table ``pipeline_runs`` (:meth:`PipelineRuns.commit`) records the
   run id, stage, dataset and the version of every table it wrote. **This single commit is the
   moment the stage's output becomes visible**, all tables at once.
3. Readers pin (:func:`read_pinned`, :func:`read_pinned_arrow`): a table is read at its latest
   version whose commit is not tagged with an *incomplete* run (tagged, without a manifest), and
   rows whose ``run_id`` names an incomplete run are hidden. Untagged commits are always visible.

A process killed between the commits of a stage therefore leaves the lake as pinned readers saw
it before. Raw Delta readers do see the rows a killed run appended, until
:func:`remove_incomplete` deletes them (``gpope budget reconcile``). Local lakes are read and
written without a JVM (:func:`gpope.shell.lake.local.local_store`); others through the Spark
:class:`~gpope.shell.lake.Lake`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError
from gpope.shell.lake.local import local_store
from gpope.shell.lake.names import TableRef, table_path

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from gpope.config import LakeSettings
    from gpope.shell.lake.layer import Lake

__all__ = ["PIPELINE_RUNS", "STAGES", "Manifest", "PipelineRuns", "new_run_id", "pin",
           "pinned_version", "read_pinned", "read_pinned_arrow", "remove_incomplete"]

PIPELINE_RUNS = "pipeline_runs"
STAGES: tuple[str, ...] = ("simulate", "load", "ingest", "stats", "release")


def new_run_id() -> str:
    """A fresh stage run id (32 hex characters)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Manifest:
    """One complete stage run: its id, stage, dataset, ``key`` within the stage (e.g. the spec
    id), ``tables`` (``str(TableRef)`` -> the version it committed), JSON-ready ``details`` and
    commit time (UTC)."""

    run_id: str
    stage: str
    dataset: str
    key: str | None
    tables: dict[str, int]
    details: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None

    def version(self, ref: TableRef | str) -> int | None:
        """The version of ``ref`` this run committed (None if it did not write it)."""
        return self.tables.get(str(ref))


def _contract() -> StructType:
    from gpope.shell.schemas import TABLE_SCHEMAS

    return TABLE_SCHEMAS[PIPELINE_RUNS]


class PipelineRuns:
    """Read and append the lake's ``pipeline_runs`` manifests (``spark`` is needed only for
    lakes that are not a local directory)."""

    def __init__(self, settings: LakeSettings, *, spark: SparkSession | None = None) -> None:
        self._settings = settings
        self._spark = spark
        self._local = local_store(settings)
        self._path = (None if self._local is None
                      else table_path(str(settings.root), TableRef.shared(PIPELINE_RUNS)))
        if self._path is None and spark is None:
            raise ConfigError(
                f"The manifests of lake {settings.root!r} (catalog {settings.catalog!r}) are read "
                "through Spark; pass spark=... (only local lake directories work without it)."
            )

    def _lake(self) -> Lake:
        from gpope.shell.lake.layer import Lake

        if self._spark is None:  # pragma: no cover - construction guarantees a session
            raise ConfigError("a Spark session is needed for this lake's manifests")
        return Lake.from_settings(self._spark, self._settings)

    # ------------------------------------------------------------------ writes
    def commit(
        self,
        *,
        run_id: str,
        stage: str,
        dataset: str,
        tables: Mapping[TableRef | str, int],
        key: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> Manifest:
        """Make a stage run's tables visible: one atomic append to ``pipeline_runs``.

        Raises:
            ConfigError: unknown stage or no table.
        """
        if stage not in STAGES:
            raise ConfigError(f"stage must be one of {', '.join(STAGES)}; got {stage!r}.")
        if not tables:
            raise ConfigError(f"A {stage} manifest must name at least one table version.")
        m = manifest = Manifest(
            run_id=run_id, stage=stage, dataset=dataset, key=key,
            tables={str(ref): int(v) for ref, v in tables.items()},
            details=dict(details or {}), created_at=datetime.now(UTC),
        )
        from gpope.shell import interrupts

        with interrupts.deferred():  # a signal never splits the commit from its record
            if self._path is not None and self._local is not None:
                self._local.append_arrow(self._path, self._arrow(manifest),
                                         create_schema=_contract(),
                                         table_name="gold/pipeline_runs")
            else:
                from gpope.shell.schemas import TABLE_SCHEMAS

                values = (m.run_id, m.stage, m.dataset, m.key, dict(m.tables),
                          json.dumps(m.details, sort_keys=True, default=str),
                          m.created_at.replace(tzinfo=None) if m.created_at else None)
                df = self._spark.createDataFrame(  # type: ignore[union-attr]
                    [values], schema=TABLE_SCHEMAS[PIPELINE_RUNS]
                )
                self._lake().write(df, TableRef.shared(PIPELINE_RUNS), mode="append")
            interrupts.record(f"{stage} run {run_id} of dataset {dataset} ("
                              + ", ".join(f"{t}@v{v}" for t, v in m.tables.items()) + ")")
        return manifest

    def _arrow(self, m: Manifest) -> pa.Table:
        import pyarrow as pa

        assert self._local is not None
        return pa.Table.from_pylist(
            [{"run_id": m.run_id, "stage": m.stage, "dataset": m.dataset, "key": m.key,
              "tables": list(m.tables.items()),
              "details": json.dumps(m.details, sort_keys=True, default=str),
              "created_at": m.created_at}], schema=self._local.arrow_schema(_contract()))

    # ------------------------------------------------------------------ reads
    def _table(self) -> pa.Table | None:
        """The manifests, or None before the first commit (CorruptTableError, naming the
        repair, when a data file is missing: every stage reads the manifests first)."""
        if self._path is not None and self._local is not None:
            if not self._local.exists(self._path):
                return None
            try:
                return self._local.read_arrow(self._path)
            except FileNotFoundError as exc:
                from gpope.errors import CorruptTableError
                from gpope.shell.lake.names import repair_hint

                missing = str(exc).split(" not found")[0].rsplit("/", 1)[-1]
                raise CorruptTableError(
                    f"Delta table gold/pipeline_runs at {self._path} is damaged: a data file its "
                    f"latest version lists is missing ({missing}). "
                    f"{repair_hint(TableRef.shared(PIPELINE_RUNS))}") from None
        lake = self._lake()
        ref = TableRef.shared(PIPELINE_RUNS)
        return lake.read_arrow(ref) if lake.exists(ref) else None

    def manifests(self, *, stage: str | None = None, dataset: str | None = None) -> list[Manifest]:
        """Every complete run (of ``stage`` / ``dataset`` when given), oldest first."""
        table = self._table()
        if table is None:
            return []
        out = []
        for r in table.to_pylist():
            if (stage is not None and r["stage"] != stage) or (
                dataset is not None and r["dataset"] != dataset
            ):
                continue
            created = r["created_at"]
            if created is not None and created.tzinfo is None:
                created = created.replace(tzinfo=UTC)
            out.append(Manifest(
                run_id=r["run_id"], stage=r["stage"], dataset=r["dataset"], key=r["key"],
                tables={k: int(v) for k, v in (r["tables"] or [])},
                details=json.loads(r["details"]) if r["details"] else {}, created_at=created,
            ))
        return sorted(out, key=lambda m: (m.created_at or datetime.min.replace(tzinfo=UTC)))

    def latest(self, *, stage: str, dataset: str) -> Manifest | None:
        """The last committed complete run of ``stage`` on ``dataset``, or None: last in commit
        order (the higher table versions), never by the writers' clocks."""
        runs = self.manifests(stage=stage, dataset=dataset)
        return max(runs, key=lambda m: max(m.tables.values(), default=-1)) if runs else None

    def committed(self) -> set[str]:
        table = self._table()
        return set() if table is None else set(table.column("run_id").to_pylist())


# ---------------------------------------------------------------------- pinned reads
def _incomplete(tags: Iterable[str | None], committed: set[str]) -> set[str]:
    return {t for t in tags if t is not None and t not in committed}


def pinned_version(
    history: Iterable[tuple[int, str | None]], committed: set[str]
) -> int | None:
    """The version readers see among ``history`` (``(version, run tag or None)``): the latest
    not tagged with an incomplete run; None when every commit belongs to one."""
    for version, tag in sorted(history, key=lambda e: -e[0]):
        if tag is None or tag in committed:
            return version
    return None


def pin(lake: Lake, ref: TableRef, committed: set[str]) -> tuple[int, set[str]]:
    """The version readers see of ``ref`` and the incomplete runs whose rows must stay hidden.

    Raises:
        TableNotFoundError: the table does not exist, or only incomplete runs wrote it.
    """
    history = lake.history(ref)
    version = pinned_version([(e.version, e.run_id) for e in history], committed)
    if version is None:
        raise lake._not_found(ref, None)
    return version, _incomplete((e.run_id for e in history if e.version <= version), committed)


def read_pinned(lake: Lake, ref: TableRef, *,
                committed: set[str] | None = None) -> tuple[DataFrame, int]:
    """``(rows, version)`` of ``ref`` as readers must see it (pinned version, rows of
    incomplete runs hidden); TableNotFoundError as :func:`pin`."""
    from pyspark.sql import functions as F

    if committed is None:
        from gpope.config import LakeSettings

        settings = LakeSettings(root=lake.root, catalog=lake.catalog, schema=lake.schema,
                                storage=lake.storage)
        committed = PipelineRuns(settings, spark=lake.spark).committed()
    version, hidden = pin(lake, ref, committed)
    df = lake.read(ref, version=version)
    if hidden and "run_id" in df.columns:
        df = df.where(~F.col("run_id").isin(sorted(hidden)))
    return df, version


def read_pinned_arrow(settings: LakeSettings, ref: TableRef) -> pa.Table | None:
    """The JVM-free form of :func:`read_pinned` for local lakes (None: no such table)."""
    import pyarrow.compute as pc

    local = local_store(settings)
    if local is None:
        raise ConfigError("read_pinned_arrow needs a local lake directory; use read_pinned.")
    path = table_path(str(settings.root), ref)
    if not local.exists(path):
        return None
    history = [(e.version, e.run_id) for e in local.history(path)]
    committed = PipelineRuns(settings).committed()
    version = pinned_version(history, committed)
    if version is None:
        return None
    data = local.read_arrow(path, version)
    hidden = _incomplete((t for v, t in history if v <= version), committed)
    if hidden and "run_id" in data.column_names:
        data = data.filter(pc.invert(pc.is_in(data.column("run_id"), value_set=_strings(hidden))))
    return data


def remove_incomplete(
    settings: LakeSettings,
    refs: Iterable[TableRef],
    run_ids: Iterable[str],
    *,
    spark: SparkSession | None = None,
) -> dict[str, int]:
    """Delete the rows of the failed ``run_ids`` from each table of ``refs`` (tables with a
    ``run_id`` column); returns ``str(ref)`` -> the version of its delete commit.

    A run whose manifest is committed keeps its rows whatever ``run_ids`` says. One untagged
    commit per table that held such rows, so no reader sees them at the latest version.

    Raises:
        CommitError: a delete commit failed (nothing was removed from that table); run again.
    """
    from gpope.shell.lake.base import encode_user_metadata

    run_ids = set(run_ids)
    if not run_ids:
        return {}
    runs = PipelineRuns(settings, spark=spark)
    failed = run_ids - runs.committed()
    if not failed:
        return {}
    local = local_store(settings)
    out: dict[str, int] = {}
    for ref in refs:
        if local is not None:
            version = local.delete_rows(
                table_path(str(settings.root), ref), "run_id", failed,
                user_metadata=encode_user_metadata("delete", None), table_name=str(ref),
            )  # fmt: skip
        else:
            lake = runs._lake()
            version = lake.delete_rows(ref, "run_id", failed) if lake.exists(ref) else None
        if version is not None:
            out[str(ref)] = version
    return out


def _strings(values: set[str]) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(values), type=pa.string())


"""Table maintenance: compaction and vacuum that respect time travel and the manifests.

:func:`maintain_lake` visits every Delta table of a local lake (or of one dataset) with the JVM-free
delta-rs store (:class:`~gpope.shell.lake.delta_rs.DeltaRsTables`, no Spark) and, per table:

1. **skips** it when its latest commit belongs to an incomplete stage run
   (:mod:`gpope.shell.lake.manifest`): a compaction on top would make that output visible, and a
   vacuum could delete files the pinned version still reads;
2. **compacts** small files (delta-rs ``OPTIMIZE``, data-preserving);
3. **vacuums** files removed, or never referenced, more than ``retention_hours`` ago, so time
   travel works for every younger version (a retention shorter than the longest running job
   could delete the files of a commit in progress);
4. removes staging folders of killed runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError
from gpope.shell.lake.delta_rs import DeltaRsTables
from gpope.shell.lake.names import LAYERS, TableRef, check_name, local_root

if TYPE_CHECKING:
    from gpope.config import LakeSettings

__all__ = ["TableMaintenance", "maintain_lake"]


@dataclass(frozen=True)
class TableMaintenance:
    """What maintenance did to one table: versions and live files before and after, the files
    vacuumed (listed but kept with ``dry_run``) and why it was skipped, if it was."""

    table: str
    version_before: int
    version_after: int
    files_before: int
    files_after: int
    vacuumed: int
    skipped: str | None = None


@dataclass(frozen=True)
class MaintenanceReport:
    """Every table visited by :func:`maintain_lake`."""

    root: str
    retention_hours: float
    dry_run: bool
    tables: list[TableMaintenance] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "retention_hours": self.retention_hours,
            "dry_run": self.dry_run,
            "tables": [t.__dict__ for t in self.tables],
            "seconds": self.seconds,
        }

    def summary(self) -> str:
        lines = [
            f"maintain {self.root}: {len(self.tables)} tables, vacuum retention "
            f"{self.retention_hours:g} h{' (dry run)' if self.dry_run else ''}"
        ]
        for t in self.tables:
            if t.skipped:
                lines.append(f"  {t.table}: skipped ({t.skipped})")
            else:
                lines.append(
                    f"  {t.table}: files {t.files_before} -> {t.files_after}, version "
                    f"{t.version_before} -> {t.version_after}, vacuumed {t.vacuumed} files"
                )
        return "\n".join(lines)


def _tables(
    store: DeltaRsTables, root: Path, dataset: str | None
) -> list[tuple[TableRef, str]]:
    """Every Delta table under ``root`` in the lake layout (``dataset``'s only, when given)."""
    found = []
    for layer in LAYERS:
        base = root / layer
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if store.exists(str(entry)):  # a shared table: <root>/gold/<table>
                if dataset is None:
                    found.append((TableRef(layer, entry.name), str(entry)))  # type: ignore[arg-type]
                continue
            if not entry.is_dir() or (dataset is not None and entry.name != dataset):
                continue
            for table in sorted(entry.iterdir()):
                if store.exists(str(table)):
                    found.append((TableRef(layer, table.name, entry.name), str(table)))  # type: ignore[arg-type]
    return found


def maintain_lake(
    settings: LakeSettings,
    *,
    retention_hours: float,
    dataset: str | None = None,
    dry_run: bool = False,
) -> MaintenanceReport:
    """Compact and vacuum the Delta tables of a local lake (all, or ``dataset``'s); ``dry_run``
    reports what vacuum would delete and changes nothing.

    Raises:
        ConfigError: not a local lake, or a negative retention.
    """
    from gpope.shell.lake.delta_rs.files import STAGING_FOLDER, remove_stale_staging
    from gpope.shell.lake.manifest import PipelineRuns, pinned_version

    start = time.perf_counter()
    root = local_root(str(settings.root)) if settings.catalog is None else None
    if root is None:
        raise ConfigError(
            f"gpope maintain works on a local lake directory; got {settings.root!r} "
            f"(catalog {settings.catalog!r}). On Databricks use OPTIMIZE and VACUUM."
        )
    if not root.is_dir():
        raise ConfigError(
            f"The lake root {str(root)!r} is {'a file' if root.exists() else 'missing'}; pass the "
            "lake directory (--lake) whose tables to maintain."
        )
    if not isinstance(retention_hours, int | float) or retention_hours < 0:
        raise ConfigError(f"retention_hours must be >= 0; got {retention_hours!r}.")
    if dataset is not None:
        check_name("dataset", dataset)
    committed = PipelineRuns(settings).committed()
    store = DeltaRsTables()
    report = []
    for ref, path in _tables(store, root, dataset):
        before = store.version(path)
        history = [(e.version, e.run_id) for e in store.history(path)]
        pinned = pinned_version(history, committed)
        files_before = store.file_count(path)
        if pinned != before:
            report.append(TableMaintenance(
                str(ref), before, before, files_before, files_before, 0,
                skipped=f"its latest commit belongs to an incomplete run; readers see version "
                f"{pinned}. Re-run the stage that writes it, then maintain again",
            ))  # fmt: skip
            continue
        if not dry_run and files_before > 1:
            store.compact(path)
        deleted = store.vacuum(path, retention_hours=retention_hours, dry_run=dry_run)
        remove_stale_staging(Path(path) / STAGING_FOLDER)
        report.append(TableMaintenance(
            str(ref), before, store.version(path), files_before, store.file_count(path),
            len(deleted),
        ))  # fmt: skip
    return MaintenanceReport(
        root=str(root),
        retention_hours=float(retention_hours),
        dry_run=dry_run,
        tables=report,
        seconds=time.perf_counter() - start,
    )

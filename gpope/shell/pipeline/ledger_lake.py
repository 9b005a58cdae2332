"""The ledger checked against the lake: a run released in the lake is charged even if the ledger
lost it (deleted, or replaced by an older copy), so losing the ledger never resets a budget.

Every row of ``released_estimates``, ``released_values`` and ``released_counts`` at the latest
version counts, manifest committed or not (a reader may have seen it). :func:`unknown_releases`
lists the runs the ledger has no reservation for and :func:`recovery_rows` charges one (a
reservation and a ``released`` settlement, one commit). A recovered run has no stored event, so
its dataset is composed by the basic rule from then on (never tighter than the truth). A release
manifest neither the ledger nor the release tables know is refused (:func:`orphan_manifests`):
it records no epsilon to charge. Local lakes only (delta-rs); nothing is found on Unity Catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpope.config import GpopeConfig

__all__ = [
    "RELEASE_TABLES", "LakeRelease", "orphan_manifests", "orphan_message", "recovery_rows",
    "unknown_message", "unknown_releases",
]

#: Shared gold tables whose rows are releases (each with run_id, dataset, epsilon, delta): the
#: runs' estimates and values, and the released numbers of patients m~.
RELEASE_TABLES: tuple[str, ...] = ("released_estimates", "released_values", "released_counts")
#: The mechanism text of a reservation recovered from the lake (no dp-accounting event).
RECOVERED = "recovered:released_in_lake"


@dataclass(frozen=True)
class LakeRelease:
    """A run found released in the lake: where, and what it was calibrated for."""

    dataset: str
    run_id: str
    epsilon: float
    delta: float
    accountant: str
    table: str


def _lake_releases(config: GpopeConfig) -> dict[str, LakeRelease]:
    """run_id -> its release, from every release table of a local lake (largest epsilon wins)."""
    from gpope.shell.lake.local import local_store
    from gpope.shell.pipeline.ledger_store import _local_path

    store = local_store(config.lake)
    if store is None:
        return {}
    found: dict[str, LakeRelease] = {}
    for table in RELEASE_TABLES:
        path = _local_path(config, table)
        if path is None or not store.exists(path):
            continue
        data = store.read_arrow(path)
        wanted = [c for c in ("run_id", "dataset", "epsilon", "delta", "accountant")
                  if c in data.column_names]
        if not {"run_id", "dataset", "epsilon"} <= set(wanted):
            continue
        for r in data.select(wanted).to_pylist():
            if r.get("run_id") is None or r.get("epsilon") is None:
                continue
            rel = LakeRelease(str(r["dataset"]), str(r["run_id"]), float(r["epsilon"]),
                              float(r.get("delta") or 0.0), str(r.get("accountant") or "-"), table)
            old = found.get(rel.run_id)
            if old is None or (rel.epsilon, rel.delta) > (old.epsilon, old.delta):
                found[rel.run_id] = rel
    return found


def unknown_releases(config: GpopeConfig, ledger_rows: list[dict[str, Any]],
                     dataset: str | None = None) -> list[LakeRelease]:
    """Runs released in the lake (of ``dataset``, when given) with no reservation among
    ``ledger_rows`` (all datasets': a run id is known whatever dataset its row names)."""
    known = {r["run_id"] for r in ledger_rows if r.get("status") not in ("budget", "origin")}
    out = [rel for rel in _lake_releases(config).values()
           if rel.run_id not in known and (dataset is None or rel.dataset == dataset)]
    return sorted(out, key=lambda r: (r.dataset, r.run_id))


def orphan_manifests(config: GpopeConfig, ledger_rows: list[dict[str, Any]],
                     dataset: str | None = None) -> list[tuple[str, str]]:
    """(dataset, run_id) of release manifests whose run neither the ledger nor the release tables
    know: its charge cannot be read back, so it is refused."""
    from gpope.shell.lake.local import local_store
    from gpope.shell.pipeline.ledger_store import _local_path

    store = local_store(config.lake)
    path = _local_path(config, "pipeline_runs")
    if store is None or path is None or not store.exists(path):
        return []
    data = store.read_arrow(path)
    if not {"run_id", "stage", "dataset"} <= set(data.column_names):
        return []
    known = {r["run_id"] for r in ledger_rows} | set(_lake_releases(config))
    found = {(str(r["dataset"]), str(r["run_id"]))
             for r in data.select(["run_id", "stage", "dataset"]).to_pylist()
             if r["stage"] == "release" and r["run_id"] not in known
             and (dataset is None or r["dataset"] == dataset)}
    return sorted(found)


def orphan_message(location: str, orphans: list[tuple[str, str]]) -> str:
    """The one-line refusal of release manifests whose charge is lost."""
    runs = ", ".join(f"{run} ({name})" for name, run in orphans[:3])
    return (
        f"pipeline_runs records {len(orphans)} release(s) that neither the privacy ledger at "
        f"{location} nor released_estimates/released_values know: {runs}. Their charge cannot be "
        "read back, so no budget can be stated: restore the ledger (or the release tables) from "
        "a backup, then run `gpope budget reconcile`."
    )


def unknown_message(location: str, unknown: list[LakeRelease]) -> str:
    """The one-line refusal of a ledger that misses runs released in the lake."""
    datasets = sorted({r.dataset for r in unknown})
    runs = ", ".join(f"{r.run_id} ({r.dataset}, epsilon {r.epsilon:g}, in {r.table})"
                     for r in unknown[:3])
    more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
    return (
        f"The privacy ledger at {location} does not know {len(unknown)} run(s) released in the "
        f"lake: {runs}{more}. The ledger was removed or replaced by an older copy, so the spend "
        f"it shows is too low. Run `gpope budget reconcile --dataset {datasets[0]}` to charge "
        "them (or restore the ledger from its latest backup)."
    )


def recovery_rows(rel: LakeRelease, row: Any) -> list[dict[str, Any]]:
    """The reservation and ``released`` settlement that charge ``rel`` (``row``: the ledger's
    row builder)."""
    note = (f"recovered: released in {rel.table} but unknown to the ledger (a lost or older "
            "ledger); charged its recorded epsilon and delta")
    common = dict(mechanism=RECOVERED, epsilon=rel.epsilon, delta=rel.delta,
                  accountant=rel.accountant, valid_bound=rel.accountant != "paper", note=note)
    return [
        row(rel.dataset, rel.run_id, kind="reservation", status="reserved",
            charged_epsilon=rel.epsilon, charged_delta=rel.delta, **common),
        row(rel.dataset, rel.run_id, kind="settlement", status="released", **common),
    ]

"""The privacy ledger: budgets and every run's spend, in the append-only Delta table
``<lake>/gold/privacy_ledger`` shared by all datasets (read and written with delta-rs alone on a
local lake). A row's ``kind``:

* **budget** (``gpope budget set``): the latest in commit order is the dataset's budget; raising
  one needs ``force`` and records who and when.
* **reservation**: written before a run draws noise or writes output, with its claim, its
  **charge** (``charged_epsilon``/``charged_delta``: the claim, or for ``paper`` a rigorous RDP
  bound) and its mechanism (the dp-accounting event and relation, as JSON).
* **settlement**: ``released``, ``failed`` (still counted: noise may have been drawn) or
  ``cancelled`` (not admitted, drew nothing; its charge is reversed).

``SUM(charged_epsilon)`` per dataset is the basic spend; the ``epsilon`` column must not be
summed. The decisions are pure (:mod:`gpope.core.accounting.budget`) and follow the rows' commit
order, never a writer's clock. Reservation is check - append - decide: a run that does not fit
raises :class:`~gpope.errors.BudgetExceededError` having written nothing; otherwise it proceeds
iff the commit-order fold admits it at the version its commit got, so of two racing runs exactly
those that fit in that order proceed and the others are cancelled. Stale reservations of killed
runs are settled by :meth:`PrivacyLedger.reconcile` before each new reservation.
"""

from __future__ import annotations

import difflib
import getpass
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpope.core.accounting.admission import Charge, decide
from gpope.core.accounting.budget import (
    COUNTED_STATUSES,
    TOLERANCE,
    Budget,
    BudgetStatus,
    LedgerEntry,
    LedgerRow,
    fold,
)
from gpope.core.validation import check_number
from gpope.errors import BudgetExceededError, CommitError, ConfigError
from gpope.shell import faults
from gpope.shell.ledger_comments import BUDGET_STATUS_COMMENTS, BUDGET_STATUS_TYPES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.shell.pipeline.ledger_store import LedgerStore

__all__ = ["BUDGET_STATUS_COMMENTS", "COUNTED_STATUSES", "BudgetStatus", "Charge", "LedgerEntry",
           "PrivacyLedger", "Settlement", "budget_status_rows", "budget_status_table"]


def _now() -> datetime:
    """The writer's wall clock (naive UTC), shown in the rows; never used to order them."""

    now = datetime.now(UTC).replace(tzinfo=None)
    offset = faults.clock_offset()
    return now + timedelta(seconds=offset) if offset else now


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - no user database entry
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True)
class Settlement:
    """What :meth:`PrivacyLedger.reconcile` did with one stale reservation."""

    dataset: str
    run_id: str
    status: str
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        return dict(self.__dict__)


def _default_budget(config: GpopeConfig) -> Budget:
    return Budget(config.privacy.default_epsilon, config.privacy.default_delta,
                  "privacy.default_* of the configuration")


def _row(
    dataset: str, run_id: str, *, kind: str, mechanism: str, epsilon: float, delta: float,
    accountant: str, status: str, charged_epsilon: float = 0.0, charged_delta: float = 0.0,
    valid_bound: bool | None = None, note: str | None = None,
) -> dict[str, Any]:
    return {
        "dataset": dataset, "run_id": run_id, "mechanism": mechanism, "epsilon": float(epsilon),
        "delta": float(delta), "accountant": accountant, "status": status, "created_at": _now(),
        "kind": kind, "charged_epsilon": float(charged_epsilon),
        "charged_delta": float(charged_delta), "valid_bound": valid_bound, "actor": _actor(),
        "process": None, "note": note,
    }


# ---------------------------------------------------------------------- the ledger
class PrivacyLedger:
    """Reads and appends the shared ``privacy_ledger`` table of a lake (``spark``: None on a local
    lake; a Unity Catalog lake starts one when needed)."""

    def __init__(self, spark: SparkSession | None, config: GpopeConfig,
                 *, store: LedgerStore | None = None) -> None:
        from gpope.shell.pipeline.ledger_store import open_ledger_store

        self._spark = spark
        self._config = config
        self._store = store if store is not None else open_ledger_store(config, spark)

    @property
    def location(self) -> str:
        """Where the ledger table lives (path or Unity Catalog name)."""
        return self._store.location

    @property
    def lake(self) -> str:
        """The resolved lake (absolute root, or catalog.schema)."""
        from gpope.shell.lake.names import local_root

        lk = self._config.lake
        if lk.catalog is not None:
            return f"{lk.catalog}.{lk.schema}"
        local = local_root(str(lk.root))
        return str(local) if local is not None else str(lk.root)

    # ------------------------------------------------------------------ queries
    def _rows(self, dataset: str | None = None) -> list[LedgerRow]:
        return [LedgerRow.from_mapping(r) for r in self._store.rows(dataset)]

    @property
    def _rule(self) -> dict[str, Any]:
        """What the core's fold and decision read beside the rows: the default budget, the
        composition rule and where the ledger is."""
        return dict(default=_default_budget(self._config), lake=self.lake,
                    composition=self._config.privacy.composition, location=self.location)

    def _status(self, dataset: str, rows: list[dict[str, Any]] | None = None) -> BudgetStatus:
        rows = self._store.rows(dataset) if rows is None else rows
        return fold(dataset, [LedgerRow.from_mapping(r) for r in rows], **self._rule)

    def status(self, dataset: str, *, require_known: bool = False) -> BudgetStatus:
        """Budget, spent and remaining of ``dataset`` and the state of each of its runs
        (``require_known``: ConfigError for a dataset nobody knows, :meth:`check_known`)."""
        rows = self._store.rows(dataset)
        if require_known and not rows:
            self.check_known(dataset)
        return self._status(dataset, rows)

    def datasets(self) -> list[str]:
        """Datasets with rows in the ledger."""
        return sorted({r["dataset"] for r in self._store.rows()})

    def lake_datasets(self) -> list[str]:
        """Datasets with tables in a local lake (bronze, silver or gold folders)."""
        from gpope.shell.lake.local import dataset_folders
        from gpope.shell.lake.names import local_root

        lk = self._config.lake
        local = None if lk.catalog is not None else local_root(str(lk.root))
        return [] if local is None else sorted({name for _, name in dataset_folders(local)})

    def check_known(self, dataset: str) -> None:
        """Raise ConfigError unless ``dataset`` is in the ledger, the lake or the configuration."""
        from gpope.shell.lake.names import check_name

        check_name("dataset", dataset)
        known = set(self.datasets()) | set(self.lake_datasets()) | set(self._config.datasets)
        if dataset in known:
            return
        if self._config.lake.catalog is not None:
            from gpope.shell import lake as lake_mod

            spark = self._spark
            if spark is None:
                from gpope.shell.spark import get_spark

                spark = get_spark(self._config.spark)
            lk = lake_mod.Lake.from_settings(spark, self._config.lake)
            for layer, table in (("bronze", "observations"), ("silver", "transitions"),
                                 ("gold", "trajectory_stats")):
                if lk.exists(lake_mod.TableRef(layer, table, dataset)):  # type: ignore[arg-type]
                    return
        close = difflib.get_close_matches(dataset, sorted(known), n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ConfigError(
            f"Unknown dataset {dataset!r} in lake {self.lake}: no ledger rows, no tables and no "
            f"'datasets:' entry.{hint} Known datasets: {sorted(known) or 'none'}. Check --lake "
            "(relative paths are resolved from the working directory) and the spelling."
        )

    def record_origin(self, dataset: str, origin: str = "simulate") -> None:
        """Record that ``dataset``'s raw tables were produced by ``origin`` (e.g. ``simulate``:
        synthetic data, so a fixed-seed run on it exposes nobody)."""
        from gpope.shell.lake.names import check_name

        check_name("dataset", dataset)
        self._store.append([
            _row(dataset, f"origin-{uuid.uuid4().hex[:12]}", kind="origin",
                 mechanism=f"origin:{origin}", epsilon=0.0, delta=0.0, accountant="-",
                 status="origin", note=f"raw tables written by `gpope {origin}`")
        ])

    def origin(self, dataset: str) -> str | None:
        """Who produced the dataset's raw tables (``"simulate"``), or None if unknown; raw data
        loaded after the record (on a local lake) is not simulated."""
        rows = [r for r in self._store.rows(dataset)
                if LedgerRow.from_mapping(r).row_kind == "origin"]
        if not rows:
            return None
        latest = max(rows, key=lambda r: (r.get("version", -1), r["created_at"]))
        from gpope.shell.pipeline.ledger_store import _local_path_of

        path = _local_path_of(self._config, "bronze", dataset, "observations")
        if path is not None:
            from gpope.shell.lake.local import local_tables

            tables = local_tables()
            if tables.exists(path):
                history = tables.history(path)
                stamp = history[-1].timestamp if history else None
                if stamp is not None:
                    committed = stamp.replace(tzinfo=None)
                    if committed > latest["created_at"] + timedelta(seconds=1):
                        return None
        return str(latest["mechanism"]).removeprefix("origin:")

    def check_lake(self, dataset: str) -> None:
        """Refuse (ConfigError) a ledger that misses runs released in the lake: it was removed or
        replaced by an older copy (:mod:`.ledger_lake`)."""
        from gpope.shell.pipeline import ledger_lake as lk

        rows = self._store.rows()
        unknown = lk.unknown_releases(self._config, rows, dataset)
        if unknown:
            raise ConfigError(lk.unknown_message(self.location, unknown))
        self._refuse_orphans(rows, dataset)

    def _refuse_orphans(self, rows: list[dict[str, Any]], dataset: str | None) -> None:
        """Raise ConfigError when release manifests' charges are lost (:mod:`.ledger_lake`)."""
        from gpope.shell.pipeline import ledger_lake as lk

        orphans = lk.orphan_manifests(self._config, rows, dataset)
        if orphans:
            raise ConfigError(lk.orphan_message(self.location, orphans))

    def recover(self, dataset: str | None = None) -> list[Settlement]:
        """Charge the runs released in the lake that the ledger does not know (one commit);
        ConfigError for a release manifest whose charge is lost."""
        from gpope.shell.pipeline import ledger_lake as lk

        rows = self._store.rows()
        self._refuse_orphans(rows, dataset)
        unknown = lk.unknown_releases(self._config, rows, dataset)
        if unknown:
            self._store.append([row for rel in unknown for row in lk.recovery_rows(rel, _row)])
        return [Settlement(r.dataset, r.run_id, "released", f"released in {r.table} but unknown "
                           f"to the ledger: charged epsilon {r.epsilon:g}, delta {r.delta:g}")
                for r in unknown]

    def entry(self, dataset: str, run_id: str) -> LedgerEntry | None:
        """The current state of run ``run_id`` (None if the ledger has no such run)."""
        return self.status(dataset).entry(run_id)

    # ------------------------------------------------------------------ updates
    def set_budget(
        self, dataset: str, *, epsilon: float, delta: float, force: bool = False,
        require_known: bool = False,
    ) -> BudgetStatus:
        """Set the dataset's total budget (a new budget row; the latest one applies). ConfigError
        for non-positive values, a budget below the spend, or a raise without ``force``."""
        check_number("budget", "epsilon", epsilon, gt=0.0)
        check_number("budget", "delta", delta, gt=0.0, lt=1.0)
        rows = self._store.rows(dataset)
        if require_known and not rows:
            self.check_known(dataset)
        self.check_lake(dataset)
        current = self._status(dataset, rows)
        if epsilon + TOLERANCE < current.spent_epsilon:
            raise ConfigError(
                f"Dataset {dataset!r} has already spent epsilon {current.spent_epsilon:.6g} "
                f"({current.composition} composition); a budget must be at least that. Got "
                f"epsilon {epsilon}, delta {delta}."
            )
        if current.composition == "basic" and delta * (1 + TOLERANCE) < current.spent_delta_basic:
            raise ConfigError(
                f"Dataset {dataset!r} has already spent delta {current.spent_delta_basic:.3g}; a "
                f"budget must be at least that. Got delta {delta}."
            )
        has_budget = any(LedgerRow.from_mapping(r).row_kind == "budget" for r in rows)
        raising = epsilon > current.budget_epsilon or delta > current.budget_delta
        note = None
        if raising and (has_budget or current.counted):
            if not force:
                raise ConfigError(
                    f"Raising the budget of dataset {dataset!r} from epsilon "
                    f"{current.budget_epsilon:g}, delta {current.budget_delta:g} to epsilon "
                    f"{epsilon:g}, delta {delta:g} needs --force (a privacy decision: it is "
                    "recorded in the ledger with who and when)."
                )
            note = (f"budget raised with --force from epsilon {current.budget_epsilon:g}, delta "
                    f"{current.budget_delta:g} by {_actor()}")
        self._store.append([
            _row(dataset, f"budget-{uuid.uuid4().hex[:12]}", kind="budget", mechanism="budget",
                 epsilon=epsilon, delta=delta, accountant="-", status="budget", note=note)
        ])
        return self.status(dataset)

    def reserve(self, charge: Charge) -> LedgerEntry:
        """Record a run's ``charge`` before it draws noise or writes output: the core decides
        (:func:`~gpope.core.accounting.admission.decide`) before the append and again at the
        version it got. BudgetExceededError: nothing is written (after a lost race, the
        reservation is cancelled)."""
        self.reconcile(charge.dataset)
        row = charge.row(created_at=_now(), actor=_actor(), process=f"{socket.gethostname()}:{os.getpid()}")
        reservation = LedgerRow.from_mapping(row)
        decide(self._rows(charge.dataset), reservation, **self._rule)
        faults.point("ledger.before_append")
        self._store.append([row])
        faults.point("ledger.after_append")
        try:  # the decision: the commit-order fold at the version the reservation's commit got
            return decide(self._rows(charge.dataset), reservation, appended=True, **self._rule)
        except BudgetExceededError:
            self._append_settlement(row, "cancelled", reverse=True,
                                    note="not admitted: an earlier commit took the budget")
            raise

    def _append_settlement(self, reservation: dict[str, Any], status: str, *,
                           reverse: bool = False, note: str | None = None) -> dict[str, Any]:
        row = _row(
            reservation["dataset"], reservation["run_id"], kind="settlement",
            mechanism=reservation["mechanism"], epsilon=reservation["epsilon"],
            delta=reservation["delta"], accountant=reservation["accountant"], status=status,
            charged_epsilon=-reservation["charged_epsilon"] if reverse else 0.0,
            charged_delta=-reservation["charged_delta"] if reverse else 0.0,
            valid_bound=reservation.get("valid_bound"), note=note,
        )
        self._store.append([row])
        return row

    def mark(self, dataset: str, run_id: str, status: str, *, note: str | None = None) -> LedgerEntry:
        """Record the final status (``released`` or ``failed``) of a reserved run; a no-op when
        it already has that status (``reconcile`` settled it)."""
        if status not in ("released", "failed"):
            raise ConfigError(f"A run can be marked 'released' or 'failed'. Got {status!r} instead.")
        current = self.entry(dataset, run_id)
        if current is not None and current.status == status:
            return current
        if current is None or current.status != "reserved":
            raise ConfigError(
                f"Run {run_id!r} of dataset {dataset!r} has no open reservation "
                f"(status: {None if current is None else current.status}); reserve before marking."
            )
        try:
            row = self._append_settlement(current.__dict__, status, note=note)
        except Exception as exc:
            error = CommitError(unsettled_message(current, status, self.location, exc))
            error.append_error = exc  # what failed, for callers that state the charge themselves
            raise error from None
        return LedgerEntry(**{**current.__dict__, "status": status, "created_at": row["created_at"]})

    def reconcile(self, dataset: str | None = None, *, spark: SparkSession | None = None) -> list[Settlement]:
        """Settle stale reservations (process gone on this host, or older than
        ``privacy.reservation_timeout_hours``) from the evidence: ``released`` if readers see its
        release (even while its process runs); ``cancelled`` (charge reversed) if the fold did
        not admit it, so it drew nothing; else ``failed`` (still counted: it may have drawn
        noise), and its rows in the release tables are deleted."""
        from gpope.shell.pipeline.ledger_store import released_run_ids

        recovered = self.recover(dataset)
        names = [dataset] if dataset is not None else self.datasets()
        open_runs = [
            e for name in names for e in self.status(name).runs if e.status == "reserved"
        ]
        if not open_runs:
            return recovered
        released = released_run_ids(self._config, {e.run_id for e in open_runs},
                                    spark or self._spark)
        timeout = timedelta(hours=self._config.privacy.reservation_timeout_hours)
        now = _now()
        out: list[Settlement] = []
        for e in open_runs:
            reverse = False
            if e.run_id in released:
                status, evidence = "released", ("released_estimates has a row with this run_id "
                                      "(release manifest committed)")
            elif not e.admitted and (_process_dead(e.process) or now - e.created_at > timeout):
                status, reverse = "cancelled", True
                evidence = ("not admitted in commit order, so the run could not proceed past its "
                            "reservation and drew no noise (charge reversed)")
            elif _process_dead(e.process) or now - e.created_at > timeout:
                why = (f"process {e.process} is gone" if _process_dead(e.process)
                       else f"reserved more than {timeout} ago")
                status = "failed"
                evidence = (f"{why} and released_estimates has no committed row for it; still "
                            "charged: the run may have drawn noise before it stopped and the "
                            "ledger cannot tell how far it got (docs/ARCHITECTURE.md, privacy "
                            "rules)")
            else:
                continue
            self._append_settlement(e.__dict__, status, reverse=reverse,
                                    note=f"reconciled: {evidence}")
            out.append(Settlement(e.dataset, e.run_id, status, evidence))
        from gpope.shell.pipeline.release import remove_failed_releases

        remove_failed_releases(self._config, {s.run_id for s in out if s.status == "failed"},
                               spark or self._spark)  # fmt: skip
        return recovered + out


def unsettled_message(entry: LedgerEntry, status: str, location: str, exc: BaseException) -> str:
    """What stands when a run's settlement cannot be appended after its reservation committed."""
    cause = str(exc).split(" Nothing was committed")[0].split(" This append was not")[0]
    charge = ("" if entry.charged_epsilon == entry.epsilon
              else f" (charged epsilon {entry.charged_epsilon:g})")
    return (
        f"The ledger could not record run {entry.run_id} of dataset {entry.dataset!r} as {status} "
        f"({cause.strip().rstrip('.')}); its reservation in the privacy ledger at {location} is "
        f"committed: epsilon {entry.epsilon:g}, delta {entry.delta:g} stay charged{charge}. Once "
        f"the lake is writable, run `gpope budget reconcile --dataset {entry.dataset}` to settle "
        "it; do not re-run to recover the spend."
    )


def _process_dead(process: str | None) -> bool:
    """True when ``process`` (host:pid) ran on this host and no longer exists."""
    if not process or ":" not in process:
        return False
    host, _, pid = process.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


# ---------------------------------------------------------------------- budget_status
def budget_status_rows(config: GpopeConfig, *, spark: SparkSession | None = None,
                       store: LedgerStore | None = None) -> list[dict[str, Any]]:
    """One ``budget_status`` row per dataset in the ledger (no JVM on a local lake); ``store``
    reads a given ledger (e.g. one pinned to a version) instead of the lake's latest."""
    ledger = PrivacyLedger(spark, config, store=store)
    rows = ledger._store.rows()
    names = sorted({r["dataset"] for r in rows})
    return [ledger._status(name, [r for r in rows if r["dataset"] == name]).row() for name in names]


def budget_status_table(config: GpopeConfig, *, spark: SparkSession | None = None,
                        store: LedgerStore | None = None) -> pa.Table:
    """:func:`budget_status_rows` as an Arrow table (the ``budget_status`` view of ``gpope query``)."""
    import pyarrow as pa

    types = {"string": pa.string(), "double": pa.float64(), "long": pa.int64(),
             "timestamp": pa.timestamp("us")}
    schema = pa.schema([
        pa.field(name, types[kind], metadata={"comment": BUDGET_STATUS_COMMENTS[name]})
        for name, kind in BUDGET_STATUS_TYPES.items()
    ])
    rows = budget_status_rows(config, spark=spark, store=store)
    return pa.Table.from_pylist(rows, schema=schema)

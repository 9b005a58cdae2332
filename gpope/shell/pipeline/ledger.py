"""The privacy ledger: per-dataset budgets and every run's spend, in the gold ``privacy_ledger``.

One append-only Delta table shared by all datasets (``<lake>/gold/privacy_ledger``; columns in
:mod:`gpope.shell.pipeline.ledger_store`). On a local lake it is read and written with
``deltalake`` alone (no Spark, no JVM). Rows have a ``kind``:

* **budget**: written by ``gpope budget set``; the latest one is the dataset's total budget.
  Raising a budget needs ``force`` and is recorded with who (``actor``) and when.
* **reservation**: written before a run draws noise or writes output. It carries the run's
  claimed (epsilon, delta), its **charge** (``charged_epsilon``/``charged_delta``: the claim, or
  for an accountant that is not a valid bound, ``paper``, a rigorous RDP bound of the same
  mechanism) and its mechanism (the dp-accounting event and neighbouring relation, as JSON).
* **settlement**: a later status of a reserved run: ``released``, ``failed`` (still counted:
  noise may have been drawn, privacy spent is spent) or ``cancelled`` (a concurrent reservation
  won the race before this run drew anything; its charge is reversed).

``SUM(charged_epsilon)`` per dataset is the basic spend; the ``epsilon`` column mixes budgets and
spends and must not be summed (the table's description says so).

Composition (``privacy.composition``):

* ``rdp`` (default): runs are composed tightly from their stored events with the Rényi filter of
  :mod:`gpope.core.accounting.composition` (valid when runs are chosen adaptively; the theorem is
  stated there). A run is admitted iff the filter still certifies the budget's epsilon at the
  budget's delta after it (a dataset's first run may also be admitted on its own certificate).
  Runs do not consume delta under the filter.
* ``basic``: epsilons and deltas of the charges add up.

Both are always computed and shown. A dataset holding a run whose mechanism cannot be composed
(rows written before mechanisms were stored) is governed by the basic rule.

Reservation is check - append - re-check: a run that does not fit raises
:class:`~gpope.errors.BudgetExceededError` having written nothing; if concurrent runs race past
the check, the re-check folds all counted runs in reservation order and cancels the ones that do
not fit. Stale reservations of killed runs are settled by :meth:`PrivacyLedger.reconcile` from the
evidence (a released_estimates row whose release manifest is committed), automatically before each new reservation.
"""

from __future__ import annotations

import difflib
import functools
import getpass
import math
import os
import socket
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.validation import check_number
from gpope.errors import BudgetExceededError, ConfigError

if TYPE_CHECKING:
    import pyarrow as pa
    from dp_accounting import DpEvent
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.shell.pipeline.ledger_store import LedgerStore

__all__ = [
    "BUDGET_STATUS_COMMENTS",
    "COUNTED_STATUSES",
    "BudgetStatus",
    "LedgerEntry",
    "PrivacyLedger",
    "Settlement",
    "budget_status_rows",
    "budget_status_table",
]

#: Statuses whose spend counts against the budget.
COUNTED_STATUSES: tuple[str, ...] = ("reserved", "released", "failed")
_FINAL = ("released", "failed", "cancelled")
_TOLERANCE = 1e-9  # float slack when comparing spends with the budget
_MAX_RUNS_LEFT = 100_000


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # pragma: no cover - no user database entry
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _process() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class LedgerEntry:
    """The current state of one run in the ledger."""

    dataset: str
    run_id: str
    mechanism: str
    epsilon: float
    delta: float
    accountant: str
    status: str
    created_at: datetime
    charged_epsilon: float = 0.0
    charged_delta: float = 0.0
    valid_bound: bool = True
    actor: str | None = None
    process: str | None = None
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        d = dict(self.__dict__)
        d["created_at"] = self.created_at.isoformat()
        return d


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


@dataclass(frozen=True)
class BudgetStatus:
    """Budget, spend (basic and tight) and remaining of one dataset.

    ``spent_epsilon`` is the spend under the governing rule (``composition``); ``remaining_*``
    and ``runs_left`` follow it. ``runs_left``: how many more runs like the latest counted one
    still fit (None before the first run).
    """

    dataset: str
    budget_epsilon: float
    budget_delta: float
    budget_source: str
    composition: str
    spent_epsilon: float
    spent_delta: float
    spent_epsilon_basic: float
    spent_delta_basic: float
    spent_epsilon_tight: float | None
    remaining_epsilon: float
    remaining_delta: float
    runs_left: int | None
    runs: tuple[LedgerEntry, ...] = field(default=())
    lake: str = ""
    location: str = ""

    @property
    def counted(self) -> tuple[LedgerEntry, ...]:
        """Runs whose spend counts (reserved, released, failed)."""
        return tuple(r for r in self.runs if r.status in COUNTED_STATUSES)

    @property
    def no_further_run(self) -> bool:
        """True when no further run fits this budget."""
        if self.runs_left == 0 or self.remaining_epsilon <= _TOLERANCE:
            return True
        return self.composition == "basic" and self.remaining_delta <= 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        return {
            "dataset": self.dataset,
            "lake": self.lake,
            "ledger": self.location,
            "composition": self.composition,
            "budget": {"epsilon": self.budget_epsilon, "delta": self.budget_delta,
                       "source": self.budget_source},
            "spent": {"epsilon": self.spent_epsilon, "delta": self.spent_delta},
            "spent_basic": {"epsilon": self.spent_epsilon_basic, "delta": self.spent_delta_basic},
            "spent_tight": {"epsilon": self.spent_epsilon_tight, "delta": self.budget_delta},
            "remaining": {"epsilon": self.remaining_epsilon, "delta": self.remaining_delta},
            "runs_left": self.runs_left,
            "no_further_run": self.no_further_run,
            "runs": [r.to_dict() for r in self.runs],
        }

    def row(self) -> dict[str, Any]:
        """One ``budget_status`` row."""
        return {
            "dataset": self.dataset,
            "budget_epsilon": self.budget_epsilon,
            "budget_delta": self.budget_delta,
            "budget_source": self.budget_source,
            "composition": self.composition,
            "spent_epsilon": self.spent_epsilon,
            "spent_delta": self.spent_delta,
            "spent_epsilon_basic": self.spent_epsilon_basic,
            "spent_delta_basic": self.spent_delta_basic,
            "spent_epsilon_tight": self.spent_epsilon_tight,
            "remaining_epsilon": self.remaining_epsilon,
            "remaining_delta": self.remaining_delta,
            "runs_counted": len(self.counted),
            "runs_left": self.runs_left,
            "invalid_runs": sum(1 for r in self.counted if not r.valid_bound),
            "updated_at": max((r.created_at for r in self.runs), default=None),
        }

    def remaining_line(self) -> str:
        """"remaining budget: ..." with what it means for the next run."""
        text = (
            f"remaining budget: epsilon {self.remaining_epsilon:.6g}, delta "
            f"{self.remaining_delta:.3g} ({self.composition} composition)"
        )
        if self.no_further_run:
            return text + ": no further run is possible on this dataset within its budget"
        if self.runs_left is not None:
            return text + f": {self.runs_left} more run(s) like the latest one fit"
        return text

    def summary(self) -> str:
        """Human-readable lines."""
        tight = (
            f"{self.spent_epsilon_tight:.6g}" if self.spent_epsilon_tight is not None
            else "n/a (a run has no stored mechanism)"
        )
        gov = {"rdp": "tight governs", "basic": "basic governs"}[self.composition]
        lines = [
            f"privacy budget of dataset {self.dataset!r} (lake {self.lake}; ledger {self.location})",
            f"  budget     epsilon {self.budget_epsilon:.6g}   delta {self.budget_delta:.3g}   "
            f"({self.budget_source})",
            f"  spent      tight (RDP filter, at delta {self.budget_delta:.3g}): epsilon {tight}; "
            f"basic (sum of charges): epsilon {self.spent_epsilon_basic:.6g}, delta "
            f"{self.spent_delta_basic:.3g}   [{gov}]",
            f"  {self.remaining_line()}",
        ]
        if self.runs:
            lines.append(f"  runs ({len(self.runs)}):")
            for r in self.runs:
                flag = "" if r.valid_bound else "  [NOT a valid bound: charged at rigorous RDP]"
                lines.append(
                    f"    {r.created_at:%Y-%m-%d %H:%M:%S}  {r.run_id}  {r.status:<9}  "
                    f"epsilon {r.epsilon:.6g}  delta {r.delta:.3g}  charged {r.charged_epsilon:.6g}"
                    f"  {r.accountant}{flag}"
                )
        return "\n".join(lines)


# ---------------------------------------------------------------------- pure folding
def _kind(row: dict[str, Any]) -> str:
    if row.get("kind"):
        return str(row["kind"])
    if row["status"] == "budget":
        return "budget"
    return "reservation" if row["status"] == "reserved" else "settlement"


def _curve(mechanism: str) -> tuple[str, np.ndarray] | None:
    """(relation, RDP curve at the filter's orders) of a stored mechanism, or None."""
    cached = _curve_cached(mechanism)
    return None if cached is None else (cached[0], np.asarray(cached[1]))


@functools.lru_cache(maxsize=4096)
def _curve_cached(mechanism: str) -> tuple[str, tuple[float, ...]] | None:
    from gpope.core.accounting.composition import mechanism_from_json, rdp_curve
    from gpope.errors import AccountingError

    stored = mechanism_from_json(mechanism)
    if stored is None:
        return None
    try:
        return stored.relation, tuple(float(v) for v in rdp_curve(stored))
    except (AccountingError, ValueError, TypeError):
        return None


def _relation(mechanism: str) -> str | None:
    """The neighbouring relation a stored mechanism is analysed under (None: not stored)."""
    from gpope.core.accounting.composition import mechanism_from_json

    stored = mechanism_from_json(mechanism)
    return None if stored is None else stored.relation


def _check_one_relation(dataset: str, counted: tuple[LedgerEntry, ...], mechanism: str) -> None:
    """Refuse a run whose neighbouring relation differs from the dataset's counted runs.

    A dataset's guarantee is stated under one neighbouring relation. Neither the Rényi filter
    nor basic composition covers adding an add/remove epsilon (Poisson runs) to a replace-one
    epsilon (uniform runs): by group privacy an add/remove (eps, delta) run is only
    (2 eps, (1 + e^eps) delta) under replace-one, and splitting one budget adaptively between two
    interleaved filters is not a theorem we can cite (see gpope.core.accounting.composition).
    Until a proven rule lands, a dataset's runs share the relation of its first counted run.

    Raises:
        ConfigError: the new run's relation differs from the one the dataset already uses.
    """
    from gpope.core.accounting.composition import relation_of_sampling

    new = _relation(mechanism)
    if new is None:
        return
    used = {rel for e in counted if (rel := _relation(e.mechanism)) is not None}
    if used and new not in used:
        old = sorted(used)[0]
        sampling = {relation_of_sampling(s): s for s in ("uniform", "poisson")}
        raise ConfigError(
            f"Dataset {dataset!r} already holds runs analysed under {old} adjacency "
            f"(--sampling {sampling[old]}); this run uses {new} (--sampling {sampling[new]}), "
            f"and the ledger cannot compose the two soundly. Use --sampling {sampling[old]} for "
            "this dataset, or evaluate a separate dataset."
        )


def _legacy_charge(row: dict[str, Any]) -> float:
    """The charge of a reservation written before charges were stored."""
    eps = float(row["epsilon"])
    if row.get("accountant") == "paper":  # not a valid bound: charge rigorous RDP of the event
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        from gpope.core.accounting.composition import FILTER_ORDERS

        curve = _curve(row["mechanism"])
        if curve is not None:
            eps = max(eps, float(compute_epsilon(list(FILTER_ORDERS), curve[1], row["delta"])[0]))
    return eps


def _entries(rows: list[dict[str, Any]]) -> tuple[LedgerEntry, ...]:
    order = {"budget": 0, "origin": 0, "reservation": 1, "settlement": 2}
    runs: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: (r["created_at"], order[_kind(r)])):
        kind = _kind(r)
        if kind in ("budget", "origin"):
            continue
        prev = runs.get(r["run_id"])
        if kind == "reservation" and prev is None:
            charged = r.get("charged_epsilon")
            runs[r["run_id"]] = {
                **{k: r[k] for k in ("dataset", "run_id", "mechanism", "epsilon", "delta",
                                     "accountant", "status", "created_at")},
                "charged_epsilon": float(charged) if charged is not None else _legacy_charge(r),
                "charged_delta": float(r["charged_delta"]) if r.get("charged_delta") is not None
                else float(r["delta"]),
                "valid_bound": bool(r["valid_bound"]) if r.get("valid_bound") is not None
                else r["accountant"] != "paper",
                "actor": r.get("actor"),
                "process": r.get("process"),
                "note": r.get("note"),
            }
        elif prev is not None and prev["status"] not in _FINAL:
            prev["status"] = r["status"]
            if r.get("note"):
                prev["note"] = r["note"]
    return tuple(LedgerEntry(**v) for v in runs.values())


class _Fold:
    """Admission under the governing rule, run by run in reservation order (pure)."""

    def __init__(self, budget_eps: float, budget_delta: float, composition: str,
                 curves: dict[str, tuple[str, np.ndarray] | None]) -> None:
        self.b_eps, self.b_delta = budget_eps, budget_delta
        self.composition = composition
        self.curves = curves

    def rule(self, entries: tuple[LedgerEntry, ...]) -> str:
        if self.composition == "rdp" and all(self.curves.get(e.run_id) is not None for e in entries):
            return "rdp"
        return "basic"

    def tight(self, entries: list[LedgerEntry], extra: int = 0, like: LedgerEntry | None = None) -> float:
        from gpope.core.accounting.composition import filter_epsilon

        curves = [self.curves[e.run_id] for e in entries]
        if extra and like is not None:
            rel, curve = self.curves[like.run_id]  # type: ignore[misc]
            curves.append((rel, curve * extra))
        return filter_epsilon(curves, self.b_delta)  # type: ignore[arg-type]

    def fits(self, admitted: list[LedgerEntry], candidate: LedgerEntry, rule: str) -> bool:
        eps = sum(e.charged_epsilon for e in admitted) + candidate.charged_epsilon
        delta = sum(e.charged_delta for e in admitted) + candidate.charged_delta
        basic_ok = eps <= self.b_eps + _TOLERANCE and delta <= self.b_delta * (1 + _TOLERANCE)
        if rule == "basic":
            return basic_ok
        if not admitted and basic_ok:  # a first run on its own certificate
            return True
        return self.tight([*admitted, candidate]) <= self.b_eps + _TOLERANCE

    def admitted(self, entries: tuple[LedgerEntry, ...], rule: str) -> set[str]:
        ok: list[LedgerEntry] = []
        for e in sorted(entries, key=lambda e: (e.created_at, e.run_id)):
            if self.fits(ok, e, rule):
                ok.append(e)
        return {e.run_id for e in ok}


def _fold(
    dataset: str, rows: list[dict[str, Any]], config: GpopeConfig, *, lake: str = "",
    location: str = "",
) -> BudgetStatus:
    """Fold the ledger rows of one dataset into its BudgetStatus (pure)."""
    rows = [r for r in rows if r["dataset"] == dataset]
    budgets = sorted((r for r in rows if _kind(r) == "budget"), key=lambda r: r["created_at"])
    if budgets:
        last = budgets[-1]
        budget_eps, budget_delta = float(last["epsilon"]), float(last["delta"])
        who = f" by {last['actor']}" if last.get("actor") else ""
        source = f"set with `gpope budget set`{who} at {last['created_at']:%Y-%m-%d %H:%M:%S} UTC"
    else:
        budget_eps = config.privacy.default_epsilon
        budget_delta = config.privacy.default_delta
        source = "privacy.default_* of the configuration"
    entries = _entries(rows)
    counted = tuple(e for e in entries if e.status in COUNTED_STATUSES)
    curves = {e.run_id: _curve(e.mechanism) for e in counted}
    fold = _Fold(budget_eps, budget_delta, config.privacy.composition, curves)
    rule = fold.rule(counted)
    basic_eps = float(sum(e.charged_epsilon for e in counted))
    basic_delta = float(sum(e.charged_delta for e in counted))
    composable = all(c is not None for c in curves.values())
    tight = fold.tight(list(counted)) if composable and counted else (0.0 if composable else None)
    latest = max(counted, key=lambda e: e.created_at) if counted else None
    if rule == "rdp":
        spent = tight if len(counted) != 1 else min(tight, counted[0].charged_epsilon)  # type: ignore[type-var]
        spent_delta = budget_delta if counted else 0.0
        if len(counted) == 1 and counted[0].charged_epsilon <= (tight or math.inf):
            spent_delta = counted[0].charged_delta
        remaining_delta = budget_delta if (not counted or (tight or math.inf) <= budget_eps) else 0.0
        runs_left = None
        if latest is not None:
            runs_left = _runs_left_tight(fold, list(counted), latest)
    else:
        spent, spent_delta = basic_eps, basic_delta
        remaining_delta = max(0.0, budget_delta - basic_delta)
        runs_left = None
        if latest is not None:
            k_eps = _floor_div(budget_eps - basic_eps, latest.charged_epsilon)
            k_delta = _floor_div(budget_delta - basic_delta, latest.charged_delta)
            runs_left = max(0, min(k_eps, k_delta))
    return BudgetStatus(
        dataset=dataset,
        budget_epsilon=budget_eps,
        budget_delta=budget_delta,
        budget_source=source,
        composition=rule,
        spent_epsilon=float(spent),  # type: ignore[arg-type]
        spent_delta=float(spent_delta),
        spent_epsilon_basic=basic_eps,
        spent_delta_basic=basic_delta,
        spent_epsilon_tight=None if tight is None else float(tight),
        remaining_epsilon=max(0.0, budget_eps - float(spent)),  # type: ignore[arg-type]
        remaining_delta=remaining_delta,
        runs_left=runs_left,
        runs=entries,
        lake=lake,
        location=location,
    )


def _floor_div(rest: float, each: float) -> int:
    if each <= 0:
        return _MAX_RUNS_LEFT
    return math.floor((rest + _TOLERANCE) / each) if rest > -_TOLERANCE else 0


def _runs_left_tight(fold: _Fold, counted: list[LedgerEntry], latest: LedgerEntry) -> int:
    """Largest k such that k more copies of the latest run's mechanism keep the filter in budget."""
    def ok(k: int) -> bool:
        return fold.tight(counted, extra=k, like=latest) <= fold.b_eps + _TOLERANCE

    if not ok(1):
        return 0
    lo, hi = 1, 2
    while hi <= _MAX_RUNS_LEFT and ok(hi):
        lo, hi = hi, hi * 2
    if hi > _MAX_RUNS_LEFT:
        return _MAX_RUNS_LEFT
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _row(
    dataset: str, run_id: str, *, kind: str, mechanism: str, epsilon: float, delta: float,
    accountant: str, status: str, charged_epsilon: float = 0.0, charged_delta: float = 0.0,
    valid_bound: bool | None = None, note: str | None = None, process: str | None = None,
) -> dict[str, Any]:
    return {
        "dataset": dataset, "run_id": run_id, "mechanism": mechanism, "epsilon": float(epsilon),
        "delta": float(delta), "accountant": accountant, "status": status, "created_at": _now(),
        "kind": kind, "charged_epsilon": float(charged_epsilon),
        "charged_delta": float(charged_delta), "valid_bound": valid_bound, "actor": _actor(),
        "process": process, "note": note,
    }


# ---------------------------------------------------------------------- the ledger
class PrivacyLedger:
    """Reads and appends the shared ``privacy_ledger`` table of a lake.

    Args:
        spark: a session, or None: on a local lake the ledger needs none (delta-rs); on a Unity
            Catalog lake one is started when needed.
        config: the configuration (lake location, default budget, composition rule).
    """

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
    def _status(self, dataset: str, rows: list[dict[str, Any]] | None = None) -> BudgetStatus:
        rows = self._store.rows(dataset) if rows is None else rows
        return _fold(dataset, rows, self._config, lake=self.lake, location=self.location)

    def status(self, dataset: str, *, require_known: bool = False) -> BudgetStatus:
        """Budget, spent and remaining of ``dataset`` and the state of each of its runs.

        Raises:
            ConfigError: ``require_known`` and the dataset has neither ledger rows nor tables
                in the lake nor a ``datasets:`` entry in the configuration.
        """
        rows = self._store.rows(dataset)
        if require_known and not rows:
            self.check_known(dataset)
        return self._status(dataset, rows)

    def datasets(self) -> list[str]:
        """Datasets with rows in the ledger."""
        return sorted({r["dataset"] for r in self._store.rows()})

    def lake_datasets(self) -> list[str]:
        """Datasets with tables in a local lake (bronze, silver or gold folders)."""
        from gpope.shell.lake.names import local_root

        lk = self._config.lake
        local = None if lk.catalog is not None else local_root(str(lk.root))
        found: set[str] = set()
        if local is not None:
            for layer in ("bronze", "silver", "gold"):
                base = Path(local) / layer
                if base.is_dir():
                    found |= {p.name for p in base.iterdir()
                              if p.is_dir() and p.name not in ("released_estimates",
                                                               "privacy_ledger", "released_values",
                                                               "pipeline_runs")
                              and not (p / "_delta_log").is_dir()}
        return sorted(found)

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
        """Who produced the dataset's raw tables (``"simulate"``), or None if unknown.

        On a local lake the record must be at least as new as the last commit of the bronze
        ``observations`` table: raw data loaded after a simulation is not simulated.
        """
        rows = [r for r in self._store.rows(dataset) if _kind(r) == "origin"]
        if not rows:
            return None
        latest = max(rows, key=lambda r: r["created_at"])
        from gpope.shell.pipeline.ledger_store import _local_path_of

        path = _local_path_of(self._config, "bronze", dataset, "observations")
        if path is not None:
            from deltalake import DeltaTable

            from gpope.shell.delta_read import commit_history

            if DeltaTable.is_deltatable(path):
                history = commit_history(DeltaTable(path), 1)
                stamp = history[0].get("timestamp") if history else None
                if stamp is not None:
                    committed = datetime.fromtimestamp(stamp / 1000, UTC).replace(tzinfo=None)
                    if committed > latest["created_at"] + timedelta(seconds=1):
                        return None
        return str(latest["mechanism"]).removeprefix("origin:")

    def entry(self, dataset: str, run_id: str) -> LedgerEntry | None:
        """The current state of run ``run_id`` (None if the ledger has no such run)."""
        for run in self.status(dataset).runs:
            if run.run_id == run_id:
                return run
        return None

    # ------------------------------------------------------------------ updates
    def set_budget(
        self, dataset: str, *, epsilon: float, delta: float, force: bool = False,
        require_known: bool = False,
    ) -> BudgetStatus:
        """Set the dataset's total budget (a new budget row; the latest one applies).

        Raises:
            ConfigError: non-positive values; a budget below what is already spent; raising an
                existing budget (an explicit one, or the default once runs were charged) without
                ``force``; an unknown dataset with ``require_known``.
        """
        check_number("budget", "epsilon", epsilon, gt=0.0)
        check_number("budget", "delta", delta, gt=0.0, lt=1.0)
        rows = self._store.rows(dataset)
        if require_known and not rows:
            self.check_known(dataset)
        current = self._status(dataset, rows)
        if epsilon + _TOLERANCE < current.spent_epsilon:
            raise ConfigError(
                f"Dataset {dataset!r} has already spent epsilon {current.spent_epsilon:.6g} "
                f"({current.composition} composition); a budget must be at least that. Got "
                f"epsilon {epsilon}, delta {delta}."
            )
        if current.composition == "basic" and delta * (1 + _TOLERANCE) < current.spent_delta_basic:
            raise ConfigError(
                f"Dataset {dataset!r} has already spent delta {current.spent_delta_basic:.3g}; a "
                f"budget must be at least that. Got delta {delta}."
            )
        has_budget = any(_kind(r) == "budget" for r in rows)
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

    def reserve(
        self,
        dataset: str,
        *,
        run_id: str,
        epsilon: float,
        delta: float,
        accountant: str,
        mechanism: str | None = None,
        event: DpEvent | None = None,
        relation: str = "add_or_remove_one",
        label: str = "",
        charged_epsilon: float | None = None,
        valid_bound: bool = True,
        note: str | None = None,
    ) -> LedgerEntry:
        """Record the spend of run ``run_id`` before it draws noise or writes output.

        Args:
            event, relation: the run's dp-accounting event and neighbouring relation (composed
                tightly across runs); ``mechanism`` (text) is accepted instead for callers
                without an event (then the dataset falls back to basic composition).
            charged_epsilon: what the run costs in the basic sum (default ``epsilon``); for an
                accountant that is not a valid bound, a rigorous bound of the same mechanism.
            valid_bound: False when ``epsilon`` comes from an accountant that is not a valid
                bound (``paper``): recorded as such, never counted as a guarantee.

        Raises:
            BudgetExceededError: the spend would take the dataset past its budget; nothing is
                written (or, after a concurrent race, the reservation is written as cancelled).
        """
        from gpope.core.accounting.composition import mechanism_to_json

        check_number("reservation", "epsilon", epsilon, gt=0.0)
        check_number("reservation", "delta", delta, ge=0.0, lt=1.0)
        if event is not None:
            text = mechanism_to_json(event, relation, label)
        elif mechanism is not None:
            text = mechanism
        else:
            raise ConfigError("reserve() needs the run's dp-accounting 'event' (or 'mechanism').")
        charge = float(epsilon if charged_epsilon is None else charged_epsilon)
        self.reconcile(dataset)
        before = self.status(dataset)
        if any(r.run_id == run_id for r in before.runs):
            raise ConfigError(f"Run id {run_id!r} is already in the ledger; use a fresh run id.")
        _check_one_relation(dataset, before.counted, text)
        row = _row(dataset, run_id, kind="reservation", mechanism=text, epsilon=epsilon,
                   delta=delta, accountant=accountant, status="reserved", charged_epsilon=charge,
                   charged_delta=delta, valid_bound=valid_bound, note=note, process=_process())
        candidate = LedgerEntry(**{k: row[k] for k in LedgerEntry.__dataclass_fields__})
        curves = {e.run_id: _curve(e.mechanism) for e in before.counted}
        curves[run_id] = _curve(text)
        fold = _Fold(before.budget_epsilon, before.budget_delta, self._config.privacy.composition,
                     curves)
        rule = fold.rule((*before.counted, candidate))
        if not fold.fits(list(before.counted), candidate, rule):
            raise BudgetExceededError(_refusal(before, fold, candidate, rule))
        self._store.append([row])
        after = self.status(dataset)
        curves = {e.run_id: _curve(e.mechanism) for e in after.counted}
        fold = _Fold(after.budget_epsilon, after.budget_delta, self._config.privacy.composition,
                     curves)
        if run_id not in fold.admitted(after.counted, fold.rule(after.counted)):
            self._append_settlement(row, "cancelled", reverse=True,
                                    note="a concurrent reservation took the budget first")
            raise BudgetExceededError(_refusal(before, fold, candidate, rule, race=True))
        return candidate

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
        """Record the final status (``released`` or ``failed``) of a reserved run.

        Marking a run with the status it already has (e.g. after ``reconcile`` settled it from
        the same evidence) is a no-op.

        Raises:
            ConfigError: unknown status, or no reservation for ``run_id``.
        """
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
        row = self._append_settlement(current.__dict__, status, note=note)
        return LedgerEntry(**{**current.__dict__, "status": status, "created_at": row["created_at"]})

    def reconcile(self, dataset: str | None = None, *, spark: SparkSession | None = None) -> list[Settlement]:
        """Settle stale reservations of killed runs from the evidence.

        A reservation is stale when its process is known dead (same host, pid gone) or it is
        older than ``privacy.reservation_timeout_hours``. It becomes ``released`` if
        released_estimates has a row with its run id that readers see (its release manifest in
        ``pipeline_runs`` is committed), else ``failed`` (still counted: it may have
        drawn noise). A reservation with a release is settled ``released`` even if its process
        still runs (the evidence is final; the run's own mark is then a no-op).
        """
        from gpope.shell.pipeline.ledger_store import released_run_ids

        names = [dataset] if dataset is not None else self.datasets()
        open_runs = [
            e for name in names for e in self.status(name).runs if e.status == "reserved"
        ]
        if not open_runs:
            return []
        released = released_run_ids(self._config, {e.run_id for e in open_runs},
                                    spark or self._spark)
        timeout = timedelta(hours=self._config.privacy.reservation_timeout_hours)
        now = _now()
        out: list[Settlement] = []
        for e in open_runs:
            if e.run_id in released:
                status, evidence = "released", ("released_estimates has a row with this run_id "
                                      "(release manifest committed)")
            elif _process_dead(e.process) or now - e.created_at > timeout:
                why = (f"process {e.process} is gone" if _process_dead(e.process)
                       else f"reserved more than {timeout} ago")
                status = "failed"
                evidence = (f"{why} and released_estimates has no committed row for it "
                            "(still counted)")
            else:
                continue
            self._append_settlement(e.__dict__, status, note=f"reconciled: {evidence}")
            out.append(Settlement(e.dataset, e.run_id, status, evidence))
        return out


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


def _refusal(status: BudgetStatus, fold: _Fold, candidate: LedgerEntry, rule: str, *,
             race: bool = False) -> str:
    why = " (a concurrent run reserved first)" if race else ""
    if rule == "rdp":
        after = fold.tight([*status.counted, candidate])
        detail = (
            f"composed tightly with the dataset's {len(status.counted)} counted run(s) (RDP "
            f"filter at delta {status.budget_delta:.3g}) the spend would be epsilon {after:.6g}"
        )
    else:
        detail = (
            f"basic composition over {len(status.counted)} counted run(s) would spend epsilon "
            f"{status.spent_epsilon_basic + candidate.charged_epsilon:.6g}, delta "
            f"{status.spent_delta_basic + candidate.charged_delta:.3g}"
        )
    charge = ""
    if not candidate.valid_bound:
        charge = (f" The {candidate.accountant!r} accountant is not a valid bound: this run is "
                  f"charged its rigorous RDP epsilon {candidate.charged_epsilon:.6g}, not the "
                  f"claimed {candidate.epsilon:g}.")
    return (
        f"Privacy budget of dataset {status.dataset!r} exceeded{why}: this run claims epsilon "
        f"{candidate.epsilon:.6g}, delta {candidate.delta:.3g}; {detail}, over the budget epsilon "
        f"{status.budget_epsilon:.6g}, delta {status.budget_delta:.3g}.{charge} Nothing was "
        f"released. Lower --epsilon, or raise the budget with `gpope budget set --dataset "
        f"{status.dataset} --epsilon E --delta D --force` if your policy allows."
    )


# ---------------------------------------------------------------------- budget_status
def budget_status_rows(config: GpopeConfig, *, spark: SparkSession | None = None,
                       store: LedgerStore | None = None) -> list[dict[str, Any]]:
    """One ``budget_status`` row per dataset in the ledger (no JVM on a local lake); ``store``
    reads a given ledger (e.g. one pinned to a version) instead of the lake's latest."""
    ledger = PrivacyLedger(spark, config, store=store)
    rows = ledger._store.rows()
    names = sorted({r["dataset"] for r in rows})
    return [ledger._status(name, [r for r in rows if r["dataset"] == name]).row() for name in names]


#: Column comments of the ``budget_status`` view (``gpope query --describe budget_status``).
BUDGET_STATUS_COMMENTS: dict[str, str] = {
    "dataset": "dataset (cohort) name",
    "budget_epsilon": "total epsilon budget",
    "budget_delta": "total delta budget",
    "budget_source": "who/when set it, or the default",
    "composition": "governing rule: rdp (tight, Renyi filter) or basic (sum)",
    "spent_epsilon": "epsilon spent under the governing rule",
    "spent_delta": "delta of the current guarantee under the governing rule",
    "spent_epsilon_basic": "sum of the runs' charged epsilons",
    "spent_delta_basic": "sum of the runs' charged deltas",
    "spent_epsilon_tight": "RDP filter composition of the runs at budget_delta (null: a run has no stored mechanism)",
    "remaining_epsilon": "budget_epsilon - spent_epsilon",
    "remaining_delta": "delta left (rdp: runs do not consume delta)",
    "runs_counted": "reserved, released and failed runs",
    "runs_left": "more runs like the latest one that still fit (null before the first run)",
    "invalid_runs": "runs whose accountant is not a valid bound (paper)",
    "updated_at": "latest ledger row of a run (UTC)",
}

_BUDGET_STATUS_TYPES: dict[str, str] = {
    "dataset": "string",
    "budget_epsilon": "double",
    "budget_delta": "double",
    "budget_source": "string",
    "composition": "string",
    "spent_epsilon": "double",
    "spent_delta": "double",
    "spent_epsilon_basic": "double",
    "spent_delta_basic": "double",
    "spent_epsilon_tight": "double",
    "remaining_epsilon": "double",
    "remaining_delta": "double",
    "runs_counted": "long",
    "runs_left": "long",
    "invalid_runs": "long",
    "updated_at": "timestamp",
}


def budget_status_table(config: GpopeConfig, *, spark: SparkSession | None = None,
                        store: LedgerStore | None = None) -> pa.Table:
    """:func:`budget_status_rows` as an Arrow table (the ``budget_status`` view of ``gpope query``)."""
    import pyarrow as pa

    types = {"string": pa.string(), "double": pa.float64(), "long": pa.int64(),
             "timestamp": pa.timestamp("us")}
    schema = pa.schema([
        pa.field(name, types[kind], metadata={"comment": BUDGET_STATUS_COMMENTS[name]})
        for name, kind in _BUDGET_STATUS_TYPES.items()
    ])
    rows = budget_status_rows(config, spark=spark, store=store)
    return pa.Table.from_pylist(rows, schema=schema)

"""The privacy ledger: per-dataset budgets and every run's spend, in the gold ``privacy_ledger``.

The ledger is an append-only Delta table shared by all datasets (``<lake>/gold/privacy_ledger``)
with the columns of :data:`gpope.shell.schemas.PRIVACY_LEDGER`. Two kinds of rows:

* **budget** rows (``status="budget"``, ``mechanism="budget"``): written by ``gpope budget set``;
  the latest one is the dataset's budget. Without one, the budget is ``privacy.default_epsilon`` /
  ``privacy.default_delta`` of the configuration.
* **spend** rows, one per status change of a run: ``reserved`` (written before any noise is drawn
  or output written), then ``released`` (the outputs were committed) or ``failed`` (the run
  stopped after its reservation). A run's status is its final one (``released``, ``failed`` or
  ``cancelled``) if any, else ``reserved``.

Composition is **basic**: the spent (epsilon, delta) of a dataset is the sum over its runs whose
status is ``reserved``, ``released`` or ``failed``. A failed run stays counted: once a run holds a
reservation it may have drawn noise and touched the data, and privacy spent is spent. Only a
``cancelled`` reservation is free: the ledger writes it itself when a concurrent reservation
would have taken the dataset over budget, before that run has drawn anything.

Reservation is check - append - re-check: a run whose spend would exceed the budget raises
:class:`~gpope.errors.BudgetExceededError` and writes nothing; if two runs race past the first
check, the re-check sees both and cancels (at least) the one that does not fit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpope.core.validation import check_number
from gpope.errors import BudgetExceededError, ConfigError, TableNotFoundError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig

__all__ = [
    "COUNTED_STATUSES",
    "BudgetStatus",
    "LedgerEntry",
    "PrivacyLedger",
]

#: Statuses whose spend counts against the budget.
COUNTED_STATUSES: tuple[str, ...] = ("reserved", "released", "failed")
_FINAL = ("released", "failed", "cancelled")
_TOLERANCE = 1e-12  # float slack when comparing sums of epsilons with the budget


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

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        d = dict(self.__dict__)
        d["created_at"] = self.created_at.isoformat()
        return d


@dataclass(frozen=True)
class BudgetStatus:
    """Budget, spend and remaining (epsilon, delta) of one dataset (basic composition)."""

    dataset: str
    budget_epsilon: float
    budget_delta: float
    budget_source: str
    spent_epsilon: float
    spent_delta: float
    runs: tuple[LedgerEntry, ...] = field(default=())

    @property
    def remaining_epsilon(self) -> float:
        """Budget minus spent epsilon (never below 0)."""
        return max(0.0, self.budget_epsilon - self.spent_epsilon)

    @property
    def remaining_delta(self) -> float:
        """Budget minus spent delta (never below 0)."""
        return max(0.0, self.budget_delta - self.spent_delta)

    def allows(self, epsilon: float, delta: float) -> bool:
        """True if a further spend of (epsilon, delta) stays within the budget."""
        return (
            self.spent_epsilon + epsilon <= self.budget_epsilon + _TOLERANCE
            and self.spent_delta + delta <= self.budget_delta + _TOLERANCE
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        return {
            "dataset": self.dataset,
            "composition": "basic",
            "budget": {"epsilon": self.budget_epsilon, "delta": self.budget_delta,
                       "source": self.budget_source},
            "spent": {"epsilon": self.spent_epsilon, "delta": self.spent_delta},
            "remaining": {"epsilon": self.remaining_epsilon, "delta": self.remaining_delta},
            "runs": [r.to_dict() for r in self.runs],
        }

    def summary(self) -> str:
        """Human-readable lines."""
        lines = [
            f"privacy budget of dataset {self.dataset!r} (basic composition; budget {self.budget_source}):",
            f"  budget     epsilon {self.budget_epsilon:.6g}   delta {self.budget_delta:.3g}",
            f"  spent      epsilon {self.spent_epsilon:.6g}   delta {self.spent_delta:.3g}",
            f"  remaining  epsilon {self.remaining_epsilon:.6g}   delta {self.remaining_delta:.3g}",
        ]
        if self.runs:
            lines.append(f"  runs ({len(self.runs)}):")
            for r in self.runs:
                lines.append(
                    f"    {r.created_at:%Y-%m-%d %H:%M:%S}  {r.run_id}  {r.status:<9}  "
                    f"epsilon {r.epsilon:.6g}  delta {r.delta:.3g}  {r.accountant}"
                )
        return "\n".join(lines)


class PrivacyLedger:
    """Reads and appends the shared ``privacy_ledger`` table of a lake.

    Args:
        spark: the session.
        config: the configuration (lake location, default budget).
    """

    def __init__(self, spark: SparkSession, config: GpopeConfig) -> None:
        self._spark = spark
        self._config = config

    # ------------------------------------------------------------------ storage
    def _rows(self, dataset: str) -> list[dict[str, Any]]:
        from pyspark.sql import functions as F

        from gpope.shell import lake

        try:
            df = lake.read_shared_table(self._spark, self._config.lake, "privacy_ledger")
        except TableNotFoundError:
            return []
        return [r.asDict() for r in df.where(F.col("dataset") == dataset).collect()]

    def _append(self, rows: list[dict[str, Any]]) -> None:
        from gpope.shell import lake
        from gpope.shell.schemas import PRIVACY_LEDGER

        df = self._spark.createDataFrame(
            [tuple(r[f.name] for f in PRIVACY_LEDGER.fields) for r in rows], schema=PRIVACY_LEDGER
        )
        lake.write_shared_table(df, self._config.lake, "privacy_ledger", mode="append")

    @property
    def location(self) -> str:
        """Where the ledger table lives (path or Unity Catalog name)."""
        from gpope.shell import lake

        return str(lake.shared_table_location(self._config.lake, "privacy_ledger"))

    # ------------------------------------------------------------------ queries
    def status(self, dataset: str) -> BudgetStatus:
        """Budget, spent and remaining of ``dataset`` and the state of each of its runs."""
        return _status(dataset, self._rows(dataset), self._config)

    def entry(self, dataset: str, run_id: str) -> LedgerEntry | None:
        """The current state of run ``run_id`` (None if the ledger has no such run)."""
        for run in self.status(dataset).runs:
            if run.run_id == run_id:
                return run
        return None

    # ------------------------------------------------------------------ updates
    def set_budget(self, dataset: str, *, epsilon: float, delta: float) -> BudgetStatus:
        """Set the dataset's total budget (a new budget row; the latest one applies).

        Raises:
            ConfigError: non-positive values, or a budget below what is already spent.
        """
        check_number("budget", "epsilon", epsilon, gt=0.0)
        check_number("budget", "delta", delta, ge=0.0, lt=1.0)
        current = self.status(dataset)
        if epsilon + _TOLERANCE < current.spent_epsilon or delta + _TOLERANCE < current.spent_delta:
            raise ConfigError(
                f"Dataset {dataset!r} has already spent epsilon {current.spent_epsilon:.6g}, delta "
                f"{current.spent_delta:.3g}; a budget must be at least that. Got epsilon {epsilon}, "
                f"delta {delta}."
            )
        self._append([
            _row(dataset, f"budget-{uuid.uuid4().hex[:12]}", "budget", epsilon, delta, "-", "budget")
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
        mechanism: str,
    ) -> LedgerEntry:
        """Record the spend of run ``run_id`` before it draws noise or writes output.

        Raises:
            BudgetExceededError: the spend would take the dataset past its budget; nothing is
                written (or, after a concurrent race, the reservation is written as cancelled).
        """
        check_number("reservation", "epsilon", epsilon, gt=0.0)
        check_number("reservation", "delta", delta, ge=0.0, lt=1.0)
        before = self.status(dataset)
        if any(r.run_id == run_id for r in before.runs):
            raise ConfigError(f"Run id {run_id!r} is already in the ledger; use a fresh run id.")
        if not before.allows(epsilon, delta):
            raise BudgetExceededError(_refusal(before, epsilon, delta))
        row = _row(dataset, run_id, mechanism, epsilon, delta, accountant, "reserved")
        self._append([row])
        after = self.status(dataset)
        if after.spent_epsilon > after.budget_epsilon + _TOLERANCE or (
            after.spent_delta > after.budget_delta + _TOLERANCE
        ):
            self._append([{**row, "status": "cancelled", "created_at": _now()}])
            raise BudgetExceededError(_refusal(before, epsilon, delta, race=True))
        return _entry(row)

    def mark(self, dataset: str, run_id: str, status: str) -> LedgerEntry:
        """Record the final status (``released`` or ``failed``) of a reserved run.

        Raises:
            ConfigError: unknown status, or no reservation for ``run_id``.
        """
        if status not in ("released", "failed"):
            raise ConfigError(f"A run can be marked 'released' or 'failed'. Got {status!r} instead.")
        current = self.entry(dataset, run_id)
        if current is None or current.status != "reserved":
            raise ConfigError(
                f"Run {run_id!r} of dataset {dataset!r} has no open reservation "
                f"(status: {None if current is None else current.status}); reserve before marking."
            )
        row = {**current.__dict__, "status": status, "created_at": _now()}
        self._append([row])
        return _entry(row)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _row(
    dataset: str, run_id: str, mechanism: str, epsilon: float, delta: float, accountant: str,
    status: str,
) -> dict[str, Any]:
    return {
        "dataset": dataset,
        "run_id": run_id,
        "mechanism": mechanism,
        "epsilon": float(epsilon),
        "delta": float(delta),
        "accountant": accountant,
        "status": status,
        "created_at": _now(),
    }


def _entry(row: dict[str, Any]) -> LedgerEntry:
    return LedgerEntry(**{k: row[k] for k in LedgerEntry.__dataclass_fields__})


def _status(dataset: str, rows: list[dict[str, Any]], config: GpopeConfig) -> BudgetStatus:
    """Fold the ledger rows of one dataset into its BudgetStatus (pure)."""
    rows = sorted(rows, key=lambda r: r["created_at"])
    budgets = [r for r in rows if r["status"] == "budget"]
    if budgets:
        budget_eps, budget_delta = budgets[-1]["epsilon"], budgets[-1]["delta"]
        source = "set with `gpope budget set`"
    else:
        budget_eps = config.privacy.default_epsilon
        budget_delta = config.privacy.default_delta
        source = "privacy.default_* of the configuration"
    runs: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["status"] == "budget":
            continue
        prev = runs.get(r["run_id"])
        if prev is None or prev["status"] not in _FINAL:
            runs[r["run_id"]] = {**r, "created_at": prev["created_at"] if prev else r["created_at"]}
    entries = tuple(_entry(r) for r in runs.values())
    counted = [e for e in entries if e.status in COUNTED_STATUSES]
    return BudgetStatus(
        dataset=dataset,
        budget_epsilon=float(budget_eps),
        budget_delta=float(budget_delta),
        budget_source=source,
        spent_epsilon=float(sum(e.epsilon for e in counted)),
        spent_delta=float(sum(e.delta for e in counted)),
        runs=entries,
    )


def _refusal(status: BudgetStatus, epsilon: float, delta: float, *, race: bool = False) -> str:
    why = " (a concurrent run reserved first)" if race else ""
    return (
        f"Privacy budget of dataset {status.dataset!r} exceeded{why}: this run needs epsilon "
        f"{epsilon:.6g}, delta {delta:.3g}, but only epsilon {status.remaining_epsilon:.6g}, delta "
        f"{status.remaining_delta:.3g} remain of the budget epsilon {status.budget_epsilon:.6g}, delta "
        f"{status.budget_delta:.3g} (basic composition over {len(status.runs)} runs). Nothing was "
        f"released. Lower --epsilon/--delta, or raise the budget with `gpope budget set --dataset "
        f"{status.dataset} --epsilon E --delta D` if your policy allows."
    )

"""A dataset's privacy budget folded from its ledger rows in commit order (pure).

The privacy ledger (``gold/privacy_ledger``) is append-only; this module is its whole decision
logic, with no storage: it folds one dataset's rows into a :class:`BudgetStatus` and decides
admission.

Order. Rows are folded in **commit order** (``LedgerRow.version``, the ledger commit that added
the row). A reservation is admitted iff it fits the budget in force at its commit given the runs
admitted at earlier commits, so every writer reaches the same decision whatever its clock says,
and a later commit never changes an earlier decision; ``created_at`` is only shown. Rows whose
commit has left the table's log (``UNKNOWN_VERSION``) come first, in ``created_at`` order; they
are settled, and a settled status decides for itself (``released`` and ``failed`` count for ever,
``cancelled`` never), so the order of expired commits cannot change what was charged.

Rules (``composition``): ``rdp``, the Rényi filter of :mod:`gpope.core.accounting.composition`
(a run is admitted iff the filter still certifies the budget's epsilon at the budget's delta; a
dataset's first run may also be admitted on its own certificate; runs do not consume delta), or
``basic`` (charged epsilons and deltas add up), which also governs a dataset with a run whose
mechanism cannot be composed. Spent, remaining and runs left have one definition each
(:class:`BudgetStatus`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import numpy as np

from gpope.core.accounting.registry import not_a_valid_bound

__all__ = ["COMPOSITIONS", "COUNTED_STATUSES", "TOLERANCE", "UNKNOWN_VERSION", "Budget",
           "BudgetStatus", "LedgerEntry", "LedgerRow", "admits", "fold"]

#: Statuses whose spend counts against the budget (when the run was admitted).
COUNTED_STATUSES: tuple[str, ...] = ("reserved", "released", "failed")
#: Composition rules of ``privacy.composition``.
COMPOSITIONS: tuple[str, ...] = ("rdp", "basic")
#: ``LedgerRow.version`` of a row whose commit is no longer in the table's log.
UNKNOWN_VERSION = -1
_FINAL = ("released", "failed", "cancelled")
TOLERANCE = 1e-9  #: float slack when comparing spends with the budget
_MAX_RUNS_LEFT = 100_000
_PENDING = 2**62  # the version of a candidate that is not yet committed: after every row


@dataclass(frozen=True)
class _LedgerFields:
    """The ledger table's contract columns (DESIGN.md): what every row and run state carries."""

    dataset: str
    run_id: str
    mechanism: str
    epsilon: float
    delta: float
    accountant: str
    status: str
    created_at: datetime


@dataclass(frozen=True)
class LedgerRow(_LedgerFields):
    """One row of the ledger table, with the version of the commit that added it."""

    kind: str | None = None
    charged_epsilon: float | None = None
    charged_delta: float | None = None
    valid_bound: bool | None = None
    actor: str | None = None
    process: str | None = None
    note: str | None = None
    version: int = UNKNOWN_VERSION

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> LedgerRow:
        """The row of a store's mapping (missing optional columns are None)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in names}
        if values.get("version") is None:
            values["version"] = UNKNOWN_VERSION
        return cls(**values)

    @property
    def row_kind(self) -> str:
        """budget, origin, reservation or settlement (rows written before ``kind``: from status)."""
        if self.kind:
            return self.kind
        if self.status == "budget":
            return "budget"
        return "reservation" if self.status == "reserved" else "settlement"

    @property
    def key(self) -> str:
        """The row's identity within its commit (kind, run id, status)."""
        return row_key(self.row_kind, self.run_id, self.status)


def row_key(kind: str, run_id: str, status: str) -> str:
    """The identity of a ledger row: stores record it with the commit that adds the row."""
    return f"{kind}/{run_id}/{status}"


@dataclass(frozen=True)
class LedgerEntry(_LedgerFields):
    """The current state of one run in the ledger; ``admitted``: the commit-order decision for its
    reservation (a run not admitted never draws noise, and its spend is not counted)."""

    charged_epsilon: float = 0.0
    charged_delta: float = 0.0
    valid_bound: bool = True
    actor: str | None = None
    process: str | None = None
    note: str | None = None
    version: int = UNKNOWN_VERSION
    admitted: bool = True

    @property
    def counted(self) -> bool:
        """True when its spend counts: admitted and reserved, released or failed."""
        return self.admitted and self.status in COUNTED_STATUSES

    def to_dict(self) -> dict[str, Any]:
        """Plain form for ``--json``."""
        d = dict(self.__dict__)
        d["created_at"] = self.created_at.isoformat()
        return d


@dataclass(frozen=True)
class Budget:
    """A dataset's total budget and where it comes from."""

    epsilon: float
    delta: float
    source: str
    explicit: bool = False  #: set by a budget row (not the configuration's default)


# ---------------------------------------------------------------------- mechanisms
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


def _curve(mechanism: str) -> tuple[str, np.ndarray] | None:
    """(relation, RDP curve at the filter's orders) of a stored mechanism, or None."""
    cached = _curve_cached(mechanism)
    return None if cached is None else (cached[0], np.asarray(cached[1]))


def _legacy_charge(row: LedgerRow) -> float:
    """The charge of a reservation written before charges were stored."""
    eps = float(row.epsilon)
    if not_a_valid_bound(row.accountant):  # charge rigorous RDP of the event
        from dp_accounting.rdp.rdp_privacy_accountant import compute_epsilon

        from gpope.core.accounting.composition import FILTER_ORDERS

        curve = _curve(row.mechanism)
        if curve is not None:
            eps = max(eps, float(compute_epsilon(list(FILTER_ORDERS), curve[1], row.delta)[0]))
    return eps


def _entry(row: LedgerRow) -> LedgerEntry:
    return LedgerEntry(
        dataset=row.dataset, run_id=row.run_id, mechanism=row.mechanism,
        epsilon=float(row.epsilon), delta=float(row.delta), accountant=row.accountant,
        status=row.status, created_at=row.created_at,
        charged_epsilon=(float(row.charged_epsilon) if row.charged_epsilon is not None
                         else _legacy_charge(row)),
        charged_delta=(float(row.charged_delta) if row.charged_delta is not None
                       else float(row.delta)),
        valid_bound=(bool(row.valid_bound) if row.valid_bound is not None
                     else not not_a_valid_bound(row.accountant)),
        actor=row.actor, process=row.process, note=row.note, version=row.version,
    )


# ---------------------------------------------------------------------- the admission rule
class _Rule:
    """The ledger's admission rule for one composition setting (pure)."""

    def __init__(self, composition: str) -> None:
        self.composition = composition

    def name(self, entries: Iterable[LedgerEntry]) -> str:
        """``rdp`` when configured and every run's mechanism composes, else ``basic``."""
        if self.composition == "rdp" and all(_curve(e.mechanism) is not None for e in entries):
            return "rdp"
        return "basic"

    @staticmethod
    def tight(entries: Sequence[LedgerEntry], delta: float, like: LedgerEntry | None = None,
              copies: int = 0) -> float:
        """The Rényi filter's epsilon at ``delta`` of ``entries`` plus ``copies`` of ``like``."""
        from gpope.core.accounting.composition import filter_epsilon

        curves = [_curve(e.mechanism) for e in entries]
        if copies and like is not None:
            rel, curve = _curve(like.mechanism)  # type: ignore[misc]
            curves.append((rel, curve * copies))
        return filter_epsilon(curves, delta)  # type: ignore[arg-type]

    def fits(self, admitted: Sequence[LedgerEntry], candidate: LedgerEntry, budget: Budget,
             copies: int = 1) -> bool:
        """Would ``copies`` more runs like ``candidate`` all be admitted after ``admitted``?"""
        rule = self.name([*admitted, candidate])
        eps = sum(e.charged_epsilon for e in admitted) + copies * candidate.charged_epsilon
        delta = sum(e.charged_delta for e in admitted) + copies * candidate.charged_delta
        basic_ok = eps <= budget.epsilon + TOLERANCE and delta <= budget.delta * (1 + TOLERANCE)
        if rule == "basic":
            return basic_ok
        if not admitted and copies == 1 and basic_ok:  # a first run on its own certificate
            return True
        return self.tight(admitted, budget.delta, candidate, copies) <= budget.epsilon + TOLERANCE


def _ordered(rows: Iterable[LedgerRow]) -> list[LedgerRow]:
    order = {"budget": 0, "origin": 0, "reservation": 1, "settlement": 2}
    return sorted(rows, key=lambda r: (r.version, r.created_at, order.get(r.row_kind, 3)))


def _final_statuses(rows: Sequence[LedgerRow]) -> dict[str, str]:
    """Each settled run's final status (its first final settlement), from the rows alone."""
    out: dict[str, str] = {}
    for r in rows:
        if r.row_kind == "settlement" and r.status in _FINAL:
            out.setdefault(r.run_id, r.status)
    return out


def _replay(rows: Sequence[LedgerRow], default: Budget, composition: str
            ) -> tuple[Budget, dict[str, LedgerEntry]]:
    """Replay the rows in commit order: the budget in force and each run's state.

    A run's final status is authoritative: ``released`` and ``failed`` runs were admitted (a run
    proceeds past its reservation only when admitted) and count for ever, ``cancelled`` runs never
    do, whatever commit versions the table's log still holds. Only open reservations are decided
    by the commit-order rule.
    """
    rule = _Rule(composition)
    budget = default
    runs: dict[str, LedgerEntry] = {}
    ordered = _ordered(rows)
    final = _final_statuses(ordered)
    for r in ordered:
        kind = r.row_kind
        if kind == "budget":
            who = f" by {r.actor}" if r.actor else ""
            budget = Budget(float(r.epsilon), float(r.delta),
                            f"set with `gpope budget set`{who} at "
                            f"{r.created_at:%Y-%m-%d %H:%M:%S} UTC", explicit=True)
        elif kind == "reservation" and r.run_id not in runs:
            entry = _entry(r)
            settled = final.get(r.run_id)
            if settled is not None:
                decided = settled != "cancelled"
            else:
                decided = rule.fits([e for e in runs.values() if e.counted], entry, budget)
            runs[r.run_id] = replace(entry, admitted=decided)
        elif kind == "settlement" and r.run_id in runs:
            prev = runs[r.run_id]
            if prev.status not in _FINAL:
                # A settled status is the persisted decision, not re-derived: a released or
                # failed run got past its admission and is charged for ever; a cancelled one
                # never is, whatever order the log (which expires) gives the reservations.
                runs[r.run_id] = replace(prev, status=r.status, note=r.note or prev.note,
                                         admitted=r.status != "cancelled")
    return budget, runs


def admits(rows: Sequence[LedgerRow], candidate: LedgerRow, *, default: Budget,
           composition: str) -> bool:
    """Is ``candidate`` (a reservation) admitted after ``rows``, by the commit-order rule? Unset
    ``candidate.version``: committed after every row (the shell's check before its append; after
    it, with the version its commit got, the decision)."""
    if candidate.version == UNKNOWN_VERSION:
        candidate = replace(candidate, version=_PENDING)
    _, runs = _replay([*rows, candidate], default, composition)
    return runs[candidate.run_id].admitted


def _runs_left(rule: _Rule, counted: list[LedgerEntry], latest: LedgerEntry, budget: Budget) -> int:
    """Largest k such that k more runs like ``latest`` are all admitted (the admission rule)."""
    def ok(k: int) -> bool:
        return rule.fits(counted, latest, budget, copies=k)

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


@dataclass(frozen=True)
class BudgetStatus:
    """Budget, spend (basic and tight) and remaining of one dataset.

    One definition for every figure:

    * ``spent_epsilon_basic``, ``spent_delta_basic``: sums of the counted runs' charges.
    * ``spent_epsilon_tight``: the Rényi filter's epsilon of the counted runs at the budget's
      delta; with one run, the smaller of that and the run's own charged epsilon (the run is its
      own certificate). None when a run has no stored mechanism.
    * ``spent_epsilon``, ``spent_delta``: the guarantee of the counted runs under the governing
      rule (``composition``): basic, the sums; rdp, ``spent_epsilon_tight`` at the budget's
      delta (with one run certified by itself: that run's delta).
    * ``remaining_epsilon = budget_epsilon - spent_epsilon`` (at least 0); ``remaining_delta``:
      basic, ``budget_delta - spent_delta``; rdp, ``budget_delta`` (the filter's guarantee is
      stated at the budget's delta: runs do not consume it).
    * ``runs_left``: how many more runs like the latest counted one the ledger would admit (its
      own admission rule); None before the first run.
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
    budget_explicit: bool = False

    @property
    def raising_needs_force(self) -> bool:
        """True when raising this budget needs ``--force``: it was set explicitly, or runs were
        already charged against the default."""
        return self.budget_explicit or bool(self.counted)

    def set_command(self) -> str:
        """The ``gpope budget set`` command line that raises this dataset's budget."""
        force = " --force" if self.raising_needs_force else ""
        return f"gpope budget set --dataset {self.dataset} --epsilon E --delta D{force}"

    @property
    def counted(self) -> tuple[LedgerEntry, ...]:
        """Runs whose spend counts (admitted, and reserved, released or failed)."""
        return tuple(r for r in self.runs if r.counted)

    @property
    def no_further_run(self) -> bool:
        """True when no further run fits this budget."""
        if self.runs_left == 0 or self.remaining_epsilon <= TOLERANCE:
            return True
        return self.composition == "basic" and self.remaining_delta <= 0.0

    def entry(self, run_id: str) -> LedgerEntry | None:
        """The state of run ``run_id`` (None if the ledger has no such run)."""
        return next((r for r in self.runs if r.run_id == run_id), None)

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
        if self.composition == "rdp":
            delta = (f"at delta {self.budget_delta:.3g}: tight composition, runs do not consume "
                     "delta")
        else:
            delta = f"delta {self.remaining_delta:.3g} (basic composition)"
        text = f"remaining budget: epsilon {self.remaining_epsilon:.6g} {delta}"
        if self.no_further_run:
            return text + "; no further run is possible on this dataset within its budget"
        if self.runs_left is not None:
            return text + f"; {self.runs_left} more run(s) like the latest one would be admitted"
        return text

    def summary(self) -> str:
        """Human-readable lines."""
        tight = (
            f"{self.spent_epsilon_tight:.6g}" if self.spent_epsilon_tight is not None
            else "n/a (a run has no stored mechanism)"
        )
        counted = self.counted
        if (len(counted) == 1 and self.spent_epsilon_tight is not None
                and self.spent_epsilon_tight >= counted[0].charged_epsilon - TOLERANCE):
            tight += " (the one run's own certificate)"
        governs = {"rdp": "tight governs", "basic": "basic governs"}[self.composition]
        basic = (f"epsilon {self.spent_epsilon_basic:.6g}, delta {self.spent_delta_basic:.3g}")
        if self.composition == "rdp" and (
                self.spent_epsilon_basic > self.budget_epsilon + TOLERANCE
                or self.spent_delta_basic > self.budget_delta * (1 + TOLERANCE)):
            basic += " (beyond the budget under basic composition; not the governing rule)"
        lines = [
            f"privacy budget of dataset {self.dataset!r} (lake {self.lake}; ledger {self.location})",
            f"  budget     epsilon {self.budget_epsilon:.6g}   delta {self.budget_delta:.3g}   "
            f"({self.budget_source})",
            f"  spent      epsilon {self.spent_epsilon:.6g}, delta {self.spent_delta:.3g} "
            f"[{governs}]",
            f"             tight (RDP filter at delta {self.budget_delta:.3g}): epsilon {tight}; "
            f"basic (sum of charges): {basic}",
            f"  {self.remaining_line()}",
        ]
        if self.runs:
            lines.append(f"  runs ({len(self.runs)}, in commit order):")
            for r in self.runs:
                flag = "" if r.valid_bound else "  [NOT a valid bound: charged at rigorous RDP]"
                if not r.admitted:
                    flag += "  [not admitted: an earlier commit took the budget]"
                if r.status == "failed" and r.note:  # why, in its first clause
                    flag += f"  [{r.note.split(';')[0]}]"
                lines.append(
                    f"    {r.created_at:%Y-%m-%d %H:%M:%S}  {r.run_id}  {r.status:<9}  "
                    f"epsilon {r.epsilon:.6g}  delta {r.delta:.3g}  charged {r.charged_epsilon:.6g}"
                    f"  {r.accountant}{flag}"
                )
        return "\n".join(lines)


def fold(dataset: str, rows: Iterable[LedgerRow], *, default: Budget, composition: str,
         lake: str = "", location: str = "") -> BudgetStatus:
    """Fold the ledger rows of ``dataset`` in commit order into its :class:`BudgetStatus`."""
    mine = [r for r in rows if r.dataset == dataset]
    budget, runs = _replay(mine, default, composition)
    rule = _Rule(composition)
    entries = tuple(sorted(runs.values(), key=lambda e: (e.version, e.created_at)))
    counted = [e for e in entries if e.counted]
    governing = rule.name(counted)
    basic_eps = float(sum(e.charged_epsilon for e in counted))
    basic_delta = float(sum(e.charged_delta for e in counted))
    composable = all(_curve(e.mechanism) is not None for e in counted)
    tight: float | None = None
    if composable:
        tight = rule.tight(counted, budget.delta) if counted else 0.0
        if len(counted) == 1:
            tight = min(tight, counted[0].charged_epsilon)
    if governing == "rdp":
        spent = float(tight)  # type: ignore[arg-type]
        spent_delta = budget.delta if counted else 0.0
        if len(counted) == 1 and counted[0].charged_epsilon <= spent + TOLERANCE:
            spent_delta = counted[0].charged_delta
        remaining_delta = budget.delta
    else:
        spent, spent_delta = basic_eps, basic_delta
        remaining_delta = max(0.0, budget.delta - basic_delta)
    runs_left = _runs_left(rule, counted, counted[-1], budget) if counted else None
    return BudgetStatus(dataset=dataset, budget_epsilon=budget.epsilon, budget_delta=budget.delta,
                        budget_source=budget.source, composition=governing, spent_epsilon=spent,
                        spent_delta=float(spent_delta), spent_epsilon_basic=basic_eps,
                        spent_delta_basic=basic_delta,
                        spent_epsilon_tight=None if tight is None else float(tight),
                        remaining_epsilon=max(0.0, budget.epsilon - spent),
                        remaining_delta=remaining_delta, runs_left=runs_left, runs=entries,
                        lake=lake, location=location, budget_explicit=budget.explicit)

"""The privacy ledger's admission (pure): what a run asks for (:class:`Charge`) and the one
decision on it (:func:`decide`, on the fold of :mod:`gpope.core.accounting.budget`); the shell's
ledger only reads and appends rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpope.core.accounting.budget import (
    Budget,
    BudgetStatus,
    LedgerEntry,
    LedgerRow,
    _Rule,
    admits,
    fold,
)
from gpope.core.accounting.relations import stored_relation
from gpope.core.validation import check_number
from gpope.errors import BudgetExceededError, ConfigError

__all__ = ["Charge", "check_one_relation", "decide", "refusal_message"]


@dataclass(frozen=True, kw_only=True)
class Charge:
    """What one run asks the ledger to reserve, before it draws noise or writes output.
    ``mechanism``: the dp-accounting event and relation as JSON (:meth:`of_event`, composed
    tightly across runs), or a text (basic composition). ``charged_epsilon``: the run's cost in
    the basic sum (None: ``epsilon``; a rigorous bound when ``valid_bound`` is False)."""

    dataset: str
    run_id: str
    epsilon: float
    delta: float
    accountant: str
    mechanism: str
    charged_epsilon: float | None = None
    valid_bound: bool = True
    note: str | None = None

    def __post_init__(self) -> None:
        check_number("reservation", "epsilon", self.epsilon, gt=0.0)
        check_number("reservation", "delta", self.delta, ge=0.0, lt=1.0)
        if self.charged_epsilon is None:
            object.__setattr__(self, "charged_epsilon", float(self.epsilon))

    @classmethod
    def of_event(cls, event: Any, *, relation: str = "add_or_remove_one", label: str = "",
                 **fields: Any) -> Charge:
        """The charge of a run whose mechanism is the dp-accounting ``event`` under ``relation``."""
        from gpope.core.accounting.composition import mechanism_to_json

        return cls(mechanism=mechanism_to_json(event, relation, label), **fields)

    @classmethod
    def of_plan(cls, plan: Any, *, dataset: str, run_id: str) -> Charge:
        """The charge of a :class:`gpope.core.evaluation.plan.ReleasePlan`."""
        return cls.of_event(plan.event, relation=plan.relation, label=plan.label,
                            dataset=dataset, run_id=run_id, epsilon=plan.epsilon,
                            delta=plan.delta, accountant=plan.accountant,
                            charged_epsilon=plan.charged_epsilon, valid_bound=plan.valid_bound,
                            note=plan.ledger_note)

    def row(self, **shell: Any) -> dict[str, Any]:
        """Its ``reservation`` row (``shell``: ``created_at``, ``actor``, ``process``)."""
        return {"dataset": self.dataset, "run_id": self.run_id, "mechanism": self.mechanism,
                "epsilon": float(self.epsilon), "delta": float(self.delta),
                "accountant": self.accountant, "status": "reserved", "kind": "reservation",
                "charged_epsilon": float(self.charged_epsilon),  # type: ignore[arg-type]
                "charged_delta": float(self.delta), "valid_bound": self.valid_bound,
                "note": self.note, **shell}


def decide(rows: Sequence[LedgerRow], reservation: LedgerRow, *, default: Budget,
           composition: str, appended: bool = False, lake: str = "", location: str = ""
           ) -> LedgerEntry:
    """The ledger's one decision on a run's ``reservation`` row by the commit-order rule: whether
    it would be admitted, or with ``appended`` (``rows`` hold it at its commit's version) whether
    it was. Returns the admitted entry.

    Raises:
        ConfigError: before the append, a taken run id or a second relation.
        BudgetExceededError: the run does not fit (after: a concurrent run committed first).
    """
    status = fold(reservation.dataset, rows, default=default, composition=composition,
                  lake=lake, location=location)
    entry = LedgerEntry(**{k: getattr(reservation, k) for k in LedgerEntry.__dataclass_fields__
                           if hasattr(reservation, k)})
    if appended:
        decided = status.entry(reservation.run_id)
        if decided is None or not decided.admitted:
            raise BudgetExceededError(refusal_message(status, entry, race=True))
        return decided
    if status.entry(reservation.run_id) is not None:
        raise ConfigError(f"Run id {reservation.run_id!r} is already in the ledger; use a fresh "
                          "run id.")
    check_one_relation(reservation.dataset, status.counted, reservation.mechanism)
    if not admits(rows, reservation, default=default, composition=composition):
        raise BudgetExceededError(refusal_message(status, entry))
    return entry


def check_one_relation(dataset: str, counted: Iterable[LedgerEntry], mechanism: str) -> None:
    """Refuse (ConfigError) a run whose neighbouring relation differs from the dataset's counted
    runs. Neither the Rényi filter nor basic composition adds an add/remove epsilon to a
    replace-one one: by group privacy an add/remove (eps, delta) run is only (2 eps,
    (1 + e^eps) delta) under replace-one, and splitting one budget adaptively between two
    filters is no theorem we can cite (:mod:`.composition`)."""
    from gpope.core.accounting.composition import relation_of_sampling

    new = stored_relation(mechanism)
    if new is None:
        return
    used = {rel for e in counted if (rel := stored_relation(e.mechanism)) is not None}
    if used and new not in used:
        old = sorted(used)[0]
        sampling = {relation_of_sampling(s): s for s in ("uniform", "poisson")}
        raise ConfigError(
            f"Dataset {dataset!r} already holds runs analysed under {old} adjacency "
            f"(--sampling {sampling[old]}); this run uses {new} (--sampling {sampling[new]}), "
            f"and the ledger cannot compose the two soundly. Use --sampling {sampling[old]} for "
            "this dataset, or evaluate a separate dataset."
        )


def refusal_message(status: BudgetStatus, candidate: LedgerEntry, *, race: bool = False) -> str:
    """Why ``candidate`` is not admitted after the dataset's counted runs, and what to do."""
    rule = _Rule(status.composition)
    counted = list(status.counted)
    why = " (a concurrent run committed its reservation first)" if race else ""
    if rule.name([*counted, candidate]) == "rdp":
        after = rule.tight([*counted, candidate], status.budget_delta)
        detail = (
            f"composed tightly with the dataset's {len(counted)} counted run(s) (RDP "
            f"filter at delta {status.budget_delta:.3g}) the spend would be epsilon {after:.6g}"
        )
    else:
        detail = (
            f"basic composition over {len(counted)} counted run(s) would spend epsilon "
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
        f"{status.budget_epsilon:.6g}, delta {status.budget_delta:.3g} ({status.budget_source}; "
        f"spent epsilon {status.spent_epsilon:.6g}, delta {status.spent_delta:.3g}).{charge} "
        f"Nothing was released. Lower --epsilon, or set the budget with `{status.set_command()}` "
        "if your policy allows."
    )

"""Admission messages and the one-relation rule of the privacy ledger (pure).

The ledger's fold and admission rule are :mod:`gpope.core.accounting.budget`; this module says
why a run is refused and what to do (the command that sets the budget, the budget and spend in
force), and refuses a run whose neighbouring relation differs from the dataset's runs.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpope.core.accounting.budget import BudgetStatus, LedgerEntry, _Rule
from gpope.core.accounting.relations import stored_relation
from gpope.errors import ConfigError

__all__ = ["check_one_relation", "refusal_message"]


def check_one_relation(dataset: str, counted: Iterable[LedgerEntry], mechanism: str) -> None:
    """Refuse a run whose neighbouring relation differs from the dataset's counted runs.

    A dataset's guarantee is stated under one neighbouring relation. Neither the Rényi filter
    nor basic composition covers adding an add/remove epsilon (Poisson runs) to a replace-one
    epsilon (uniform runs): by group privacy an add/remove (eps, delta) run is only
    (2 eps, (1 + e^eps) delta) under replace-one, and splitting one budget adaptively between two
    interleaved filters is not a theorem we can cite (see :mod:`.composition`). A dataset's runs
    share the relation of its first counted run.

    Raises:
        ConfigError: the new run's relation differs from the one the dataset already uses.
    """
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

"""Column comments of the privacy_ledger table and the budget_status view: plain data, no imports.

Shared by the table contract (:mod:`gpope.shell.schemas`, which imports pyspark) and the JVM-free
ledger store (:mod:`gpope.shell.pipeline.ledger_store`, which must not), so neither imports the
other.
"""

from __future__ import annotations

__all__ = ["BUDGET_STATUS_COMMENTS", "BUDGET_STATUS_TYPES", "LEDGER_COMMENTS"]

LEDGER_COMMENTS: dict[str, str] = {
    "dataset": "dataset (cohort) name the row belongs to",
    "run_id": "the run (evaluate run id), or budget-<id> for a budget row",
    "mechanism": "the run's dp-accounting event and neighbouring relation as JSON "
    "(format dp_accounting/1); 'budget' on budget rows",
    "epsilon": "kind=budget: the dataset's TOTAL budget epsilon; kind=reservation/settlement: the "
    "epsilon the run claimed. Never sum this column; sum charged_epsilon",
    "delta": "like epsilon, for delta",
    "accountant": "accountant that calibrated the run (rdp, pld, paper: NOT a valid bound); '-' "
    "on budget rows",
    "status": "budget | origin | reserved | released | failed | cancelled (a run's latest status "
    "wins)",
    "created_at": "when the row was appended (UTC)",
    "kind": "budget (sets the total budget) | reservation (charges a run before it draws noise) "
    "| settlement (a later status of a reserved run) | origin (who produced the dataset's raw "
    "tables, e.g. gpope simulate; epsilon 0)",
    "charged_epsilon": "epsilon this row adds to the dataset's basic spend: the run's charge on "
    "its reservation (a rigorous RDP bound for paper runs), minus it on a cancellation, 0 otherwise",
    "charged_delta": "delta this row adds to the dataset's basic spend (as charged_epsilon)",
    "valid_bound": "false when the run's accountant is not a valid bound (paper): its claimed "
    "epsilon is not a guarantee",
    "actor": "who wrote the row (user@host)",
    "process": "host:pid of the process holding a reservation (to settle it if it was killed)",
    "note": "free text: budget changes (--force), reconciliation evidence, invalid accounting",
}

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

BUDGET_STATUS_TYPES: dict[str, str] = {
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

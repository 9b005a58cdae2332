"""The evaluate stage: one differentially private evaluation of one spec on one dataset.

:func:`~gpope.shell.evaluate.run.run_evaluate` goes through:

* **inputs and the plan** (:mod:`~gpope.shell.evaluate.inputs`, :mod:`gpope.core.evaluation.plan`):
  public inputs only (m from one pinned version, the public clip bound), then the
  :class:`~gpope.core.evaluation.plan.ReleasePlan`. Nothing else is computed from private tables.
* **the ledger** (:mod:`gpope.shell.pipeline.ledger`): the plan's charge is reserved before
  anything is drawn; after the reservation a failure is marked ``failed`` and stays counted.
* **the estimate** (:mod:`~gpope.shell.evaluate.execute`, :mod:`~gpope.shell.evaluate.intervals`,
  :mod:`~gpope.shell.evaluate.policy_value`): the noisy releases at the plan's multipliers, from
  OS entropy or ``seed`` (then NOT private; never persisted).
* **the release** (:mod:`~gpope.shell.pipeline.release`): released_estimates and released_values
  in one atomic step, then the reservation is marked released.
* **the report** (:mod:`~gpope.shell.evaluate.report`, :mod:`~gpope.shell.evaluate.record`): one
  MLflow run and the command's report; an error after the release commit never undoes it and
  says not to re-run (:mod:`~gpope.shell.pipeline.after_release`).
"""


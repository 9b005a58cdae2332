"""The evaluate stage: one differentially private evaluation of one spec on one dataset.

:func:`~gpope.shell.evaluate.run.run_evaluate` executes a release plan and records it; each
concept has its own module (the plan's auxiliary releases execute themselves, each with its
:class:`~gpope.core.estimators.execution.ReleaseExecution`: :mod:`~gpope.shell.evaluate.intervals`,
:mod:`~gpope.shell.evaluate.policy_value`):

* **settings** (:mod:`gpope.core.evaluation.settings`): one settings type, its constraints, the
  layers command line > the spec's ``evaluation:`` block > the configuration, one resolver.
* **public inputs and the plan** (:mod:`~gpope.shell.evaluate.inputs`,
  :mod:`gpope.core.evaluation.plan`): m from one pinned version of the statistics (public by
  definition, docs/ARCHITECTURE.md 4), the public clip bound, the layout decided from m and n,
  then the :class:`~gpope.core.evaluation.plan.ReleasePlan`: sigmas, the composed dp-accounting
  event, the neighbouring relation, the charge. Nothing else is computed from the private tables.
* **the ledger** (:mod:`gpope.shell.pipeline.ledger`): the plan's event and charge are reserved
  before anything is drawn; a run past the dataset's budget stops having written nothing. If
  anything fails after the reservation, it is marked ``failed`` and stays counted (noise may have
  been drawn: privacy spent is spent); no partial release is written.
* **the estimate** (:mod:`~gpope.shell.evaluate.execute`,
  :mod:`~gpope.shell.evaluate.intervals`): the noisy releases at the plan's multipliers,
  from OS entropy or from ``seed`` (then the run is marked NOT private; the seed is never
  persisted); the sample plan is never logged or written.
* **the release** (:mod:`~gpope.shell.pipeline.release`): released_estimates and released_values
  in one atomic step, then the reservation is marked released.
* **the report** (:mod:`~gpope.shell.evaluate.report`,
  :mod:`~gpope.shell.evaluate.record`): one MLflow run after the release (tracking
  problems never undo a release; MSPBE only on PUBLIC evaluation data, private diagnostics only
  tagged ``diagnostic.private=true``) and the command's report. Any error after the release
  commit (the ledger mark, the record, the guard, MLflow, the report) returns a report of the
  released values with one WARNING saying the release stands, not to re-run, and how to log it
  (:mod:`~gpope.shell.pipeline.after_release`).
"""


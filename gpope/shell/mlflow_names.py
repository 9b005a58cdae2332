"""The names of gpope's MLflow tags and metrics, in one place (as MLflow's own ``mlflow_tags``).

Tracking code writes these names and tests and dashboards read them; a name changes here or
nowhere. The core holds no tag names: it returns verdicts and values, the shell names them.
"""

from __future__ import annotations

__all__ = ["COMPARED_RUN_A", "COMPARED_RUN_B", "DATASET", "DIAGNOSTICS_EXPERIMENT_SUFFIX",
           "ESTIMATOR", "GUARD", "INTERVAL_NOTE", "METRIC_MSPBE_PRIVATE", "METRIC_PUBLIC_MSPBE",
           "METRIC_RELATIVE_MSPBE_PRIVATE", "METRIC_RELATIVE_MSPBE_PUBLIC",
           "METRIC_RESERVED_EPSILON", "METRIC_SPENT_DELTA", "METRIC_SPENT_EPSILON",
           "METRIC_SSP_CLIP_QUANTILE_USED", "METRIC_SSP_CLIP_USED", "OUTSIDE_TUNED",
           "PRIVACY_NOTE", "PRIVATE", "PRIVATE_DIAGNOSTIC", "RELEASED_RUN", "RUN_ID", "SEEDED",
           "SPEC", "SPEC_ID", "SSP_CLIP_SOURCE", "STAGE", "STALE_STATS", "UNBOUNDED", "VALID_BOUND"]

# ---- tags of an evaluation run
#: gpope run id (released_estimates.run_id, privacy_ledger.run_id).
RUN_ID = "gpope.run_id"
#: the pipeline stage that made the MLflow run ("evaluate", "evaluate.private_diagnostics").
STAGE = "gpope.stage"
DATASET = "gpope.dataset"
SPEC = "gpope.spec"
SPEC_ID = "gpope.spec_id"
ESTIMATOR = "gpope.estimator"
#: "true" when the release is private (no seed, a valid accountant).
PRIVATE = "gpope.private"
SEEDED = "gpope.seeded"
PRIVACY_NOTE = "gpope.privacy_note"
#: "false" for an accountant that is not a valid bound ('paper').
VALID_BOUND = "gpope.valid_bound"
#: the loud guard's verdict on the released theta (:mod:`gpope.core.guard`).
GUARD = "gpope.utility_guard"
#: why some released interval is unbounded (one line; absent when all are finite).
INTERVAL_NOTE = "gpope.interval_note"
#: "true" when the run's (m, epsilon, episode cap) lie outside what the spec's block was tuned for.
OUTSIDE_TUNED = "gpope.outside_tuned_range"
#: the states with an unbounded interval end; ``<UNBOUNDED>.<state>`` lists which ends.
UNBOUNDED = "gpope.unbounded"
#: where the clip of the run's noisy-statistics release came from: "private" (a DP quantile
#: release charged to this run) or "public" (a setting or a quantile on public simulated data).
SSP_CLIP_SOURCE = "gpope.ssp_clip_source"
#: "true" when the run released from statistics older than the latest ingest
#: (``--allow-stale-stats``); the run's warning says which versions.
STALE_STATS = "gpope.stale_stats"
#: marks a run or value computed from private data without noise (operators only).
PRIVATE_DIAGNOSTIC = "diagnostic.private"
#: on a private-diagnostics run: the MLflow run id of the released run it belongs to.
RELEASED_RUN = "gpope.released_run_id"
#: on a ``gpope compare --track`` run (stage ``compare``): the two compared gpope run ids.
COMPARED_RUN_A = "gpope.compare.run_a"
COMPARED_RUN_B = "gpope.compare.run_b"
#: the suffix of the experiment that holds private diagnostics (``<experiment>/private-diagnostics``).
DIAGNOSTICS_EXPERIMENT_SUFFIX = "/private-diagnostics"

# ---- metrics of an evaluation run
METRIC_SPENT_EPSILON = "spent_epsilon"
METRIC_SPENT_DELTA = "spent_delta"
METRIC_RESERVED_EPSILON = "reserved_epsilon"
#: MSPBE of the traced iterates on the PUBLIC cohort, per step.
METRIC_PUBLIC_MSPBE = "public_mspbe"
METRIC_RELATIVE_MSPBE_PUBLIC = "relative_mspbe_public"
#: MSPBE of the released theta from the run's noisy (released) statistics: post-processing.
METRIC_MSPBE_PRIVATE = "mspbe_private"
METRIC_RELATIVE_MSPBE_PRIVATE = "relative_mspbe_private"
#: The clip bound the run's noisy-statistics release used (the ``ssp_clip_quantile`` param is the
#: setting). With ``SSP_CLIP_SOURCE`` "private" it is a DP release charged to the run, logged as
#: its post-processing; otherwise a public number.
METRIC_SSP_CLIP_USED = "ssp_clip_used"
#: The quantile a privately released clip was read at (absent for a public clip).
METRIC_SSP_CLIP_QUANTILE_USED = "ssp_clip_quantile_used"

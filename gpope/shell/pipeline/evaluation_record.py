"""What one evaluation hands to tracking: the record of a release, built after it was committed.

The evaluate stage (:mod:`gpope.shell.pipeline.evaluate`) builds an :class:`EvaluationRecord`
once the release is committed; MLflow tracking (:mod:`gpope.shell.pipeline.evaluate_mlflow`)
reads only this record. Tracking depends on the record, never on the stage, so the stage can be
run, tested and changed without MLflow, and the import graph has no cycle.

Everything in the record is public or released (docs/ARCHITECTURE.md 4), except ``private_population``,
which tracking logs only to the separate experiment ``<experiment>/private-diagnostics``, tagged
``diagnostic.private=true``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from gpope.core.envs.cohort import PublicCohort
    from gpope.core.intervals import Interval
    from gpope.core.spec import EvaluationSpec

__all__ = ["EvaluationRecord", "StatisticsInput"]


@dataclass(frozen=True)
class StatisticsInput:
    """The statistics table a run read (MLflow dataset lineage).

    Attributes:
        table: the logical table, e.g. ``gold/cohort1/trajectory_stats``.
        location: its path, or its Unity Catalog name when ``by_name``.
        version: the Delta version read (None when unknown).
        spec_id: the partition the run used.
        by_name: True for a Unity Catalog table name, False for a path.
    """

    table: str
    location: str
    version: int | None
    spec_id: str
    by_name: bool = False


@dataclass(frozen=True, kw_only=True)
class EvaluationRecord:
    """Everything one released evaluation reports to tracking.

    Attributes:
        run_id: gpope run id (released_estimates.run_id, privacy_ledger.run_id).
        dataset: dataset evaluated.
        spec: the evaluation spec.
        estimator: ``gpope`` (or another estimator name).
        params: public settings under the names of their CLI flags (``-`` read as ``_``) plus
            every setting that affects the result; never a seed.
        epsilon, delta: the run's charged spend (``--epsilon``, ``--delta``).
        epsilon_certified: epsilon the accountant certifies at ``delta`` for the noise drawn.
        accountant: the accountant used.
        sigma: the noise multiplier.
        m: number of trajectories (public).
        private: False for seeded (reproducible) or otherwise not-private runs.
        seeded: whether a fixed seed was used (the seed itself is never recorded).
        privacy_note: one-line statement of the run's privacy.
        theta: the released weights.
        values: released values at the spec's reference states, in ``spec.reference_names`` order.
        theta_final: the last iterate (released too: same noise), or None.
        trace_steps, trace_theta: released iterates at traced steps, or None.
        intervals: the released intervals at the reference states (in ``spec.reference_names``
            order), or None.
        ci_level: the intervals' confidence level.
        statistics: the statistics table read.
        public_cohort: the public cohort of public MSPBE, or None (no simulator).
        truth: true values at the reference states from the public simulator, or None.
        private_population: population (A, b, C) of the PRIVATE statistics, only when the
            operator asked for private diagnostics; logged only in the separate diagnostics experiment.
        spec_text: the spec file's text, or None.
        config: the resolved configuration (plain mapping).
        tags: further tags for the run (e.g. a guard verdict).
        metrics: further released metrics (e.g. private MSPBE from noisy statistics).
        tuning: summary of a ``--tune private`` run (DP outputs of the tuning), or None.
    """

    run_id: str
    dataset: str
    spec: EvaluationSpec
    estimator: str = "gpope"
    params: Mapping[str, Any]
    epsilon: float
    delta: float
    epsilon_certified: float
    accountant: str
    sigma: float
    m: int
    private: bool
    seeded: bool
    privacy_note: str
    theta: np.ndarray
    values: np.ndarray
    theta_final: np.ndarray | None = None
    trace_steps: np.ndarray | None = None
    trace_theta: np.ndarray | None = None
    intervals: Interval | None = None
    ci_level: float | None = None
    statistics: StatisticsInput | None = None
    public_cohort: PublicCohort | None = None
    truth: Mapping[str, float] | None = None
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    spec_text: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tuning: Mapping[str, Any] | None = None

    def state_intervals(self) -> dict[str, tuple[float, float, float]]:
        """Per reference state name, ``(lower, upper, lower_bound)`` of its released interval
        (empty without intervals)."""
        if self.intervals is None:
            return {}
        iv = self.intervals
        return {name: (float(iv.lower[i]), float(iv.upper[i]), float(iv.lower_bound[i]))
                for i, name in enumerate(self.spec.reference_names)}

    @property
    def reference_values(self) -> dict[str, float]:
        """Released value per reference state name."""
        return {k: float(v) for k, v in zip(self.spec.reference_names, self.values, strict=True)}

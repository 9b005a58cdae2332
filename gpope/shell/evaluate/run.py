"""The evaluate stage's flow (:func:`run_evaluate`): prepare, reserve, execute, release, record
and report one run (the package docstring, :mod:`gpope.shell.evaluate`, says what each step
guarantees)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gpope.shell.evaluate.report import (
    EvaluationReport,
    InterruptedAfterRelease,
    interrupted_after_release,
    values_line,
)
from gpope.shell.pipeline.after_release import (
    failed_before_release,
    interrupted_before_release,
    interrupted_note,
    unreported_release,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.estimators import Estimate
    from gpope.core.evaluation.settings import SettingsLayer
    from gpope.core.spec import EvaluationSpec

__all__ = ["run_evaluate"]


def run_evaluate(
    spark: SparkSession, config: GpopeConfig, *, dataset: str, spec: EvaluationSpec,
    options: SettingsLayer, tracking_uri: str | None = None, spec_text: str | None = None,
    truth: Mapping[str, float] | None = None,
) -> EvaluationReport:
    """One private evaluation of ``spec`` on ``dataset`` (the package docstring). ``options``:
    the caller's settings over the spec's block and the configuration; ``truth``: the public
    simulator's true values (simulated data only). A refusal (budget, statistics, settings)
    writes nothing."""
    from gpope.shell import faults
    from gpope.shell.evaluate.execute import estimate
    from gpope.shell.evaluate.inputs import prepare_run
    from gpope.shell.evaluate.report import privacy_label
    from gpope.shell.evaluate.report import track_and_report as report
    from gpope.shell.pipeline.ledger import Charge, PrivacyLedger
    from gpope.shell.pipeline.propensities import statistics_spec
    from gpope.shell.pipeline.release import policy_label, release_row, value_rows, write_release
    from gpope.shell.pipeline.stats import read_statistics

    start = time.perf_counter()
    spec = statistics_spec(spark, config, dataset, spec)  # no propensities: the pair fit's
    prepared = prepare_run(spark, config, dataset=dataset, spec=spec, flags=options)
    plan, settings = prepared.plan, prepared.settings
    stats_df = read_statistics(spark, config, dataset=dataset, spec_id=spec.spec_id,
                               version=prepared.stats_version)
    for component in plan.auxiliary:  # before anything is reserved
        component.check(stats_df)

    ledger = PrivacyLedger(spark, config)
    run_id = uuid.uuid4().hex
    ledger.reserve(Charge.of_plan(plan, dataset=dataset, run_id=run_id))
    released = False
    est = None
    label = privacy_label(private=False, accountant=plan.accountant, seeded=prepared.seeded)
    try:
        faults.point("evaluate.after_reserve")
        est = estimate(spark, config, dataset=dataset, spec=spec, plan=plan, settings=settings,
                       stats_df=stats_df, stats_version=prepared.stats_version,
                       rows=prepared.rows)
        label = privacy_label(private=est.result.private, accountant=plan.accountant,
                              seeded=prepared.seeded)
        row = release_row(
            run_id=run_id, dataset=dataset, spec=spec, policy=policy_label(spec),
            epsilon=plan.epsilon, delta=plan.delta, accountant=plan.accountant,
            created_at=datetime.now(UTC).replace(tzinfo=None), theta=est.theta,
            values=est.values, private=est.result.private, estimator=settings.estimator)
        write_release(spark, config, row, value_rows(row, spec=spec, interval=est.intervals)
                      + [r for c in plan.auxiliary for r in c.rows(row, est, spec_name=spec.name)])
        released = True
        faults.point("evaluate.after_release")
        ledger.mark(dataset, run_id, "released")
    except KeyboardInterrupt as exc:
        ledger.mark(dataset, run_id, "released" if released else "failed",
                    note=None if released else interrupted_note())
        if not released:
            raise interrupted_before_release(run_id, dataset=dataset, epsilon=plan.epsilon,
                                             delta=plan.delta) from exc
        raise interrupted_after_release(
            run_id, dataset=dataset,
            label=f"{label}; epsilon {plan.epsilon:g}, delta {plan.delta:g} charged",
            cut="MLflow logging and the report were skipped",
            values=_values_line(spec, est)) from exc
    except BaseException as exc:
        if not released:
            try:
                ledger.mark(dataset, run_id, "failed")
            except Exception as mark_exc:  # a lake that stopped being writable, say
                raise failed_before_release(exc, run_id, dataset=dataset, epsilon=plan.epsilon,
                                            delta=plan.delta, mark_error=mark_exc) from exc
            told = failed_before_release(exc, run_id, dataset=dataset, epsilon=plan.epsilon,
                                         delta=plan.delta)
            if told is exc:
                raise
            raise told from exc
        if not isinstance(exc, Exception):
            raise
        return unreported_release(ledger, run_id=run_id, dataset=dataset, spec=spec,
                                  prepared=prepared, est=est, label=label, error=exc,
                                  marked=False, start=start)
    try:
        faults.point("evaluate.report")
        return report(
            spark, config, run_id=run_id, dataset=dataset, spec=spec, prepared=prepared, est=est,
            label=label, budget=ledger.status(dataset), ledger_location=ledger.location,
            tracking_uri=tracking_uri, spec_text=spec_text, truth=truth,
            start=start)
    except InterruptedAfterRelease:
        raise
    except KeyboardInterrupt as exc:  # the release and its ledger mark stand
        raise interrupted_after_release(
            run_id, dataset=dataset, label=label,
            cut="the report (MLflow logging, the budget line) was cut short",
            values=_values_line(spec, est)) from exc
    except Exception as exc:  # the release stands: report it and how to log it, never fail
        return unreported_release(ledger, run_id=run_id, dataset=dataset, spec=spec,
                                  prepared=prepared, est=est, label=label, error=exc,
                                  marked=True, start=start)


def _values_line(spec: EvaluationSpec, est: Estimate) -> str:
    """The released values of ``est`` at the spec's reference states, on one line."""
    return values_line(dict(zip(spec.reference_names, est.values, strict=True)))

"""What a run reports when something fails after its release was committed: the
release stands and is charged, so the command reports the released values and run id, says that
tracking did not complete and how to log the run (``gpope track --run-id``), and never fails in
a way that invites a second spend. Everything here is public or released."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.shell.evaluate.report import (
    EvaluationReport,
    InterruptedAfterRelease,
    interrupted_after_release,
    values_line,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpope.core.spec import EvaluationSpec

__all__ = ["INTERRUPTED_NOTE", "after_release_warning", "interrupted_before_release",
           "interrupted_note", "interrupted_report", "printing_failed_line", "show_release",
           "unreported_release"]

#: The ledger note of a run interrupted (Ctrl-C) after its reservation and before its release:
#: its status is ``failed`` like any run that may have drawn noise, and the note says why.
INTERRUPTED_NOTE = ("interrupted (Ctrl-C) before the release, nothing released; still charged: "
                    "it may have drawn noise")


def interrupted_note() -> str:
    """:data:`INTERRUPTED_NOTE`, naming SIGTERM instead when a scheduler's stop was the cause."""
    from gpope.shell import interrupts

    if interrupts.received() == "SIGTERM":
        return INTERRUPTED_NOTE.replace("(Ctrl-C)", "(SIGTERM)")
    return INTERRUPTED_NOTE


def _reason(error: BaseException) -> str:
    """``Type: first line of the message`` (at most 300 characters)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def after_release_warning(run_id: str, *, dataset: str, error: BaseException,
                          marked: bool) -> str:
    """The line a run prints when something failed after its release was committed: the release
    stands and is charged, re-running would spend the budget again, the command that logs it to
    MLflow from the lake, and (``marked`` False) the one that records it in the ledger."""
    ledger = "" if marked else (
        f" The ledger still shows it reserved; `gpope budget reconcile --dataset {dataset}` "
        "records it as released (its release manifest is committed).")
    return (f"WARNING: run {run_id} WAS RELEASED and charged (released_estimates, "
            f"released_values, privacy_ledger), but reporting it failed after the release "
            f"({_reason(error)}), so MLflow tracking did not complete. Do not re-run the "
            f"evaluation (that would spend the budget again); log it to MLflow from the lake "
            f"with: gpope track --run-id {run_id}.{ledger}")


def interrupted_before_release(run_id: str, *, dataset: str, epsilon: float,
                               delta: float) -> KeyboardInterrupt:
    """The Ctrl-C of a run interrupted after its reservation and before its release: nothing was
    released, the reservation stays charged (marked ``failed``: noise may have been drawn), and
    what to run next."""
    return KeyboardInterrupt(
        f"interrupted BEFORE the release: run {run_id} of dataset {dataset} released nothing; "
        f"its reservation (epsilon {epsilon:g}, delta {delta:g}) stays charged in the ledger as "
        f"failed (it may have drawn noise). `gpope budget show --dataset {dataset}` shows what "
        f"is left; run the evaluation again for a release.")


def failed_before_release(error: BaseException, run_id: str, *, dataset: str, epsilon: float,
                          delta: float, mark_error: BaseException | None = None) -> BaseException:
    """The error of a run that failed after its ledger reservation and before its release: what
    the ledger holds (the reservation, charged), that nothing was released, the cause, and the
    one command that settles the run when the ledger could not record the failure itself.

    A :class:`~gpope.errors.GpopeError` keeps its class (callers and exit codes rely on it);
    any other exception is returned unchanged unless ``mark_error`` is set.
    """
    from gpope.errors import CommitError, GpopeError

    cause = _reason(error)
    charged = (f"run {run_id} of dataset {dataset} failed after its privacy reservation: "
               f"epsilon {epsilon:g}, delta {delta:g} stay charged in the ledger (noise may have "
               f"been drawn) and nothing was released")
    if mark_error is not None:
        # the ledger's own error already states the charge and the settle command; say them once
        appended = getattr(mark_error, "append_error", mark_error)
        return CommitError(
            f"{charged}; the ledger could not record the failure either ({_reason(appended)}), "
            f"so the reservation is still open: once the lake is writable, `gpope budget "
            f"reconcile --dataset {dataset}` settles it (still charged). Cause: {cause}")
    if isinstance(error, GpopeError):
        return type(error)(f"{charged} (recorded as failed). Cause: {cause}")
    return error


def printing_failed_line(report: EvaluationReport, error: BaseException) -> str:
    """What ``gpope evaluate`` writes on stderr when printing its report failed: the release, its
    values and where they are kept, and the report's own after-release warning if it has one;
    never an invitation to run again."""
    values = values_line(report.reference_values)
    tracked = (f"MLflow run {report.mlflow_run_id}" if report.mlflow_run_id
               else f"log it to MLflow with: gpope track --run-id {report.run_id}")
    earlier = "".join(f" Before that: {w}" for w in report.warnings if "WAS RELEASED" in w)
    return (f"WARNING: run {report.run_id} of dataset {report.dataset} WAS RELEASED and charged "
            f"({values}), but printing its report failed ({_reason(error)}). Do not re-run the "
            f"evaluation (that would spend the budget again); its rows are in released_estimates "
            f"and released_values (gpope query); {tracked}.{earlier}")


def interrupted_report(report: EvaluationReport, *, cut: str) -> InterruptedAfterRelease:
    """The Ctrl-C of a run whose release is committed (``cut``: what it cut short): the
    release and its charge stand, the message names ``gpope track`` and never a re-run."""
    return interrupted_after_release(report.run_id, dataset=report.dataset, label=report.label,
                                     cut=cut, values=values_line(report.reference_values))


def show_release(report: EvaluationReport, show: Callable[[], None]) -> None:
    """Print a committed release's report with ``show``. The release stands whatever happens
    here, so nothing invites a second spend: a Ctrl-C becomes :func:`interrupted_report` and any
    other failure one stderr line (:func:`printing_failed_line`)."""
    import sys

    from gpope.shell import faults

    try:
        faults.point("evaluate.print")
        show()
    except KeyboardInterrupt as exc:
        raise interrupted_report(report, cut="printing its report was cut short") from exc
    except Exception as exc:
        print(printing_failed_line(report, exc), file=sys.stderr)


def unreported_release(
    ledger: Any, *, run_id: str, dataset: str, spec: EvaluationSpec, prepared: Any, est: Any,
    label: str, error: Exception, marked: bool, start: float,
) -> EvaluationReport:
    """The report of a committed release whose reporting failed afterwards (the ledger mark, the
    MLflow record, the guard, tracking or the report itself raised ``error``): the run id, the
    released theta and values, the public settings, and :func:`after_release_warning` as its
    first warning; no MLflow run. It reads only the plan, the released numbers and (best effort)
    the ledger's remaining budget, so it stands where the full report failed."""
    from gpope.shell.pipeline.release import policy_label

    plan, s = prepared.plan, est.settings
    remaining = (math.nan, math.nan,
                 f"remaining budget: see `gpope budget show --dataset {dataset}`")
    try:
        budget = ledger.status(dataset)
        remaining = (budget.remaining_epsilon, budget.remaining_delta, budget.remaining_line())
    except Exception:  # the ledger is the place to look; the release is reported regardless
        pass
    spent = plan.spent_epsilon
    return EvaluationReport(
        run_id=run_id, mlflow_run_id=None, dataset=dataset, spec_id=spec.spec_id,
        spec_name=spec.name, policy=policy_label(spec), epsilon=plan.epsilon, delta=plan.delta,
        spent_epsilon=spent if math.isfinite(spent) else None, accountant=plan.accountant,
        sigma=plan.sigma, m=prepared.m, n=spec.n_features, iterations=s.iterations,
        sampling=s.sampling, batch_rate=s.batch_rate, private=bool(est.result.private),
        path="memory" if plan.in_memory else "stream",
        theta=np.asarray(est.theta, dtype=np.float64),
        reference_values={k: float(v) for k, v in zip(spec.reference_names, est.values,
                                                      strict=True)},
        public_mspbe=None, remaining_epsilon=remaining[0], remaining_delta=remaining[1],
        seconds=time.perf_counter() - start, estimator=s.estimator, label=label,
        warnings=[after_release_warning(run_id, dataset=dataset, error=error, marked=marked)]
        + [w for w in [prepared.provenance.get("stale_stats")] if w],
        remaining_line=remaining[2])

"""``gpope evaluate --tune private``: the pipeline side of :mod:`gpope.core.tuning.private`.

The run's (epsilon, delta) covers the tuning (the plan calibrates every release from public inputs
before the reservation), so everything the tuning outputs (the chosen setting, every candidate's
score, the noisy-statistics MSPBE) is a DP output, logged as such, never tagged private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpope.core.tuning.private import PrivateTuningResult

__all__ = ["log_tuning", "tuning_summary"]


def tuning_summary(tuned: PrivateTuningResult) -> dict[str, Any]:
    """What the tuning released (DP outputs) and its accounting (public), as plain values."""
    plan = tuned.plan
    return {
        "mode": "private",
        "chosen": int(tuned.chosen),
        "clip": float(tuned.config.clip),
        "step_size": float(tuned.config.step_size),
        "gradient_clip": float(tuned.gradient_clip),
        "statistics_clip": float(tuned.statistics_clip),
        "base_step": float(tuned.base_step),
        "candidates": [{"step_size": c.step_size, "clip": c.clip, "score": c.score}
                       for c in tuned.candidates],
        "relative_mspbe_private": float(tuned.private_relative_mspbe),
        "accountant": plan.accountant,
        "epsilon_spent": float(plan.epsilon_spent),
        "gpope_sigma": float(plan.gpope_sigma),
        "quantile_sigma": float(plan.quantile_sigma),
        "statistics_sigma": float(plan.statistics_sigma),
        "runs": int(plan.candidates),
    }


def log_tuning(summary: dict[str, Any]) -> None:
    """Log the tuning summary to the ACTIVE MLflow run (params, metrics, tuning.json)."""
    import mlflow

    from gpope.shell.tracking import log_json_artifact

    mlflow.log_params({
        "tune": "private",
        "tuned.clip": summary["clip"],
        "tuned.step_size": summary["step_size"],
        "tuned.gradient_clip": summary["gradient_clip"],
        "tuned.statistics_clip": summary["statistics_clip"],
        "tuned.candidates": summary["runs"],
        "tuned.gpope_sigma": summary["gpope_sigma"],
    })
    mlflow.log_metric("tuned.relative_mspbe_private", summary["relative_mspbe_private"])
    for i, c in enumerate(summary["candidates"]):
        mlflow.log_metric("tuned.candidate_score", float(c["score"]), step=i)
    log_json_artifact(summary, "tuning.json")

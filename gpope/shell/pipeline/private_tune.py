"""``gpope evaluate --tune private``: the pipeline side of :mod:`gpope.core.private_tuning`.

The run's whole (epsilon, delta) covers the tuning: :func:`plan_tuned_run` calibrates the noise of
every release from public inputs only (m, N, q, epsilon, delta, the conf's ``private_tuning``
rules) before the ledger reservation, the reservation is the target epsilon and the ledger stores
the plan's composed dp-accounting event. Everything the tuning outputs (the chosen clip and step
size, every candidate's setting and score, the noisy-statistics MSPBE of the released theta) is a
DP output and is logged as such, never tagged private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.config import PrivateTuningConf
    from gpope.core.private_tuning import (
        PrivateTuningPlan,
        PrivateTuningResult,
        PrivateTuningSettings,
    )

__all__ = ["log_tuning", "plan_tuned_run", "tuning_summary"]


def plan_tuned_run(
    conf: PrivateTuningConf,
    *,
    m: int,
    iterations: int,
    batch_rate: float | None,
    epsilon: float,
    delta: float,
    sampling: str,
    accountant: str,
    in_memory: bool,
) -> tuple[PrivateTuningPlan, PrivateTuningSettings]:
    """The accounting plan of a privately tuned run (public inputs only; nothing drawn).

    Raises:
        ConfigError: a setting the private tuning does not support (uniform sampling, the paper
            accountant, statistics too large for driver memory), before any reservation.
    """
    from gpope.core.private_tuning import plan_private_tuning

    if sampling != "poisson" or batch_rate is None:
        raise ConfigError(
            "--tune private needs --sampling poisson (its releases are accounted under "
            f"add/remove-one adjacency with Poisson-sampled GPOPE steps). Got sampling={sampling!r}."
        )
    if accountant == "paper":
        raise ConfigError(
            "--tune private needs a rigorous accountant (--accountant auto, rdp or pld); the "
            "paper's Lemma 1 is not a valid bound and cannot compose the tuning's releases."
        )
    if not in_memory:
        raise ConfigError(
            "--tune private reads every trajectory's statistics on the driver (the quantiles and "
            "the noisy statistics); this data set's statistics exceed "
            "evaluation.in_memory_limit_mb (or --stream stream was given). Raise "
            "in_memory_limit_mb, or tune on a public cohort (gpope tune) instead."
        )
    settings = conf.to_core()
    plan = plan_private_tuning(
        m=m, iterations=iterations, batch_rate=batch_rate, epsilon=epsilon, delta=delta,
        settings=settings, accountant="rdp" if accountant == "rdp" else "pld",
    )
    return plan, settings


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

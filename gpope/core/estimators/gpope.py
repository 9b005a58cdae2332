"""GPOPE (``--estimator gpope``): gradient-perturbed GTD2 on sampled per-trajectory statistics
(:mod:`gpope.core.gpope`), optionally tuned privately (``--tune private``) or run once per
disjoint patient group for its interval (``--interval-groups``). Many subsampled Gaussian steps:
its share of the run is calibrated by basic composition under the sampling's relation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpope.core.estimators.base import AuditRequest, Estimator, PlanContext

__all__ = ["ESTIMATOR", "GPOPE"]

#: The deliberately broken mechanisms ``gpope audit --include-broken`` must detect.
_BROKEN = {
    "noise x0.5": {"noise_scale": 0.5},
    "sigma-for-sigma/2": {"sensitivity": "h"},
    "noise/10": {"noise_scale": 0.1},
    "no-clip": {"clip": False},
}


class GPOPE(Estimator):
    """The GPOPE solver (see the module docstring)."""

    name = "gpope"
    description = "gradient-perturbed GTD2 (the default of a tuned spec)"
    one_shot = False
    uses_solver = True
    interval_groups = True
    statistics_share_helps = True
    execution = "gpope.shell.evaluate.execute:execute_gpope"

    def secure_noise_ok(self, sampling: str) -> bool:
        # the without-replacement RDP bound holds for any base mechanism; Poisson's does not
        return sampling == "uniform"

    def check_plan(self, inputs: Any, context: PlanContext) -> None:
        return None

    def plan(self, inputs: Any, context: PlanContext, *, share: float | None = None,
             epsilon: float | None = None, delta: float | None = None
             ) -> tuple[Any, dict[str, Any]]:
        """GPOPE at (epsilon, delta); K disjoint groups cost one run (parallel composition): the
        same event."""
        from gpope.core.accounting import calibrate_sigma, epsilon_spent, gpope_dp_event
        from gpope.core.evaluation.components import ESTIMATE, ReleaseComponent

        s = inputs.settings
        if s.tune == "private":
            return _plan_tuned(inputs, epsilon, delta, context)
        common = dict(m=inputs.m, iterations=s.iterations, delta=delta, accountant=s.accountant,
                      sampling=s.sampling, batch_rate=s.batch_rate)
        sigma = float(calibrate_sigma(epsilon=epsilon, **common))
        spent = float(epsilon_spent(sigma=sigma, **common))
        event = gpope_dp_event(m=inputs.m, iterations=s.iterations, sigma=sigma,
                               sampling=s.sampling, batch_rate=s.batch_rate)
        groups = context.groups
        split = f", interval_groups={groups}" if groups else ""
        return ReleaseComponent(
            name="gpope", epsilon=epsilon, delta=delta, sigma=sigma, event=event,
            epsilon_spent=spent, label=f"gpope(clip={s.clip:g}{split})",
            releases=(*ESTIMATE, "intervals") if groups else ESTIMATE), {}

    def interval_method(self, settings: Mapping[str, Any]) -> str:
        k = settings.get("interval_groups") or 0
        return (f"Student-t of {k} runs on disjoint patient groups" if k
                else "hull of the noisy-statistics interval and the value")

    def audit(self, request: AuditRequest) -> list[tuple[str, Any]]:
        from gpope.core.audit.gpope import AuditConfig, run_audit

        out = []
        for sampling in request.samplings:
            cfg = AuditConfig.preset(sampling, quick=request.quick, delta=request.delta,
                                     statistic=request.statistic, **request.overrides)
            variants = [("real", None)] + (list(_BROKEN.items()) if request.include_broken
                                           else [])
            out.extend((name, run_audit(cfg, request.seed, _mechanism_override=override))
                       for name, override in variants)
        return out


def _plan_tuned(inputs: Any, epsilon: float, delta: float, context: PlanContext
                ) -> tuple[Any, dict[str, Any]]:
    """``--tune private``: the estimator's share covers the tuning's releases and its K runs
    (one composed event, :mod:`gpope.core.tuning.private`)."""
    from gpope.core.accounting.registry import not_a_valid_bound, resolve_accountant
    from gpope.core.evaluation.components import ESTIMATE, ReleaseComponent
    from gpope.core.tuning.private import plan_private_tuning
    from gpope.errors import ConfigError

    s = inputs.settings
    if context.private_tuning is None:
        raise ConfigError("--tune private needs its settings (evaluation.private_tuning).")
    if s.sampling != "poisson" or s.batch_rate is None:
        raise ConfigError(
            "--tune private needs --sampling poisson (its releases are accounted under "
            f"add/remove-one adjacency with Poisson-sampled GPOPE steps). Got sampling={s.sampling!r}."
        )
    if not_a_valid_bound(s.accountant):
        raise ConfigError(
            "--tune private needs a rigorous accountant (--accountant auto, rdp or pld); "
            f"{s.accountant!r} is not a valid bound and cannot compose the tuning's releases."
        )
    if context.layout == "stream":
        raise ConfigError(
            "--tune private reads every trajectory's statistics on the driver (the quantiles and "
            "the noisy statistics); at this m and feature count the statistics exceed "
            "evaluation.in_memory_limit_mb (or --stream stream was given). Raise "
            "in_memory_limit_mb, or tune on a public cohort (gpope tune) instead."
        )
    plan = plan_private_tuning(
        m=inputs.m, iterations=s.iterations, batch_rate=s.batch_rate, epsilon=epsilon,
        delta=delta, settings=context.private_tuning,
        accountant=resolve_accountant(s.accountant, "poisson"))
    return ReleaseComponent(
        name="gpope-tuned", epsilon=epsilon, delta=delta, sigma=float(plan.gpope_sigma),
        event=plan.dp_event, epsilon_spent=float(plan.epsilon_spent),
        label=f"gpope-tuned(private, {plan.candidates} runs)",
        releases=(*ESTIMATE, "tuning")), {"accountant": plan.accountant,
                                          "tuning": (plan, context.private_tuning)}


ESTIMATOR = GPOPE()

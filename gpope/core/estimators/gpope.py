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
    execution = "gpope.shell.pipeline.evaluate_solve:execute_gpope"

    def secure_noise_ok(self, sampling: str) -> bool:
        # the without-replacement RDP bound holds for any base mechanism; Poisson's does not
        return sampling == "uniform"

    def check_plan(self, inputs: Any, context: PlanContext) -> None:
        return None

    def plan(self, inputs: Any, context: PlanContext, *, share: float | None = None,
             epsilon: float | None = None, delta: float | None = None
             ) -> tuple[Any, dict[str, Any]]:
        from gpope.core.evaluation.components import plan_gpope, plan_tuned
        from gpope.errors import ConfigError

        if inputs.settings.tune != "private":
            return plan_gpope(inputs, epsilon, delta, context.groups), {}
        if context.private_tuning is None:
            raise ConfigError("--tune private needs its settings (evaluation.private_tuning).")
        main, tuning = plan_tuned(inputs, epsilon, delta, context.private_tuning,
                                  in_memory=context.layout != "stream")
        return main, {"accountant": tuning.accountant,
                      "tuning": (tuning, context.private_tuning)}

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


ESTIMATOR = GPOPE()

"""SSP (``--estimator ssp``): one-shot private LSTD on noisy sufficient statistics. Each
trajectory's [A_i, b_i, C_i] is clipped jointly, summed, noised once (AdaSSP-style,
:mod:`gpope.core.ssp`) and solved; its release IS the noisy statistics, so its intervals are the
parametric bootstrap of them. Without a public clip (no simulator) it releases its clip
privately first (the plan's ``ssp_clip`` component)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpope.core.estimators.base import AuditRequest, Estimator, PlanContext

__all__ = ["ESTIMATOR", "SSP"]


def _broken(relation: str) -> list[tuple[str, dict[str, object]]]:
    """Broken SSP releases: under add/remove sigma-for-sigma/2 IS noise x0.5 (one variant)."""
    out: list[tuple[str, dict[str, object]]] = [("noise x0.5", {"_noise_scale": 0.5})]
    if relation == "replace_one":
        out.append(("sigma-for-sigma/2", {"_sensitivity_trap": True}))
    return [*out, ("noise/10", {"_noise_scale": 0.1})]


class SSP(Estimator):
    """The one-shot SSP release (see the module docstring)."""

    name = "ssp"
    description = ("one-shot private LSTD on noisy sufficient statistics (all of the budget on "
                   "one Gaussian release)")
    main_is_statistics = True
    private_clip_fallback = True
    execution = "gpope.shell.pipeline.evaluate_solve:execute_ssp"

    def check_plan(self, inputs: Any, context: PlanContext) -> None:
        super().check_plan(inputs, context)
        if inputs.statistics_clip is None and context.private_clip_quantile is None:
            from gpope.errors import ConfigError

            raise ConfigError("An ssp run needs the public clip bound of its statistics "
                              "release, or the quantile to release it privately.")

    def extra_components(self, inputs: Any, context: PlanContext) -> list[tuple[str, float, Any]]:
        if inputs.statistics_clip is not None:
            return []
        from gpope.core.evaluation.components import plan_ssp_clip
        from gpope.core.untuned.settings import UntunedSettings

        quantile = context.private_clip_quantile
        return [("ssp_clip", (context.untuned or UntunedSettings()).quantile_share,
                 lambda i, sh: plan_ssp_clip(i, sh, quantile=quantile))]

    def plan(self, inputs: Any, context: PlanContext, *, share: float | None = None,
             epsilon: float | None = None, delta: float | None = None
             ) -> tuple[Any, dict[str, Any]]:
        from gpope.core.evaluation.components import plan_ssp

        return plan_ssp(inputs, share), {}

    def interval_method(self, settings: Mapping[str, Any]) -> str:
        quantile = (f"; statistics clip: {settings['ssp_clip_from']}"
                    if settings.get("ssp_clip_from") else "")
        return "parametric bootstrap of the noisy statistics" + quantile

    def audit(self, request: AuditRequest) -> list[tuple[str, Any]]:
        from gpope.core.audit.ssp import SSPAuditConfig, run_ssp_audit

        kw = request.canary_overrides()
        if request.quick and "runs" not in kw:
            kw["runs"] = SSPAuditConfig().runs // 2
        out = []
        for relation in ("add_or_remove_one", "replace_one"):
            cfg = SSPAuditConfig(delta=request.delta, relation=relation, **kw)
            variants = [("real", {})] + (_broken(relation) if request.include_broken else [])
            out.extend((name, run_ssp_audit(cfg, request.seed, **v)) for name, v in variants)
        return out


ESTIMATOR = SSP()

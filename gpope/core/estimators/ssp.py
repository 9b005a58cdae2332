"""SSP (``--estimator ssp``): one-shot private LSTD on noisy sufficient statistics (each
trajectory's [A_i, b_i, C_i] clipped jointly, summed, noised once, :mod:`gpope.core.ssp`); its
intervals are the parametric bootstrap of that release. Without a public clip it releases its
clip privately first (the ``ssp_clip`` component)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpope.core.estimators.base import AuditRequest, Estimator, PlanContext
from gpope.core.estimators.execution import ReleaseExecution, RunSource

__all__ = ["CLIP", "ESTIMATOR", "SSP", "private_clip"]


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
    execution = "gpope.shell.evaluate.execute:execute_ssp"

    def check_plan(self, inputs: Any, context: PlanContext) -> None:
        super().check_plan(inputs, context)
        if inputs.statistics_clip is None and context.private_clip_quantile is None:
            from gpope.errors import ConfigError

            raise ConfigError("An ssp run needs the public clip bound of its statistics "
                              "release, or the quantile to release it privately.")

    def extra_components(self, inputs: Any, context: PlanContext) -> list[tuple[str, float, Any]]:
        if inputs.statistics_clip is not None:
            return []
        from gpope.core.untuned.settings import UntunedSettings

        quantile = context.private_clip_quantile
        return [("ssp_clip", (context.untuned or UntunedSettings()).quantile_share,
                 lambda i, sh: _plan_clip(i, sh, quantile=quantile))]

    def plan(self, inputs: Any, context: PlanContext, *, share: float | None = None,
             epsilon: float | None = None, delta: float | None = None
             ) -> tuple[Any, dict[str, Any]]:
        """The one-shot SSP release: the share left by the other components, on the noisy
        statistics."""
        from gpope.core.evaluation.components import ESTIMATE, ReleaseComponent, gaussian_share
        from gpope.core.ssp import ssp_release_event

        s = inputs.settings
        cal = gaussian_share(inputs, share)
        clip = ("clip=private quantile" if inputs.statistics_clip is None
                else f"clip={inputs.statistics_clip:g}")
        return ReleaseComponent(
            name="ssp", **cal, event=ssp_release_event(cal["sigma"], s.moments_share),
            label=f"ssp({clip}, moments_share={s.moments_share:g})",
            releases=(*ESTIMATE, "intervals", "private_mspbe")), {}

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


def _plan_clip(inputs: Any, share: float, *, quantile: float) -> Any:
    """The private clip of an ssp run without a public one: one noisy histogram of the
    statistics norms (sensitivity 1 under add/remove-one) at ``share`` of the run, read at its
    upper ``quantile`` (post-processing)."""
    from gpope.core.evaluation.components import ReleaseComponent, gaussian_share
    from gpope.core.mechanisms.quantile import quantile_dp_event

    cal = gaussian_share(inputs, share)
    return ReleaseComponent(
        name="ssp_clip", **cal, event=quantile_dp_event(cal["sigma"]),
        label=f"ssp clip(private {quantile:g} quantile of the statistics norms)",
        releases=("ssp_clip",), execution="gpope.core.estimators.ssp:CLIP")


class _PrivateClip(ReleaseExecution):
    """The ``ssp_clip`` release, before the noisy statistics that use it."""

    def prepare(self, component: Any, run: RunSource, *, plan: Any, settings: Any,
                spec: Any) -> RunSource:
        return dataclasses.replace(run, clip=private_clip(
            run.base, spec, sigma=float(component.sigma), m=plan.m,
            quantile=float(plan.private_clip_quantile), seed=settings.seed,
            settings=settings.untuned, secure_noise=settings.secure_noise))


def private_clip(source: Any, spec: Any, *, sigma: float, m: int, quantile: float,
                 seed: int | None, settings: Any = None, secure_noise: bool = False) -> float:
    """The clip of an ssp run whose spec gives no public one, released privately: one noisy
    histogram of ``||[A_i, b_i, C_i]||`` on the default's public log grid at multiplier
    ``sigma``, read at ``quantile``. Noise from OS entropy unless ``seed`` (NOT private), or the
    discrete Gaussian under ``secure_noise``."""
    import numpy as np

    from gpope.core.untuned.release import UntunedSettings, _private_quantile, quantile_grid

    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x535350])
    return _private_quantile(source.aggregate, quantile_grid(spec, settings or UntunedSettings()),
                             lambda rows: rows, quantile, m=m, sigma=sigma,
                             rng=np.random.default_rng(ss), secure_noise=secure_noise)


CLIP = _PrivateClip()
ESTIMATOR = SSP()

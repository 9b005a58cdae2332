"""The tuning-free default (``untuned``): what a spec without an ``evaluation:`` block gets when
nobody chose an estimator or a solver setting. Clip and residual clip by private quantiles, one
refined SSP release (:mod:`gpope.core.untuned.release`), every data-dependent choice inside the
run's budget; on data without logged propensities (a tabular state map) it first estimates the
behaviour policy privately. Its public rules are the configuration's ``evaluation.untuned``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpope.core.estimators.base import AuditRequest, Estimator, PlanContext
from gpope.core.estimators.execution import ReleaseExecution, RunSource

__all__ = ["BEHAVIOUR", "BEHAVIOUR_NOTE", "ESTIMATOR", "EXPLICIT_CHOICES", "SECURE_NOISE_UNTUNED",
           "UNTUNED_NOTE", "Untuned", "run_untuned", "untuned_result"]

#: Settings whose explicit choice means "not the default".
EXPLICIT_CHOICES = ("estimator", "clip", "step_size", "tune", "ssp_clip", "interval_groups")

#: The one line evaluate prints about the default (no Python warning, no file path).
UNTUNED_NOTE = (
    "NOTE: spec {name!r} has no evaluation: block, so the tuning-free private default was used "
    "(clip and residual clip by private quantiles, one refined SSP release; docs/OWN_DATA.md)."
)

#: The line of a run whose extract logged no propensities and whose behaviour was estimated.
BEHAVIOUR_NOTE = (
    "NOTE: the treatments carry no propensity column, so the behaviour policy was estimated "
    "privately (noisy counts per state and action, {share} of this run's privacy loss, in its "
    "ledger event) and the values weight by pi / mu^; the intervals are conditional on that "
    "estimate (docs/OWN_DATA.md, \"Without logged propensities\")."
)

#: Why ``--secure-noise`` is refused where the default applies.
SECURE_NOISE_UNTUNED = (
    "--secure-noise is not available for the tuning-free default (spec {name!r} has no "
    "evaluation: block): its histograms, statistics and residual releases draw continuous "
    "Gaussian noise and are accounted for it. Run --estimator ssp --accountant rdp --secure-noise "
    "(its clip is then released privately with discrete Gaussian noise), or drop --secure-noise."
)


class Untuned(Estimator):
    """The tuning-free default (see the module docstring)."""

    name = "untuned"
    description = "the tuning-free private default of a spec without an evaluation: block"
    command_line = False
    main_is_statistics = True
    public_clip = False
    own_clip_rule = True
    estimates_behaviour = True
    direct_method = True
    execution = "gpope.shell.evaluate.execute:execute_untuned"

    def claims(self, spec_has_block: bool, sources: Mapping[str, str]) -> bool:
        # nobody tuned the spec and nothing was chosen
        return not spec_has_block and not any(sources.get(k) == "options"
                                              for k in EXPLICIT_CHOICES)

    def check(self, spec: Any, settings: Any) -> None:
        if getattr(settings, "secure_noise", False):
            from gpope.errors import ConfigError

            raise ConfigError(SECURE_NOISE_UNTUNED.format(name=spec.name))

    def check_plan(self, inputs: Any, context: PlanContext) -> None:
        return None  # its own rules: the settings' tune is not read

    def plan(self, inputs: Any, context: PlanContext, *, share: float | None = None,
             epsilon: float | None = None, delta: float | None = None
             ) -> tuple[Any, dict[str, Any]]:
        """Its releases at ``share`` of the run's privacy loss (joint calibration,
        :func:`gpope.core.untuned.release.plan_untuned_component`)."""
        import math

        from gpope.core.evaluation.components import ReleaseComponent
        from gpope.core.untuned.release import UntunedSettings, plan_untuned_component

        s = inputs.settings
        fields, sigmas = plan_untuned_component(
            m=inputs.m, sigma=float(inputs.joint_sigma / math.sqrt(share)), delta=s.delta,
            accountant=s.accountant, moments_share=s.moments_share,
            settings=context.untuned or UntunedSettings())
        return ReleaseComponent(name="untuned", epsilon=fields["epsilon_spent"], delta=s.delta,
                                share=float(share), **fields), {"untuned_sigmas": sigmas}

    def own_params(self, settings: Any) -> dict[str, Any]:
        return {f"untuned.{k}": v for k, v in dataclasses.asdict(settings.untuned).items()}

    def own_summary(self, settings: Any) -> dict[str, Any]:
        return {"untuned": dataclasses.asdict(settings.untuned)}

    def origin(self, provenance: Mapping[str, Any]) -> str:
        return "conf evaluation.untuned: (the tuning-free default's public rules)"

    def clip_quantile(self, plan: Any, settings: Any) -> float | None:
        return settings.untuned.clip_quantile

    def interval_method(self, settings: Mapping[str, Any]) -> str:
        return ("delta method around the refined estimate (released residual moments and "
                "privacy noise); clip and residual clip at private quantiles")

    def notes(self, spec: Any, plan: Any, provenance: Mapping[str, Any]) -> list[str]:
        return [UNTUNED_NOTE.format(name=spec.name)]

    def audit(self, request: AuditRequest) -> list[tuple[str, Any]]:
        from gpope.core.audit.untuned import UntunedAuditConfig, run_untuned_audit

        kw = request.canary_overrides()
        broken = {"ssp": [("noise x0.5", {"_noise_scale": 0.5}),
                          ("C noise unweighted", {"_unweighted_c_noise": True})],
                  "residual": [("noise x0.5", {"_noise_scale": 0.5})]}
        out = []
        for release, variants in broken.items():
            cfg = UntunedAuditConfig.preset(release, delta=request.delta, **kw)
            out.extend((name, run_untuned_audit(cfg, request.seed, **v)) for name, v in
                       [("real", {})] + (variants if request.include_broken else []))
        return out


def _noise(seed: int | None) -> np.random.Generator:
    """The default's noise stream: OS entropy, or derived from ``seed`` (NOT private)."""
    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x554E54])
    return np.random.default_rng(ss)


def run_untuned(run: RunSource, spec: Any, *, plan: Any, moments_share: float,
                seed: int | None, level: float, identification: bool,
                settings: Any = None) -> Any:
    """The default's releases through ``run.aggregate`` (continuing the behaviour release's
    noise stream where there was one). Noise from OS entropy unless ``seed`` (NOT private)."""
    from gpope.core.untuned.release import UntunedSettings, release_untuned

    rng = run.rng if run.rng is not None else _noise(seed)
    return release_untuned(run.aggregate, run.value_spec or spec, m=plan.m,
                           sigmas=plan.untuned_sigmas, moments_share=moments_share,
                           settings=settings or UntunedSettings(), rng=rng, level=level,
                           identification=identification, functionals=run.functionals)


class _Behaviour(ReleaseExecution):
    """The ``behaviour`` release (data without logged propensities), before the default's."""

    def prepare(self, component: Any, run: RunSource, *, plan: Any, settings: Any,
                spec: Any) -> RunSource:
        from gpope.core.behaviour_estimate import BehaviourSettings

        rng = _noise(settings.seed)
        aggregate, vspec = _with_estimated_behaviour(
            run.aggregate, spec, m=plan.m, component=component, rng=rng,
            rules=settings.behaviour or BehaviourSettings())
        return dataclasses.replace(run, value_aggregate=aggregate, value_spec=vspec, rng=rng)

    def notes(self, component: Any) -> list[str]:
        share = "a share" if component.share is None else f"{component.share:.0%}"
        return [BEHAVIOUR_NOTE.format(share=share)]


BEHAVIOUR = _Behaviour()


def _with_estimated_behaviour(aggregate: Any, spec: Any, *, m: int, component: Any, rng: Any,
                              rules: Any) -> tuple[Any, Any]:
    """The ``behaviour`` release over the state-action rows of ``spec``, then the value spec and
    an aggregate of the value route's rows under the released propensities (post-processing)."""
    import math

    from gpope.core import behaviour_estimate as be
    from gpope.core.state_action import value_spec

    whole = float(component.sigma) * math.sqrt(component.share)
    vspec = value_spec(spec)
    S, K = vspec.n_features, vspec.target_policy.n_actions

    def counts(kernel, width):
        return aggregate(lambda idx, rows: kernel(idx, be.count_rows_from_pairs(rows, vspec)),
                         width)

    est = be.release_behaviour(counts, n_states=S, n_actions=K, m=m,
                               sigma_quantile=whole / math.sqrt(rules.quantile_share),
                               sigma_counts=whole / math.sqrt(rules.share), settings=rules,
                               rng=rng)

    def values(kernel, width):
        return aggregate(lambda idx, rows: kernel(idx, be.value_rows_from_pairs(
            rows, vspec, est.probs)), width)

    return values, vspec


def untuned_result(release: Any, *, plan: Any, delta: float, seed: int | None) -> Any:
    """The release in the solver's result record (no iterates, no trace)."""
    from gpope.core.gpope.solver import GPOPEResult

    private = seed is None
    theta = np.asarray(release.theta, dtype=np.float64)
    return GPOPEResult(
        theta=theta, w=np.zeros_like(theta), theta_avg=None, sigma=plan.sigma,
        epsilon=plan.spent_epsilon, delta=delta, accountant=plan.accountant, sampling="poisson",
        iterations=1, clip=release.clip, private=private,
        privacy_note=("tuning-free default: two private quantiles, the clipped sufficient "
                      "statistics and the clipped residuals, noise from OS entropy" if private
                      else "fixed seed: reproducible, NOT private") + (
            "" if release.probe_scale is None else
            f"; the probe found the refinement overshooting (the statistics clip shrank A) and "
            f"corrected it (secant scale {release.probe_scale:.2f})"),
    )


ESTIMATOR = Untuned()

"""What an estimator brings (:class:`Estimator`): constraints, planning, execution, params and
notes for MLflow and the report, audit. The defaults fit a one-shot Gaussian release; nothing
here reads private data, only public settings, the public spec and m.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SOLVER_SETTINGS", "AuditRequest", "Estimator", "PlanContext", "generic_settings_note"]

#: Settings only the GPOPE solver uses (never recorded for a run whose estimator runs none).
SOLVER_SETTINGS = ("passes", "iterations", "clip", "step_size", "step_schedule", "step_offset",
                   "averaging", "tail_fraction", "sampling", "trace_every", "batch_rate",
                   "batch_size", "step_offset_fraction", "touched_trajectories",
                   "interval_groups", "interval_groups_min_patients",
                   "interval_groups_min_m_epsilon", "statistics_share")


@dataclass(frozen=True, kw_only=True)
class PlanContext:
    """The public inputs of an estimator's planning beyond :class:`PlanInputs`; ``layout`` is
    ``dense``, ``sparse`` or ``stream``, ``groups`` the interval's K patient groups (0: none)."""

    layout: str
    groups: int = 0
    private_tuning: Any = None
    untuned: Any = None
    private_clip_quantile: float | None = None


class Estimator:
    """An estimator of ``gpope evaluate`` (register an instance, :func:`gpope.core.estimators.register`).

    Its class attributes are the public facts the plan, the pipeline and the report read
    instead of its name: ``command_line`` (False: chosen by :meth:`claims`); ``one_shot`` (one
    Gaussian mechanism calibrated jointly with the auxiliary releases; False: basic
    composition, GPOPE); ``main_is_statistics`` (its release IS the noisy statistics);
    ``public_clip`` (False: its clip comes from its own private rule);
    ``private_clip_fallback`` (without a public clip it releases one, the ``ssp_clip``
    component); ``own_clip_rule`` (``ssp_clip_quantile`` is not recorded);
    ``estimates_behaviour`` (the ``behaviour`` component on data without propensities);
    ``direct_method`` (its release also gives intervals of public functionals of theta);
    ``execution`` (``"module:function"`` that :meth:`execute` calls).
    """

    name: str = ""
    description: str = ""
    command_line: bool = True
    one_shot: bool = True
    uses_solver: bool = False
    interval_groups: bool = False
    main_is_statistics: bool = False
    public_clip: bool = True
    private_clip_fallback: bool = False
    own_clip_rule: bool = False
    estimates_behaviour: bool = False
    statistics_share_helps: bool = False
    direct_method: bool = False
    execution: str | None = None

    # --- settings and constraints ---------------------------------------------------------

    def claims(self, spec_has_block: bool, sources: Mapping[str, str]) -> bool:
        """Whether a run takes this estimator although nobody named it."""
        return False

    def secure_noise_ok(self, sampling: str) -> bool:
        """Whether ``--secure-noise`` (discrete Gaussian, RDP) covers its release at ``sampling``."""
        return True

    def check(self, spec: Any, settings: Any) -> None:
        """Refuse settings it cannot honour (public settings only); raises ConfigError."""

    # --- planning -------------------------------------------------------------------------

    def check_plan(self, inputs: Any, context: PlanContext) -> None:
        """Refuse a plan it cannot make (public inputs only); raises ConfigError."""
        if inputs.settings.tune == "private":
            from gpope.errors import ConfigError

            raise ConfigError(
                f"--tune private tunes GPOPE's clip bound and step size; --estimator {self.name} "
                "has none to tune. Drop one of them.")

    def extra_components(self, inputs: Any, context: PlanContext
                         ) -> list[tuple[str, float, Callable[..., Any]]]:
        """Components of its own besides its release: (name, share of the run, planner)."""
        return []

    def plan(self, inputs: Any, context: PlanContext, *, share: float | None = None,
             epsilon: float | None = None, delta: float | None = None
             ) -> tuple[Any, dict[str, Any]]:
        """Its release component, one-shot at ``share`` of the run's privacy loss, else at
        (``epsilon``, ``delta``); and the plan's fields it sets."""
        raise NotImplementedError(f"estimator {self.name!r} plans no release")

    def execute(self, source: Any, *, plan: Any, settings: Any, spec: Any) -> Any:
        """Its releases at the plan's multipliers against ``source``: the function named by
        :attr:`execution`."""
        if self.execution is None:
            from gpope.errors import ConfigError

            raise ConfigError(f"Estimator {self.name!r} has no execution; it cannot release.")
        import importlib

        module, attr = self.execution.split(":")
        run = getattr(importlib.import_module(module), attr)
        return run(source, plan=plan, settings=settings, spec=spec)

    # --- params and notes for MLflow and the report ---------------------------------------

    def params(self, settings: Any, *, batch_rate: float | None, path: str,
               statistics: Mapping[str, Any] | None) -> dict[str, Any]:
        """The MLflow params of the settings it used, under their CLI flag names."""
        s = settings
        params: dict[str, Any] = {"statistics_path": path,
                                  "private_diagnostics": s.private_diagnostics}
        if self.uses_solver:
            params.update({k: getattr(s, k) for k in ("epsilon", "delta", *SOLVER_SETTINGS[:10])})
            params.update(batch_rate=batch_rate, interval_groups=s.interval_groups,
                          statistics_share=0.0 if statistics is None else s.statistics_share)
        else:
            params.update(epsilon=s.epsilon, delta=s.delta)
        if statistics is not None:
            if not self.own_clip_rule:
                params["ssp_clip_quantile"] = s.ssp_clip_quantile
            params["ssp_identification"] = s.ssp_identification
            params.update(statistics)
        params.update(self.own_params(s))
        if s.policy_value_share:
            params["policy_value_share"] = s.policy_value_share
        return params

    def own_params(self, settings: Any) -> dict[str, Any]:
        """Params of its own rules (a settings block of its own), beside the common ones."""
        return {}

    def summary(self, settings: Any, provenance: Mapping[str, Any], *, accountant: str
                ) -> dict[str, Any]:
        """The run's operating point and where each setting came from (``--json``'s
        ``settings``)."""
        s, info = settings, provenance
        out: dict[str, Any] = {"accountant": accountant}
        if self.uses_solver:
            out.update({k: getattr(s, k) for k in SOLVER_SETTINGS[:11]})
            out.update(batch_size=s.batch_size, touched_trajectories=info["touched_trajectories"],
                       interval_groups=s.interval_groups)
        else:
            out.update(moments_share=s.moments_share, ssp_identification=s.ssp_identification)
        if self.own_clip_rule:
            out.update(self.own_summary(s))
        else:
            out.update(ssp_clip_quantile=s.ssp_clip_quantile,
                       ssp_clip_from=info.get("ssp_clip_from"))
        source = dict(info["source"])
        if not self.uses_solver:
            source = {k: v for k, v in source.items() if k not in SOLVER_SETTINGS}
        out.update({
            "source": source, "tuned_point": info["tuned_point"], "tuning": info["tuning"],
            "interval_note": info["interval_note"],
            "policy_value": (dataclasses.asdict(s.policy_value_settings())
                             if s.policy_value_share else None),
            "origin": self.origin(info)
                      + (" + command line" if "options" in info["source"].values() else ""),
        })
        return out

    def own_summary(self, settings: Any) -> dict[str, Any]:
        """Its own rules in ``--json``'s ``settings`` (with :attr:`own_clip_rule`)."""
        return {}

    def origin(self, provenance: Mapping[str, Any]) -> str:
        """Where the run's settings came from, in words."""
        return ("spec evaluation: block" if provenance["spec_has_evaluation_block"]
                else "conf evaluation: (generic)")

    def clip_quantile(self, plan: Any, settings: Any) -> float | None:
        """The quantile its privately released clip was read at (None: its clip is public)."""
        return plan.private_clip_quantile

    def interval_method(self, settings: Mapping[str, Any]) -> str:
        """How its intervals are made, one phrase for the report (``settings``: the summary)."""
        return "its own interval"

    def notes(self, spec: Any, plan: Any, provenance: Mapping[str, Any]) -> list[str]:
        """The NOTE lines of its run in the report."""
        return [] if provenance["spec_has_evaluation_block"] else [generic_settings_note(spec)]

    # --- audit ----------------------------------------------------------------------------

    def audit(self, request: Any) -> list[tuple[str, Any]]:
        """Its empirical privacy audit (``gpope audit --estimator NAME``): (variant, result)."""
        return []


def generic_settings_note(spec: Any) -> str:
    """The NOTE of a run of a spec without an ``evaluation:`` block that did not take the
    tuning-free default."""
    return (f"NOTE: spec {spec.name!r} has no evaluation: block, so the generic conf settings "
            "were used; " + ("tune it on public data with `gpope tune --spec FILE`."
                             if spec.domain is not None else
                             "drop the estimator and solver flags to get the tuning-free "
                             "private default (docs/OWN_DATA.md)."))


@dataclass(frozen=True, kw_only=True)
class AuditRequest:
    """What ``gpope audit`` asks of each audited release (its flags; ``overrides``: the
    caller's ``m``, ``iterations``, ``epsilon``, ``runs``)."""

    samplings: tuple[str, ...] = ("uniform", "poisson")
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    delta: float = 1e-5
    seed: int = 0
    quick: bool = False
    include_broken: bool = False
    statistic: str = "likelihood_ratio"
    policy_value_settings: Callable[[], Any] | None = None

    def canary_overrides(self) -> dict[str, Any]:
        """The overrides the canary audits take (not GPOPE's ``iterations``)."""
        return {k: v for k, v in self.overrides.items() if k in ("m", "epsilon", "runs")}

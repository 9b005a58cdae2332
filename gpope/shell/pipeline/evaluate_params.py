"""Which settings a run used, per estimator: its MLflow params and ``--json``'s ``settings``.

A GPOPE run uses the solver's settings (passes, iterations, batch rate, clip, step size and
schedule, averaging, sampling), its noisy-statistics share and its interval groups. An ssp run uses
none of them: its estimate is one release of noisy sufficient statistics (its clip, the moments
share, the identification test; a private clip also the clip histogram's share). The tuning-free
default (``untuned``) uses neither: it runs on its own public rules (conf ``evaluation.untuned``:
clip and residual quantiles, shares, grids) with the moments share and identification test. Every
run may use the policy value release (``policy_value_share``) and its interval level.

A setting an estimator did not use is never recorded for its run, so runs compared in MLflow
(or in ``--json``) differ only where they really did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["SOLVER_SETTINGS", "run_params", "settings_summary", "uses_solver"]

#: Settings only the GPOPE solver uses (never recorded for an ssp or tuning-free run); the
#: first ones are logged under the name of their CLI flag (``--step-size`` -> step_size).
SOLVER_SETTINGS = ("passes", "iterations", "clip", "step_size", "step_schedule", "step_offset",
                   "averaging", "tail_fraction", "sampling", "trace_every", "batch_rate",
                   "batch_size", "step_offset_fraction", "touched_trajectories",
                   "interval_groups", "interval_groups_min_patients",
                   "interval_groups_min_m_epsilon", "statistics_share")

#: The CLI-flag settings every GPOPE run logs (the first of :data:`SOLVER_SETTINGS` and the spend).
_GPOPE_FLAGS = ("epsilon", "delta", *SOLVER_SETTINGS[:10])


def uses_solver(estimator: str) -> bool:
    """Whether the run's estimator is the GPOPE solver (the only one using its settings)."""
    return estimator == "gpope"


def run_params(options: Any, *, batch_rate: float | None, path: str,
               ssp: Mapping[str, Any] | None) -> dict[str, Any]:
    """The MLflow params of the settings the run's estimator used (module docstring), under
    their CLI flag names; ``ssp``: the statistics release's public numbers (None without one)."""
    params: dict[str, Any] = {"statistics_path": path,
                              "private_diagnostics": options.private_diagnostics}
    if uses_solver(options.estimator):
        params.update({k: getattr(options, k) for k in _GPOPE_FLAGS})
        params.update(batch_rate=batch_rate, interval_groups=options.interval_groups,
                      statistics_share=0.0 if ssp is None else options.statistics_share)
    else:
        params.update(epsilon=options.epsilon, delta=options.delta)
    if ssp is not None:
        if options.estimator != "untuned":  # the default reads its clip by its own rule
            params["ssp_clip_quantile"] = options.ssp_clip_quantile
        params["ssp_identification"] = options.ssp_identification
        params.update(ssp)
    if options.estimator == "untuned":
        params.update({f"untuned.{k}": v for k, v in dataclasses.asdict(options.untuned).items()})
    if options.policy_value_share:
        params["policy_value_share"] = options.policy_value_share
    return params


def settings_summary(settings: Any, provenance: Mapping[str, Any], *, accountant: str
                     ) -> dict[str, Any]:
    """The run's operating point and where each setting came from (``--json``'s ``settings``):
    the solver's settings for a GPOPE run only, the default's rules for a tuning-free one."""
    s, info = settings, provenance
    solver = uses_solver(s.estimator)
    out: dict[str, Any] = {"accountant": accountant}
    if solver:
        out.update({k: getattr(s, k) for k in SOLVER_SETTINGS[:11]})
        out.update(batch_size=s.batch_size, touched_trajectories=info["touched_trajectories"],
                   interval_groups=s.interval_groups)
    else:
        out.update(moments_share=s.moments_share, ssp_identification=s.ssp_identification)
    if s.estimator == "untuned":
        out["untuned"] = dataclasses.asdict(s.untuned)
    else:
        out.update(ssp_clip_quantile=s.ssp_clip_quantile, ssp_clip_from=info.get("ssp_clip_from"))
    source = dict(info["source"])
    if not solver:
        source = {k: v for k, v in source.items() if k not in SOLVER_SETTINGS}
    out.update({
        "source": source, "tuned_point": info["tuned_point"], "tuning": info["tuning"],
        "interval_note": info["interval_note"],
        "policy_value": (dataclasses.asdict(s.policy_value_settings())
                         if s.policy_value_share else None),
        "origin": _origin(s.estimator, info),
    })
    return out


def _origin(estimator: str, info: Mapping[str, Any]) -> str:
    """Where the run's settings came from, in words."""
    base = ("conf evaluation.untuned: (the tuning-free default's public rules)"
            if estimator == "untuned"
            else "spec evaluation: block" if info["spec_has_evaluation_block"]
            else "conf evaluation: (generic)")
    return base + (" + command line" if "options" in info["source"].values() else "")

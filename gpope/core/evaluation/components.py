"""The components of a release plan (:mod:`gpope.core.evaluation.plan`): the public inputs every
planner reads, one calibrated release (:class:`ReleaseComponent`), and the planner of each release
a run may make besides the estimator's (each estimator plans its own,
:meth:`gpope.core.estimators.Estimator.plan`). Each planner calibrates its noise to its
share of the run's budget (:func:`gaussian_share`: joint for one-shot runs, basic composition for
GPOPE runs) and returns its event, certified epsilon, label and what it releases; nothing is drawn
or read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ESTIMATE", "PlanInputs", "PlanSettings", "ReleaseComponent", "gaussian_calibration",
    "gaussian_share", "plan_noisy_statistics", "plan_policy_value", "policy_value_share",
    "statistics_accountant", "statistics_share",
]


class PlanSettings(Protocol):
    """The resolved public settings a plan reads (the run's settings type provides them)."""

    epsilon: float
    delta: float
    estimator: str
    sampling: str
    accountant: str
    iterations: int
    batch_rate: float | None
    clip: float
    moments_share: float
    statistics_share: float
    policy_value_share: float
    interval_groups: int | None
    tune: str
    in_memory_limit_mb: int | None


@dataclass(frozen=True, kw_only=True)
class ReleaseComponent:
    """One noisy release of a run, calibrated to its share of the run's budget.

    Attributes:
        name: ``"gpope"``, ``"gpope-tuned"``, ``"ssp"``, ``"untuned"`` (the estimator's release)
            or an auxiliary component's name (``"noisy_statistics"``, ``"policy_value"``...).
        epsilon, delta: GPOPE runs (basic composition): its share of the run's (epsilon, delta).
            One-shot runs (joint calibration): the run's delta and the epsilon this component
            alone certifies at it; the run's guarantee is that of the composed event
            (:attr:`ReleasePlan.spent_epsilon`), not a sum of these.
        sigma: its noise multiplier (noise std / its sensitivity bound).
        event: its dp-accounting event, interpreted under the plan's relation.
        epsilon_spent: epsilon of ``event`` at ``delta`` certified by the accountant.
        label: one line for the ledger and MLflow.
        releases: the names of what it releases (``theta``, ``values``, ``intervals``...).
        share: its share of the run's budget: of (epsilon, delta) under basic composition, of
            the Gaussian privacy loss ``mu^2`` under joint calibration (None: not recorded).
        execution: ``"module:attribute"`` of the
            :class:`~gpope.core.estimators.execution.ReleaseExecution` that executes an auxiliary
            release (a shell one where it needs Spark beyond sums); None: the estimator's
            release, which its estimator executes.

    An auxiliary component executes itself: :meth:`check` before the reservation,
    :meth:`prepare` before the estimator's release, :meth:`finish` after it, :meth:`rows` for
    released_values and :meth:`notes` for the report, each handing the executor this component.
    """

    name: str
    epsilon: float
    delta: float
    sigma: float
    event: Any
    epsilon_spent: float
    label: str
    releases: tuple[str, ...]
    share: float | None = None
    execution: str | None = None

    def _executor(self) -> Any:
        from gpope.core.estimators.execution import ReleaseExecution

        if self.execution is None:
            return ReleaseExecution()
        import importlib

        module, attr = self.execution.split(":")
        return getattr(importlib.import_module(module), attr)

    def check(self, rows: Any) -> None:
        self._executor().check(self, rows)

    def prepare(self, run: Any, **kw: Any) -> Any:
        return self._executor().prepare(self, run, **kw)

    def finish(self, run: Any, est: Any, **kw: Any) -> Any:
        return self._executor().finish(self, run, est, **kw)

    def rows(self, row: dict[str, Any], est: Any, *, spec_name: str) -> list[dict[str, Any]]:
        return self._executor().rows(self, row, est, spec_name=spec_name)

    def notes(self) -> list[str]:
        return self._executor().notes(self)


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    """The public inputs every component planner reads.

    Attributes:
        settings: the run's resolved settings.
        m: the number of trajectories (public).
        relation: the neighbouring relation of the run.
        accountant: the settings' accountant name (``auto``, ``rdp``, ``pld``, ``paper``).
        statistics_clip: the public clip bound of the noisy-statistics release, or None.
        spec: the public evaluation spec (None: components that need it are not planned).
        behaviour: the public rules of the behaviour policy's private estimate
            (:class:`gpope.core.behaviour_estimate.BehaviourSettings`) when the run estimates it
            (the data carry no logged propensities: a public fact, the schema), else None.
        joint_sigma: one-shot runs: the multiplier of the whole run as one Gaussian mechanism
            (a component with share ``w`` of its privacy loss gets ``joint_sigma / sqrt(w)``);
            None: basic composition (GPOPE runs).
    """

    settings: PlanSettings
    m: int
    relation: str
    accountant: str
    statistics_clip: float | None
    spec: Any = None
    joint_sigma: float | None = None
    behaviour: Any = None


def statistics_share(inputs: PlanInputs) -> float:
    if inputs.statistics_clip is None:
        return 0.0  # no public clip bound (no simulator): no statistics release
    return float(inputs.settings.statistics_share)


def statistics_accountant(inputs: PlanInputs) -> str:
    from gpope.core.accounting.registry import AUTO, not_a_valid_bound

    # the one-shot release is accounted rigorously even when the GPOPE part's accountant is not
    return AUTO if not_a_valid_bound(inputs.accountant) else inputs.accountant


def gaussian_calibration(inputs: PlanInputs, epsilon: float, delta: float
                          ) -> tuple[float, float]:
    """(sigma, certified epsilon) of one Gaussian release at (epsilon, delta) under the run's
    relation, accounted rigorously (:func:`gpope.core.ssp.ssp_sigma`)."""
    from gpope.core.ssp import ssp_epsilon, ssp_sigma

    acc = statistics_accountant(inputs)
    sigma = ssp_sigma(m=inputs.m, epsilon=epsilon, delta=delta, accountant=acc,
                      relation=inputs.relation)
    spent = ssp_epsilon(m=inputs.m, sigma=sigma, delta=delta, accountant=acc,
                        relation=inputs.relation)
    return float(sigma), float(spent)


def gaussian_share(inputs: PlanInputs, share: float) -> dict[str, float]:
    """The calibration of a Gaussian release with ``share`` of the run's budget, as
    :class:`ReleaseComponent` fields (``epsilon``, ``delta``, ``sigma``, ``epsilon_spent``,
    ``share``). Joint calibration (``inputs.joint_sigma``): multiplier ``joint_sigma / sqrt(share)``
    and the epsilon it alone certifies at the run's delta. Basic composition: calibrated to
    ``(share epsilon, share delta)``."""
    s = inputs.settings
    if inputs.joint_sigma is not None:
        from gpope.core.ssp import ssp_epsilon

        sigma = float(inputs.joint_sigma / math.sqrt(share))
        alone = ssp_epsilon(m=inputs.m, sigma=sigma, delta=s.delta,
                            accountant=statistics_accountant(inputs), relation=inputs.relation)
        return {"epsilon": float(alone), "delta": float(s.delta), "sigma": sigma,
                "epsilon_spent": float(alone), "share": float(share)}
    epsilon, delta = s.epsilon * share, s.delta * share
    sigma, spent = gaussian_calibration(inputs, epsilon, delta)
    return {"epsilon": epsilon, "delta": delta, "sigma": float(sigma),
            "epsilon_spent": float(spent), "share": float(share)}


def plan_noisy_statistics(inputs: PlanInputs, share: float) -> ReleaseComponent:
    """The noisy-statistics release (clipped sums of (A, b, C), then the residual second moments
    at its own estimate; :func:`gpope.core.ssp.ssp_release_event`) at ``share`` of the run."""
    from gpope.core.ssp import ssp_release_event

    ms = inputs.settings.moments_share
    cal = gaussian_share(inputs, share)
    return ReleaseComponent(
        name="noisy_statistics", **cal,
        event=ssp_release_event(cal["sigma"], ms, inputs.relation),
        label=f"noisy statistics(clip={inputs.statistics_clip:g}, moments_share={ms:g})",
        releases=("intervals", "private_mspbe"),
        execution="gpope.shell.evaluate.intervals:NOISY_STATISTICS")


def policy_value_share(inputs: PlanInputs) -> float:
    from gpope.core.policy_value import policy_value_unavailable

    if inputs.spec is None or policy_value_unavailable(inputs.spec):
        return 0.0  # the spec lacks a public bound the release needs (public: no release)
    return float(getattr(inputs.settings, "policy_value_share", 0.0) or 0.0)


def behaviour_share(inputs: PlanInputs) -> float:
    """The behaviour estimate's share of the run (its counts and their histogram), 0 when the
    data carry logged propensities."""
    b = inputs.behaviour
    return 0.0 if b is None else float(b.share + b.quantile_share)


def plan_behaviour(inputs: PlanInputs, share: float) -> ReleaseComponent:
    """The behaviour policy's private estimate (:mod:`gpope.core.behaviour_estimate`: one
    histogram of the count rows' norms and the noisy counts, each its own share of the run's
    privacy loss) at ``share`` of the run: ``ComposedDpEvent([histogram, counts])``."""
    from gpope.core.behaviour_estimate import behaviour_dp_event

    b = inputs.behaviour
    cal = gaussian_share(inputs, share)
    whole = cal["sigma"] * math.sqrt(share)  # the multiplier the shares are shares of
    sq, sc = whole / math.sqrt(b.quantile_share), whole / math.sqrt(b.share)
    return ReleaseComponent(
        name="behaviour", **cal, event=behaviour_dp_event(sq, sc),
        label=(f"behaviour(noisy counts per state and action, clip at a private "
               f"{b.clip_quantile:g} quantile)"),
        releases=("behaviour_policy",), execution="gpope.core.estimators.untuned:BEHAVIOUR")


def plan_policy_value(inputs: PlanInputs, share: float) -> ReleaseComponent:
    """The policy value release (J(target), J(behaviour), their contrast; one Gaussian mechanism,
    :mod:`gpope.core.policy_value_release`) at ``share`` of the run under its relation."""
    from gpope.core.policy_value_release import policy_value_event

    cal = gaussian_share(inputs, share)
    return ReleaseComponent(
        name="policy_value", **cal, event=policy_value_event(cal["sigma"], inputs.relation),
        label="policy value(clipped importance sampling)",
        releases=("policy_value", "behaviour_value", "policy_contrast"),
        execution="gpope.shell.evaluate.policy_value:POLICY_VALUE")


#: What every estimator's release gives.
ESTIMATE = ("theta", "values")

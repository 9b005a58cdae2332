"""The release plan of one private evaluation: every privacy decision of the run, made before it
touches the data, from public inputs only.

:func:`plan_release` turns the resolved settings, m and the public spec into a frozen
:class:`ReleasePlan`: each release's noise multiplier, the composed dp-accounting event the ledger
stores (``ComposedDpEvent([estimator, *auxiliary])``), its neighbouring relation and the epsilon
charged. The Spark stage executes the plan and does no privacy arithmetic itself.

Each auxiliary component (:data:`AUXILIARY`) takes its share of the run's budget and the
estimator's release (:meth:`gpope.core.estimators.Estimator.plan`) the rest:

- **One-shot runs** (``ssp``, ``untuned``): every component is a Gaussian mechanism under
  add/remove-one adjacency, and Gaussian mechanisms compose exactly (``1/sigma^2 = sum_j
  1/sigma_j^2``). So the run calibrates one ``sigma`` for its whole (epsilon, delta) and a
  component with share ``w`` gets ``sigma / sqrt(w)``; the certified epsilon is the
  accountant's epsilon of the composed event (<= epsilon).
- **GPOPE runs** (subsampled Gaussian, many steps): basic composition. A component with share
  ``w`` is calibrated alone to ``(w epsilon, w delta)`` and the certified epsilon is the sum.

To add a released component: give the settings its share, write its planner in
:mod:`gpope.core.evaluation.components` (:func:`gaussian_share` follows both rules), list it in
:data:`AUXILIARY` and give it an ``execution``
(:class:`gpope.core.estimators.execution.ReleaseExecution`); the event, the charge, the ledger
label and :attr:`ReleasePlan.releases` include it with no further change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpope.core.evaluation.components import (
    PlanInputs,
    PlanSettings,
    ReleaseComponent,
    behaviour_share,
    gaussian_share,
    plan_behaviour,
    plan_noisy_statistics,
    plan_policy_value,
    policy_value_share,
    statistics_accountant,
    statistics_share,
)
from gpope.errors import AccountingError, ConfigError

if TYPE_CHECKING:
    import dp_accounting

    from gpope.core.behaviour_estimate import BehaviourSettings
    from gpope.core.spec import EvaluationSpec
    from gpope.core.tuning.private import PrivateTuningPlan, PrivateTuningSettings
    from gpope.core.untuned.release import UntunedSettings, UntunedSigmas

__all__ = ["AUXILIARY", "PlanInputs", "ReleaseComponent", "ReleasePlan", "gaussian_share",
           "plan_release", "run_relation"]


@dataclass(frozen=True, kw_only=True)
class ReleasePlan:
    """Everything private about a run, decided from public inputs (see the module docstring).

    ``m`` is what every released number uses: the released count m~ (``count_sigma`` > 0) or,
    under replace-one, the exact m. ``relation`` (``"replace_one"`` for uniform sampling, else
    ``"add_or_remove_one"``) is what every component is calibrated and charged under.
    ``spent_epsilon`` is the certified epsilon; ``charged_epsilon`` what the ledger charges (for
    an accountant that is not a valid bound, ``paper``, a rigorous RDP bound if larger; then
    ``valid_bound`` is False and ``ledger_note`` says why). ``private_clip_quantile``: for an
    ssp run without a public clip bound, the quantile its ``ssp_clip`` component releases as
    the clip (``statistics_clip`` is then None).
    """
    epsilon: float
    delta: float
    m: int
    estimator: str
    accountant: str
    relation: str
    main: ReleaseComponent
    auxiliary: tuple[ReleaseComponent, ...]
    event: Any
    label: str
    spent_epsilon: float
    charged_epsilon: float
    valid_bound: bool
    ledger_note: str | None
    layout: str
    interval_groups: int
    interval_note: str | None
    statistics_clip: float | None
    moments_share: float
    tuning: tuple[PrivateTuningPlan, PrivateTuningSettings] | None = None
    private_clip_quantile: float | None = None
    untuned_sigmas: UntunedSigmas | None = None
    count_sigma: float = 0.0

    @property
    def sigma(self) -> float:
        """The estimator's noise multiplier."""
        return self.main.sigma

    @property
    def in_memory(self) -> bool:
        """The statistics are loaded into driver memory (dense or sparse)."""
        return self.layout != "stream"

    @property
    def components(self) -> tuple[ReleaseComponent, ...]:
        """Every release of the run, the estimator's first (the order of :attr:`event`)."""
        return (self.main, *self.auxiliary)

    @property
    def statistics(self) -> ReleaseComponent | None:
        """The noisy-statistics release behind the intervals and the private MSPBE, or None."""
        from gpope.core.estimators import get

        if get(self.estimator).main_is_statistics:
            return self.main
        return next((c for c in self.auxiliary if "private_mspbe" in c.releases), None)

    @property
    def releases(self) -> tuple[str, ...]:
        """What the run releases, over all components (first mention order)."""
        return tuple(dict.fromkeys(r for c in self.components for r in c.releases))

    def relation_epsilons(self, *, cheap_only: bool = True) -> dict[str, float | None]:
        """The run's epsilon under its own relation (the charge) and restated under the other;
        ``cheap_only`` leaves a sampled event's (slow) restatement None."""
        from gpope.core.accounting.relations import OTHER_RELATION, epsilon_under, gaussian_mu

        other = OTHER_RELATION[self.relation]
        value = None
        if not cheap_only or gaussian_mu(self.event) is not None:
            value = epsilon_under(self.event, charged_relation=self.relation, relation=other,
                                  delta=self.delta)
        return {self.relation: float(self.charged_epsilon), other: value}


#: The auxiliary releases: (name, share of the run's budget, planner). See the module docstring.
AUXILIARY: tuple[tuple[str, Callable[[PlanInputs], float],
                       Callable[[PlanInputs, float], ReleaseComponent]], ...] = (
    ("behaviour", behaviour_share, plan_behaviour),
    ("noisy_statistics", statistics_share, plan_noisy_statistics),
    ("policy_value", policy_value_share, plan_policy_value),
)

def _interval_groups(s: PlanSettings, *, explicit: bool, layout: str) -> tuple[int, str | None]:
    """K of the run once the layout is known (public): a default rule yields to the streamed
    path; an explicit K is refused where it does not hold."""
    from gpope.core.estimators import get
    from gpope.core.intervals import check_interval_groups

    k = int(s.interval_groups or 0)
    if not k or not get(s.estimator).interval_groups:
        return 0, None
    if layout == "stream" and not explicit:
        from gpope.core.evaluation.settings import STREAMED_GROUPS_NOTE

        return 0, STREAMED_GROUPS_NOTE.format(k=k, limit=s.in_memory_limit_mb)
    check_interval_groups("RunSettings", k, sampling=s.sampling, tune=s.tune,
                          streamed=layout == "stream", in_memory_limit_mb=s.in_memory_limit_mb)
    return k, None


def run_relation(settings: PlanSettings) -> str:
    """The run's adjacency: replace-one for GPOPE's uniform sampling (its accountant needs the
    exact rate 1/m, so m is public), else add/remove-one with the released count m~ as m."""
    from gpope.core.accounting.composition import relation_of_sampling
    from gpope.core.estimators import get

    one_shot = get(settings.estimator).one_shot
    return "add_or_remove_one" if one_shot else relation_of_sampling(settings.sampling)


def plan_release(
    settings: PlanSettings, *, m: int, spec: EvaluationSpec, layout: str,
    statistics_clip: float | None, groups_explicit: bool = False,
    private_tuning: PrivateTuningSettings | None = None, untuned: UntunedSettings | None = None,
    private_clip_quantile: float | None = None, behaviour: BehaviourSettings | None = None,
    count_sigma: float = 0.0,
) -> ReleasePlan:
    """The release plan of a run (see the module docstring); nothing is drawn or read. Equal
    for any two data sets with the same m.

    ``statistics_clip``: the public clip bound of the noisy-statistics release (required for
    an ssp run). ``groups_explicit``: an explicit K is refused where it cannot hold, a default
    rule yields. ``private_clip_quantile``: an ssp run without ``statistics_clip`` releases its
    clip as this quantile of the statistics norms (its ``ssp_clip`` component). ``behaviour``:
    the data carry no logged propensities (public: the schema), so the run estimates the
    behaviour policy privately with these rules. ``count_sigma``: ``m`` is the released count
    m~ with this noise std (0: the exact m, which only a replace-one plan may use).

    Raises:
        ConfigError, AccountingError: a combination of settings the run cannot account for.
    """
    from gpope.core.accounting import epsilon_spent, resolve_accountant
    from gpope.core.accounting.registry import REFERENCE, not_a_valid_bound
    from gpope.core.estimators import PlanContext, get

    s = settings
    estimator = get(s.estimator)
    one_shot = estimator.one_shot
    relation = run_relation(s)
    accountant = resolve_accountant(s.accountant, "poisson" if one_shot else s.sampling)
    inputs = PlanInputs(settings=s, m=m, relation=relation, accountant=s.accountant,
                        statistics_clip=statistics_clip, spec=spec, behaviour=behaviour)
    groups, note = _interval_groups(s, explicit=groups_explicit, layout=layout)
    private_clip = estimator.private_clip_fallback and statistics_clip is None
    context = PlanContext(layout=layout, groups=groups, private_tuning=private_tuning,
                          untuned=untuned, private_clip_quantile=private_clip_quantile
                          if private_clip else None)
    estimator.check_plan(inputs, context)
    # an estimator whose release IS the noisy statistics: the other components only
    shares = [*estimator.extra_components(inputs, context),
              *((name, share(inputs), planner) for name, share, planner in AUXILIARY
                if not (estimator.main_is_statistics and name == "noisy_statistics"))]
    if sum(sh for _, sh, _ in shares) >= 1.0:
        raise ConfigError(
            "The shares of the run's auxiliary releases (statistics_share, policy_value_share) "
            f"sum to {sum(sh for _, sh, _ in shares):g}; they must leave a positive share for "
            "the estimator (sum < 1). Lower one of them.")
    if one_shot:
        main, auxiliary, event, label, spent, fields = _plan_one_shot(
            inputs, [(sh, planner) for _, sh, planner in shares if sh > 0], estimator, context)
    else:
        auxiliary = tuple(planner(inputs, sh) for _, sh, planner in shares if sh > 0)
        main_eps, main_delta = s.epsilon, s.delta
        for c in auxiliary:
            main_eps, main_delta = main_eps - c.epsilon, main_delta - c.delta
        main, fields = estimator.plan(inputs, context, epsilon=main_eps, delta=main_delta)
        event, label = _compose(main, auxiliary)
        spent = main.epsilon_spent
        for c in auxiliary:
            spent = spent + c.epsilon_spent
    accountant = fields.get("accountant", accountant)
    valid = not not_a_valid_bound(accountant)
    charged = s.epsilon
    if not valid:  # charge what the mechanism really costs (a rigorous RDP bound)
        rigorous = float(epsilon_spent(
            m=m, iterations=s.iterations, sigma=main.sigma, delta=main.delta, accountant=REFERENCE,
            sampling=s.sampling, batch_rate=s.batch_rate))
        for c in auxiliary:
            rigorous = rigorous + c.epsilon_spent
        charged = max(s.epsilon, rigorous)
    return ReleasePlan(
        epsilon=s.epsilon, delta=s.delta, m=m, estimator=s.estimator, accountant=accountant,
        relation=relation, main=main, auxiliary=auxiliary, event=event, label=label,
        spent_epsilon=float(spent), charged_epsilon=float(charged), valid_bound=valid,
        ledger_note=None if valid else (
            "accountant 'paper' is not a valid bound (--allow-invalid-accounting): released NOT "
            f"private; charged at rigorous RDP epsilon {charged:.6g}"),
        layout=layout, interval_groups=groups, interval_note=note,
        statistics_clip=None if statistics_clip is None else float(statistics_clip),
        moments_share=float(s.moments_share), tuning=fields.get("tuning"),
        private_clip_quantile=float(private_clip_quantile) if private_clip else None,
        untuned_sigmas=fields.get("untuned_sigmas"), count_sigma=float(count_sigma))


#: Each retry of a joint calibration whose composed event certifies above the target (the
#: accountant's discretisation) widens the multiplier by this factor.
_JOINT_RETRY_FACTOR = 1.001
_JOINT_RETRIES = 50


def _plan_one_shot(inputs: PlanInputs, shares: list[tuple[float, Callable[..., ReleaseComponent]]],
                   estimator: Any, context: Any
                   ) -> tuple[ReleaseComponent, tuple[ReleaseComponent, ...], Any, str, float,
                              dict[str, Any]]:
    """A one-shot run calibrated jointly (module docstring). Returns (main, auxiliary, event,
    label, certified epsilon (<= epsilon), the plan's fields the estimator sets)."""
    import dataclasses

    import dp_accounting

    from gpope.core.accounting import resolve_accountant
    from gpope.core.accounting.registry import implementation
    from gpope.core.ssp import ssp_sigma

    s = inputs.settings
    acc = statistics_accountant(inputs)
    certifier = implementation(resolve_accountant(acc, "poisson"))
    sigma = float(ssp_sigma(m=inputs.m, epsilon=s.epsilon, delta=s.delta, accountant=acc,
                            relation=inputs.relation))
    main_share = 1.0 - sum(sh for sh, _ in shares)
    for _ in range(_JOINT_RETRIES):
        joint = dataclasses.replace(inputs, joint_sigma=sigma)
        auxiliary = tuple(planner(joint, sh) for sh, planner in shares)
        main, fields = estimator.plan(joint, context, share=main_share)
        event, label = _compose(main, auxiliary, joint=True)
        spent = float(certifier.event_epsilon(
            event, s.delta, dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE))
        if spent <= s.epsilon:
            return main, auxiliary, event, label, spent, fields
        sigma *= _JOINT_RETRY_FACTOR
    raise AccountingError(
        f"The composed event of the run certifies epsilon {spent:.6g} > {s.epsilon:g} even with "
        f"its multiplier widened {_JOINT_RETRIES} times; use --accountant rdp or pld.")


def _compose(main: ReleaseComponent, auxiliary: tuple[ReleaseComponent, ...], *,
             joint: bool = False) -> tuple[dp_accounting.DpEvent, str]:
    """The run's event (the estimator's alone, or composed with the auxiliary ones) and label
    (``joint``: the components are shares of one Gaussian mechanism's privacy loss)."""
    if not auxiliary:
        return main.event, main.label
    import dp_accounting

    parts = (main, *auxiliary)
    label = " + ".join(c.label for c in parts)
    if joint:
        shares = " and ".join(f"{c.share:g}" for c in parts)
        how = f"one Gaussian mechanism, shares {shares} of its privacy loss mu^2"
    else:
        how = "basic composition of " + " and ".join(f"({c.epsilon:g}, {c.delta:g})"
                                                     for c in parts)
    return dp_accounting.ComposedDpEvent([c.event for c in parts]), f"{label} ({how})"

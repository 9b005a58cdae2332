"""The release plan (gpope.core.evaluation.plan): sigmas, composed event, relation, charge.

Pure: no Spark. Epsilons are checked against dp-accounting's own accountants on the plan's event.
"""

from __future__ import annotations

import dataclasses

import dp_accounting
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from gpope.core.accounting.api import RDP_ORDERS  # the orders only: the epsilon is dp-accounting's
from gpope.core.evaluation import plan as plan_module
from gpope.core.evaluation import plan_loading, plan_release
from gpope.core.evaluation.loading import row_bytes
from gpope.core.evaluation.plan import ReleaseComponent
from gpope.core.spec import EvaluationSpec
from gpope.errors import ConfigError

SPEC = EvaluationSpec.from_mapping({
    "name": "chain_plan", "domain": "chain", "gamma": 0.99, "normalization": "transition",
    "length_scale": 200, "feature_map": {"kind": "tabular", "n_states": 40},
    "target_policy": {"kind": "uniform", "n_actions": 1}, "reference_states": {"s0": [0]},
})
M = 1000
REL = {"add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
       "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE}


@dataclasses.dataclass(frozen=True)
class Settings:
    """The resolved settings a plan reads."""

    epsilon: float = 1.0
    delta: float = 1e-6
    estimator: str = "gpope"
    sampling: str = "poisson"
    accountant: str = "rdp"
    iterations: int = 500
    batch_rate: float | None = 0.02
    clip: float = 1.0
    moments_share: float = 0.1
    statistics_share: float = 0.1
    policy_value_share: float = 0.0
    interval_groups: int | None = 0
    tune: str = "none"
    in_memory_limit_mb: int | None = 2048


def _rdp_epsilon(event, delta: float, relation: str) -> float:
    acc = RdpAccountant(orders=RDP_ORDERS, neighboring_relation=REL[relation])
    return acc.compose(event).get_epsilon(delta)


def _plan(settings=Settings(), *, clip=0.5, layout="dense", **kw):
    return plan_release(settings, m=M, spec=SPEC, layout=layout, statistics_clip=clip, **kw)


def test_gpope_with_statistics_splits_the_budget_and_composes_both_events():
    plan = _plan()
    main, stats = plan.main, plan.statistics
    assert (main.name, stats.name) == ("gpope", "noisy_statistics")
    assert stats.epsilon == pytest.approx(0.1) and main.epsilon == pytest.approx(0.9)
    assert main.delta + stats.delta == pytest.approx(1e-6, rel=1e-12)
    # each component meets its share by dp-accounting's RDP accountant on its own event
    for c in (main, stats):
        got = _rdp_epsilon(c.event, c.delta, plan.relation)
        assert got <= c.epsilon * (1 + 1e-6) and got == pytest.approx(c.epsilon, rel=0.05)
    # the ledger's event is the composition of both, in order
    assert isinstance(plan.event, dp_accounting.ComposedDpEvent)
    assert plan.event.events == [main.event, stats.event]
    assert plan.spent_epsilon == pytest.approx(main.epsilon_spent + stats.epsilon_spent)
    assert plan.charged_epsilon == 1.0 and plan.valid_bound and plan.ledger_note is None
    assert plan.relation == "add_or_remove_one"
    assert set(plan.releases) == {"theta", "values", "intervals", "private_mspbe"}


def test_uniform_sampling_is_replace_one_and_doubles_the_statistics_multiplier():
    poisson = _plan()
    uniform = _plan(Settings(sampling="uniform", batch_rate=None, iterations=50))
    assert uniform.relation == "replace_one"
    # replace-one: sensitivity 2 clip, the same (epsilon, delta) needs twice the multiplier
    assert uniform.statistics.sigma == pytest.approx(2 * poisson.statistics.sigma, rel=1e-12)
    stats = uniform.statistics
    got = _rdp_epsilon(stats.event, stats.delta, "replace_one")
    assert got <= stats.epsilon * (1 + 1e-6) and got == pytest.approx(stats.epsilon, rel=0.05)


def test_ssp_spends_everything_on_one_release_and_no_clip_means_no_statistics():
    ssp = _plan(Settings(estimator="ssp"))
    assert ssp.auxiliary == () and ssp.main.name == "ssp" and ssp.statistics is ssp.main
    assert ssp.main.share == 1.0 and ssp.main.epsilon == ssp.spent_epsilon
    assert 0.97 <= ssp.spent_epsilon <= 1.0
    assert _rdp_epsilon(ssp.event, 1e-6, "add_or_remove_one") == pytest.approx(1.0, rel=0.05)
    bare = _plan(clip=None)
    assert bare.auxiliary == () and bare.statistics is None and bare.main.epsilon == 1.0
    assert bare.event is bare.main.event
    with pytest.raises(ConfigError, match="clip bound"):
        _plan(Settings(estimator="ssp"), clip=None)


def test_ssp_without_a_public_clip_charges_its_private_quantile_in_the_composed_event():
    # own data (no simulator): the clip is a noisy histogram at the default's quantile share,
    # one more component of the run's event; dp-accounting certifies the whole run at epsilon
    from dp_accounting.pld import PLDAccountant

    from gpope.core.untuned.release import UntunedSettings

    plan = _plan(Settings(estimator="ssp"), clip=None, private_clip_quantile=0.9,
                 untuned=UntunedSettings(quantile_share=0.05))
    clip = {c.name: c for c in plan.components}.get("ssp_clip")
    assert plan.private_clip_quantile == 0.9 and plan.statistics_clip is None
    # shares of one Gaussian mechanism's privacy loss mu^2 (joint calibration of a one-shot run)
    assert (clip.share, plan.main.share) == pytest.approx((0.05, 0.95))
    assert plan.main.sigma**-2 + clip.sigma**-2 == pytest.approx(
        plan.main.sigma**-2 / 0.95, rel=1e-9)
    assert plan.statistics is plan.main
    assert "private 0.9 quantile" in plan.label and "clip=private quantile" in plan.main.label
    assert "shares 0.95 and 0.05 of its privacy loss" in plan.label
    assert clip.event == dp_accounting.GaussianDpEvent(clip.sigma)  # sensitivity 1 histogram
    assert plan.event.events == [plan.main.event, clip.event]
    pld = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert pld.compose(plan.event).get_epsilon(1e-6) <= 1.0  # rdp calibrated: PLD is tighter
    assert 0.97 <= _rdp_epsilon(plan.event, 1e-6, "add_or_remove_one") <= 1.0 * (1 + 1e-6)
    assert plan.spent_epsilon <= 1.0
    assert plan.releases[-1] == "ssp_clip"


def test_paper_accountant_is_not_a_valid_bound_and_is_charged_a_rigorous_bound():
    plan = _plan(Settings(accountant="paper", sampling="uniform", batch_rate=None,
                          iterations=50), clip=None)
    assert not plan.valid_bound and "NOT private" in plan.ledger_note
    rigorous = _rdp_epsilon(plan.event, 1e-6, "replace_one")
    assert plan.charged_epsilon >= 1.0
    assert plan.charged_epsilon == pytest.approx(max(1.0, rigorous), rel=0.05)


def test_interval_groups_default_yields_to_streaming_and_an_explicit_k_is_refused():
    s = Settings(interval_groups=3)
    assert _plan(s).interval_groups == 3 and _plan(s).main.label.endswith("interval_groups=3)")
    streamed = _plan(s, layout="stream")
    assert streamed.interval_groups == 0 and "not applied" in streamed.interval_note
    with pytest.raises(ConfigError, match="in_memory_limit_mb"):
        _plan(s, layout="stream", groups_explicit=True)
    assert _plan(Settings(interval_groups=3, estimator="ssp")).interval_groups == 0


def test_private_tuning_needs_memory_and_poisson():
    from gpope.core.tuning.private_settings import PrivateTuningSettings

    tuning = PrivateTuningSettings()
    plan = _plan(Settings(tune="private"), private_tuning=tuning)
    assert plan.main.name == "gpope-tuned" and plan.tuning[0].candidates >= 1
    with pytest.raises(ConfigError, match="in_memory_limit_mb"):
        _plan(Settings(tune="private"), layout="stream", private_tuning=tuning)
    with pytest.raises(ConfigError, match="poisson"):
        _plan(Settings(tune="private", sampling="uniform", batch_rate=None),
              private_tuning=tuning)


def test_a_further_component_takes_its_share_and_joins_the_composed_event(monkeypatch):
    from gpope.core.ssp import ssp_dp_event

    def plan_extra(inputs, share):
        cal = plan_module.gaussian_share(inputs, share)
        return ReleaseComponent(name="extra", **cal, event=ssp_dp_event(cal["sigma"], inputs.relation),
                                label="extra", releases=("extra_value",))

    monkeypatch.setattr(plan_module, "AUXILIARY",
                        (*plan_module.AUXILIARY, ("extra", lambda inputs: 0.2, plan_extra)))
    plan = _plan()
    assert [c.name for c in plan.components] == ["gpope", "noisy_statistics", "extra"]
    assert plan.main.epsilon == pytest.approx(0.7)
    assert {c.name: c for c in plan.components}["extra"].epsilon == 0.2
    assert plan.event.events == [c.event for c in plan.components]
    assert "extra_value" in plan.releases and plan.label.startswith("gpope(clip=1) + noisy")
    assert _rdp_epsilon(plan.event, 1e-6, "add_or_remove_one") <= 1.0 * (1 + 1e-3)


def test_loading_depends_on_public_m_and_n_only():
    n = 40
    fits = (2 * 2**20) // row_bytes(n)  # rows that fit 2 MiB
    assert plan_loading(m=fits, n=n, path="auto", limit_mb=2) == "dense"
    assert plan_loading(m=fits + 1, n=n, path="auto", limit_mb=2) == "stream"
    assert plan_loading(m=fits + 1, n=n, path="memory", limit_mb=2, one_hot=True) == "sparse"
    assert plan_loading(m=fits + 1, n=n, path="memory", limit_mb=2) == "dense"
    assert plan_loading(m=1, n=n, path="stream", limit_mb=2) == "stream"


@pytest.mark.parametrize("estimator", ["gpope", "ssp"])
def test_policy_value_takes_its_share_of_one_composed_event(estimator):
    from scipy.stats import norm

    from gpope.core.policy_value import QUANTITIES

    settings = Settings(estimator=estimator, policy_value_share=0.3, epsilon=1.0, delta=1e-6)
    bounded = dataclasses.replace(SPEC, importance_weight_bound=1.0, reward_bounds=(0.0, 1.0))
    plan = plan_release(settings, m=M, spec=bounded, layout="dense", statistics_clip=0.5)
    pv = {c.name: c for c in plan.components}.get("policy_value")
    assert set(pv.releases) == set(QUANTITIES) <= set(plan.releases)
    assert plan.event.events[-1] == pv.event  # one composed event, the policy value's last
    assert plan.charged_epsilon == 1.0  # no extra budget
    if estimator == "ssp":  # one-shot: 0.3 of one Gaussian mechanism's privacy loss mu^2
        mu2 = [c.sigma**-2 for c in plan.components]
        assert mu2[-1] / sum(mu2) == pytest.approx(0.3) and pv.share == pytest.approx(0.3)
        eps, delta = 1.0, 1e-6
        mu = np.sqrt(sum(mu2))
    else:  # basic composition: its share of (epsilon, delta), no more
        assert pv.epsilon == pytest.approx(0.3) and pv.delta == pytest.approx(0.3e-6)
        assert sum(c.epsilon for c in plan.components) == pytest.approx(1.0)
        mu, eps, delta = 1.0 / pv.event.noise_multiplier, 0.3, pv.delta
    # the exact Gaussian-mechanism curve (Balle and Wang 2018, Thm. 8)
    exact = norm.cdf(mu / 2 - eps / mu) - np.exp(eps) * norm.cdf(-mu / 2 - eps / mu)
    assert exact <= delta * 1.001
    # a spec without the public bounds has no policy value release (a public decision)
    assert {c.name: c for c in _plan(settings).components}.get("policy_value") is None



def _gaussian_delta(mu: float, eps: float) -> float:
    """delta(eps) of the Gaussian mechanism with mu = sensitivity / std (Balle and Wang 2018)."""
    from scipy.stats import norm

    return float(norm.cdf(mu / 2 - eps / mu) - np.exp(eps) * norm.cdf(-mu / 2 - eps / mu))


def _gaussian_mu(eps: float, delta: float) -> float:
    """The largest mu whose Gaussian mechanism meets (eps, delta), by bisection of the curve."""
    from scipy.optimize import brentq

    return float(brentq(lambda mu: _gaussian_delta(mu, eps) - delta, 1e-3, 50.0, xtol=1e-12))


def _leaf_sigmas(event) -> list[float]:
    if isinstance(event, dp_accounting.ComposedDpEvent):
        return [s for e in event.events for s in _leaf_sigmas(e)]
    assert isinstance(event, dp_accounting.GaussianDpEvent)
    return [event.noise_multiplier]


def test_one_shot_default_run_is_calibrated_jointly_and_wastes_nothing():
    # the tuning-free default with its policy value at m = 20,000: every release of the run is a
    # Gaussian mechanism, so their composition is one; dp-accounting's PLD certifies the plan's
    # composed sigmas at the run's delta at most the target and at least 97% of it
    from dp_accounting.pld import PLDAccountant

    from gpope.core.untuned.release import UntunedSettings

    epsilon, delta = 1.0, 1e-6
    bounded = dataclasses.replace(SPEC, importance_weight_bound=1.0, reward_bounds=(0.0, 1.0))
    settings = Settings(estimator="untuned", policy_value_share=0.3, epsilon=epsilon,
                        delta=delta, accountant="auto")
    plan = plan_release(settings, m=20_000, spec=bounded, layout="dense", statistics_clip=None)
    assert [c.name for c in plan.components] == ["untuned", "policy_value"]
    sigmas = _leaf_sigmas(plan.event)
    assert len(sigmas) == 7  # 2 histograms, SSP sums, probe, residual sum and moments, policy value
    pld = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    for s in sigmas:
        pld.compose(dp_accounting.GaussianDpEvent(s))
    got = pld.get_epsilon(delta)
    assert 0.97 * epsilon <= got <= epsilon * (1 + 1e-3)
    assert plan.spent_epsilon <= epsilon and plan.charged_epsilon == epsilon
    assert plan.spent_epsilon == pytest.approx(got, rel=2e-3)
    # the SSP sums: with the shares 5 % per quantile, 35 % refinement and 5 % probe, 0.7 * (1 - 2
    # * 0.05 - 0.35 - 0.05) = 0.35 of the run; basic composition would give them a Gaussian
    # mechanism at (0.35 epsilon, 0.35 delta) (the exact curve), joint calibration 0.35 of its
    # privacy loss
    same_shares = plan_release(settings, m=20_000, spec=bounded, layout="dense",
                               statistics_clip=None,
                               untuned=UntunedSettings(quantile_share=0.05, refine_share=0.35))
    sums = same_shares.untuned_sigmas.statistics
    assert sums == same_shares.main.sigma
    assert sums == pytest.approx(same_shares.untuned_sigmas.total / np.sqrt(0.5))  # of its 0.7
    basic = 1.0 / _gaussian_mu(0.35 * epsilon, 0.35 * delta)
    assert sums * 1.5 <= basic
    assert "one Gaussian mechanism" in plan.label and "basic" not in plan.label


@pytest.mark.parametrize("name", ["gpope", "ssp", "untuned"])
def test_every_built_in_estimator_plans_its_release_within_the_budget(name):
    # the conformance check of an estimator's planning: its component releases theta and the
    # values, the plan's facts follow its registry entry, and dp-accounting's RDP accountant on
    # the composed event (an oracle independent of the plan's arithmetic) stays within epsilon
    from gpope.core.estimators import estimator_names, get

    assert name in estimator_names()
    estimator = get(name)
    bounded = dataclasses.replace(SPEC, importance_weight_bound=1.0, reward_bounds=(0.0, 1.0))
    settings = Settings(estimator=name, policy_value_share=0.2)
    plan = plan_release(settings, m=M, spec=bounded, layout="dense",
                        statistics_clip=0.5 if estimator.public_clip else None)
    assert plan.estimator == name and plan.main.name.startswith(name)
    assert {"theta", "values", "policy_value"} <= set(plan.releases)
    assert plan.relation == "add_or_remove_one"  # one-shot, or Poisson-sampled GPOPE
    assert (plan.statistics is plan.main) == estimator.main_is_statistics
    assert _rdp_epsilon(plan.event, settings.delta, plan.relation) <= settings.epsilon * 1.0001

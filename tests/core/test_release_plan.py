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
    assert ssp.main.epsilon == 1.0
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

    from gpope.core.untuned import UntunedSettings

    plan = _plan(Settings(estimator="ssp"), clip=None, private_clip_quantile=0.9,
                 untuned=UntunedSettings(quantile_share=0.05))
    clip = plan.component("ssp_clip")
    assert plan.private_clip_quantile == 0.9 and plan.statistics_clip is None
    assert (clip.epsilon, clip.delta) == pytest.approx((0.05, 0.05e-6))
    assert plan.main.epsilon == pytest.approx(0.95) and plan.statistics is plan.main
    assert "private 0.9 quantile" in plan.label and "clip=private quantile" in plan.main.label
    assert clip.event == dp_accounting.GaussianDpEvent(clip.sigma)  # sensitivity 1 histogram
    assert plan.event.events == [plan.main.event, clip.event]
    pld = PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert _rdp_epsilon(clip.event, 0.05e-6, "add_or_remove_one") == pytest.approx(0.05, rel=0.05)
    assert pld.compose(clip.event).get_epsilon(0.05e-6) <= 0.05  # rdp calibrated: PLD is tighter
    assert _rdp_epsilon(plan.event, 1e-6, "add_or_remove_one") <= 1.0 * 1.05
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
    from gpope.core.evaluation.settings import PrivateTuningConf

    tuning = PrivateTuningConf().to_core()
    plan = _plan(Settings(tune="private"), private_tuning=tuning)
    assert plan.main.name == "gpope-tuned" and plan.tuning[0].candidates >= 1
    with pytest.raises(ConfigError, match="in_memory_limit_mb"):
        _plan(Settings(tune="private"), layout="stream", private_tuning=tuning)
    with pytest.raises(ConfigError, match="poisson"):
        _plan(Settings(tune="private", sampling="uniform", batch_rate=None),
              private_tuning=tuning)


def test_a_further_component_takes_its_share_and_joins_the_composed_event(monkeypatch):
    from gpope.core.ssp import ssp_dp_event, ssp_sigma

    def plan_extra(inputs, epsilon, delta):
        sigma = ssp_sigma(m=inputs.m, epsilon=epsilon, delta=delta, accountant="rdp",
                          relation=inputs.relation)
        return ReleaseComponent(name="extra", epsilon=epsilon, delta=delta, sigma=sigma,
                                event=ssp_dp_event(sigma, inputs.relation),
                                epsilon_spent=epsilon, label="extra", releases=("extra_value",))

    monkeypatch.setattr(plan_module, "AUXILIARY",
                        (*plan_module.AUXILIARY, ("extra", lambda inputs: 0.2, plan_extra)))
    plan = _plan()
    assert [c.name for c in plan.components] == ["gpope", "noisy_statistics", "extra"]
    assert plan.main.epsilon == pytest.approx(0.7) and plan.component("extra").epsilon == 0.2
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
    pv = plan.component("policy_value")
    assert pv.epsilon == pytest.approx(0.3) and pv.delta == pytest.approx(0.3e-6)
    assert set(pv.releases) == set(QUANTITIES) <= set(plan.releases)
    assert plan.event.events[-1] == pv.event  # one composed event, the policy value's last
    # its share, no more: the exact Gaussian-mechanism curve (Balle and Wang 2018, Thm. 8)
    mu, eps = 1.0 / pv.event.noise_multiplier, 0.3
    exact = norm.cdf(mu / 2 - eps / mu) - np.exp(eps) * norm.cdf(-mu / 2 - eps / mu)
    assert exact <= pv.delta * 1.001
    assert sum(c.epsilon for c in plan.components) == pytest.approx(1.0)
    assert plan.charged_epsilon == 1.0  # no extra budget
    # a spec without the public bounds has no policy value release (a public decision)
    assert _plan(settings).component("policy_value") is None


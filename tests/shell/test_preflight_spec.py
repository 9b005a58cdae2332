"""The spec-against-dataset checks a stage runs before Spark starts (no Spark here)."""

from __future__ import annotations

import pytest

from gpope.config import load_config
from gpope.core.spec import EvaluationSpec
from gpope.errors import ConfigError, TableNotFoundError
from gpope.shell.preflight import check_stage


def _spec(n_actions: int) -> EvaluationSpec:
    return EvaluationSpec.from_mapping({
        "name": "ward_protocol", "gamma": 0.9, "normalization": "transition", "length_scale": 10,
        "feature_map": {"kind": "tabular", "n_states": 3},
        "target_policy": {"kind": "tabular", "probs": [[1.0 / n_actions] * n_actions] * 3},
        "reference_states": {"s0": [0], "s2": [2]},
    })


def test_a_target_policy_over_other_actions_than_the_dataset_is_refused_before_spark(tmp_path):
    config = load_config(None, lake={"root": str(tmp_path / "lake")}, datasets={
        "ward": {"variables": ["acuity"], "actions": ["observe", "medicate", "icu"]}})
    with pytest.raises(ConfigError, match=r"2 action\(s\), but dataset 'ward' declares 3 .*"
                                          r"\(observe, medicate, icu\)"):
        check_stage(config, "stats", "ward", _spec(2))
    # the right count passes this check and reaches the next one (no transitions yet)
    with pytest.raises(TableNotFoundError, match="silver"):
        check_stage(config, "stats", "ward", _spec(3))
    # a dataset the conf does not describe (a simulated cohort) is not checked here
    with pytest.raises(TableNotFoundError):
        check_stage(config, "stats", "other", _spec(2))


def _continuous_spec(q_low: list[float]) -> EvaluationSpec:
    q_map = {"kind": "constant_identity", "low": q_low, "high": [v + 1.0 for v in q_low]}
    return EvaluationSpec.from_mapping({
        "name": "icu_protocol", "gamma": 0.95, "normalization": "transition", "length_scale": 30,
        "feature_map": {"kind": "fourier", "order": 2, "low": [0.5, 40.0], "high": [10.0, 110.0],
                        "max_coupling": 1},
        "target_policy": {"kind": "softmax", "temperature": 1.0, "q": {
            "kind": "linear_q", "weights": [[0.0] * (len(q_low) + 1)] * 2, "feature_map": q_map}},
        "reference_states": {"shock": [6.0, 52.0]},
    })


@pytest.mark.parametrize(("variables", "indicators", "q_low", "where"), [
    (["lactate", "map", "heart_rate"], False, [0.5, 40.0], "feature_map"),
    (["lactate", "map"], True, [0.5, 40.0], "feature_map"),
    (["lactate", "map"], False, [0.5], "target_policy.q.feature_map"),
])
def test_feature_ranges_for_another_state_width_than_the_dataset_are_refused_before_spark(
        tmp_path, variables, indicators, q_low, where):
    config = load_config(None, lake={"root": str(tmp_path / "lake")}, datasets={
        "icu": {"variables": variables, "actions": ["none", "fluids"],
                "missing_indicators": indicators}})
    with pytest.raises(ConfigError, match=rf"its {where} has public ranges for \d state column"):
        check_stage(config, "stats", "icu", _continuous_spec(q_low))


def test_feature_ranges_for_the_dataset_state_width_pass():
    config = load_config(None, datasets={"icu": {"variables": ["lactate", "map"],
                                                 "actions": ["none", "fluids"]}})
    with pytest.raises(TableNotFoundError, match="silver"):  # the next check: no transitions yet
        check_stage(config, "stats", "icu", _continuous_spec([0.5, 40.0]))

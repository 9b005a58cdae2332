"""EvaluationSpec: parsing, validation, a stable id, and values at reference states."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from gpope.core.features import FourierFeatures, TabularFeatures
from gpope.core.policies import FixedActionPolicy, UniformPolicy
from gpope.core.spec import EvaluationSpec
from gpope.errors import ConfigError

SPECS = Path(__file__).resolve().parents[2] / "conf" / "specs"


def _mapping(**overrides):
    d = {
        "name": "t",
        "gamma": 0.9,
        "normalization": "transition",
        "length_scale": 10,
        "feature_map": {"kind": "tabular", "n_states": 4},
        "target_policy": {"kind": "uniform", "n_actions": 2},
        "reference_states": {"a": [0], "b": [3]},
    }
    d.update(overrides)
    return d


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_parse_and_round_trip(path):
    spec = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text()), where=str(path))
    again = EvaluationSpec.from_mapping(spec.to_dict())
    assert again == spec
    assert again.spec_id == spec.spec_id
    assert len(spec.reference_states) >= 2


def test_spec_id_is_sha256_of_canonical_statistics_key():
    spec = EvaluationSpec.from_mapping(_mapping())
    key = {
        "feature_map": {"kind": "tabular", "n_states": 4},
        "target_policy": {"kind": "uniform", "n_actions": 2},
        "gamma": 0.9,
        "normalization": "transition",
        "length_scale": 10.0,
        "reward_scale": 1.0,
    }
    text = json.dumps(key, sort_keys=True, separators=(",", ":"))
    assert spec.spec_id == hashlib.sha256(text.encode()).hexdigest()[:12]


def test_spec_id_ignores_name_and_references_but_not_statistics_inputs():
    base = EvaluationSpec.from_mapping(_mapping())
    assert EvaluationSpec.from_mapping(_mapping(name="other", reference_states={"z": [1]})).spec_id == base.spec_id
    for change in ({"gamma": 0.95}, {"length_scale": 20}, {"reward_scale": 0.5},
                   {"target_policy": {"kind": "fixed_action", "n_actions": 2, "action": 1}},
                   {"normalization": "trajectory_mean"}):
        assert EvaluationSpec.from_mapping(_mapping(**change)).spec_id != base.spec_id, change


def test_reference_values_are_theta_dot_phi_over_reward_scale():
    fm = FourierFeatures(2, (0.0, -1.0), (1.0, 1.0))
    spec = EvaluationSpec(
        name="f", feature_map=fm, target_policy=UniformPolicy(2), gamma=0.5, length_scale=5.0,
        reward_scale=0.01, reference_states=(("p", (0.25, 0.0)), ("q", (1.0, 1.0))),
    )
    theta = np.arange(fm.n_features, dtype=float)
    states = np.array([[0.25, 0.0], [1.0, 1.0]])
    x = np.clip((states - [0.0, -1.0]) / [1.0, 2.0], 0, 1)
    phi = np.cos(np.pi * x @ fm.coefficients.T)  # independent: the basis formula itself
    np.testing.assert_allclose(spec.reference_values(theta), phi @ theta / 0.01, rtol=1e-12)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gamma": 1.5}, "gamma"),
        ({"length_scale": None}, "length_scale"),
        ({"normalization": "sum"}, "normalization"),
        ({"reward_scale": 0}, "reward_scale"),
        ({"reference_states": {"a": [0], "b": [0, 1]}}, "same dimension"),
        ({"reference_states": {"a": "x"}}, "reference_states"),
        ({"feature_map": {"kind": "rbf"}}, "kind"),
        ({"target_policy": 3}, "target_policy"),
        ({"colour": "red"}, "Unknown key"),
    ],
)
def test_invalid_specs_raise_config_error_naming_the_problem(change, message):
    with pytest.raises(ConfigError, match=message):
        EvaluationSpec.from_mapping(_mapping(**change))


def test_missing_required_key():
    d = _mapping()
    del d["gamma"]
    with pytest.raises(ConfigError, match="gamma"):
        EvaluationSpec.from_mapping(d)


def test_trajectory_mean_needs_no_length_scale():
    spec = EvaluationSpec(name="m", feature_map=TabularFeatures(3), target_policy=FixedActionPolicy(0, 1),
                          gamma=0.9, normalization="trajectory_mean")
    assert spec.length_scale is None
    assert spec.reference_values(np.ones(3)).shape == (0,)


def test_public_data_bounds_validate_and_define_the_statistics():
    base = EvaluationSpec.from_mapping(_mapping())
    bounded = EvaluationSpec.from_mapping(_mapping(importance_weight_bound=5,
                                                   reward_bounds=[-1, 2]))
    assert bounded.importance_weight_bound == 5.0 and bounded.reward_bounds == (-1.0, 2.0)
    assert bounded.spec_id != base.spec_id  # the bounds change the statistics
    assert "importance_weight_bound" not in base.statistics_key()  # unbounded ids unchanged
    assert EvaluationSpec.from_mapping(bounded.to_dict()) == bounded
    with pytest.raises(ConfigError, match=r"'importance_weight_bound' parameter .* > 0"):
        EvaluationSpec.from_mapping(_mapping(importance_weight_bound=0))
    with pytest.raises(ConfigError, match=r"'reward_bounds' parameter .* low < high.*'1e9'"):
        EvaluationSpec.from_mapping(_mapping(reward_bounds=[0, "1e9"]))
    with pytest.raises(ConfigError, match=r"'reward_bounds'"):
        EvaluationSpec.from_mapping(_mapping(reward_bounds=[2, 1]))


def test_a_return_bound_is_public_validated_and_leaves_the_statistics_alone():
    bounded = EvaluationSpec.from_mapping(_mapping(importance_weight_bound=5,
                                                   reward_bounds=[-1, 1]))
    outcome = EvaluationSpec.from_mapping(_mapping(importance_weight_bound=5,
                                                   reward_bounds=[-1, 1], return_bounds=[-1, 1]))
    assert outcome.return_bounds == (-1.0, 1.0)
    assert outcome.spec_id == bounded.spec_id  # the statistics do not depend on it
    assert EvaluationSpec.from_mapping(outcome.to_dict()) == outcome
    assert "return_bounds" not in bounded.to_dict()
    with pytest.raises(ConfigError, match=r"'return_bounds' parameter .* low <= 0 <= high"):
        EvaluationSpec.from_mapping(_mapping(reward_bounds=[-1, 1], return_bounds=[0.5, 1]))
    with pytest.raises(ConfigError, match=r"'return_bounds' without 'reward_bounds'"):
        EvaluationSpec.from_mapping(_mapping(return_bounds=[-1, 1]))


def test_clamp_to_public_bounds_counts_every_changed_value():
    from gpope.core.bounds import clamp_to_public_bounds

    rho = np.array([0.5, 1e307, np.inf, np.nan, 3.0])
    reward = np.array([0.0, -5.0, 1e300, np.nan, -np.inf])
    r2, w2, counts = clamp_to_public_bounds(rho, reward, importance_weight_bound=3.0,
                                            reward_bounds=(-1.0, 1.0))
    np.testing.assert_array_equal(r2, [0.5, 3.0, 3.0, 0.0, 3.0])
    np.testing.assert_array_equal(w2, [0.0, -1.0, 1.0, 0.0, -1.0])
    assert counts == {"importance_weight_above_bound": 3, "reward_outside_bounds": 4}
    same = clamp_to_public_bounds(rho, reward, importance_weight_bound=None, reward_bounds=None)
    assert same[0] is not None and np.isnan(same[0][3]) and same[2]["reward_outside_bounds"] == 0


@pytest.mark.parametrize("rows", [3, 5])
def test_tabular_target_policy_needs_one_row_per_tabular_state(rows):
    probs = [[0.5, 0.5]] * rows
    with pytest.raises(ConfigError, match=rf"{rows} row\(s\) but the feature map has n_states 4"):
        EvaluationSpec.from_mapping(_mapping(target_policy={"kind": "tabular", "probs": probs}))
    spec = EvaluationSpec.from_mapping(_mapping(target_policy={"kind": "tabular",
                                                               "probs": [[0.5, 0.5]] * 4}))
    assert spec.target_policy.probs.shape == (4, 2)


def test_a_reference_state_outside_the_feature_ranges_is_refused():
    # the map clips states to its public ranges: V at (lactate 12, MAP 45) would be V at (10, 45)
    mapping = {"name": "icu", "gamma": 0.95, "normalization": "transition", "length_scale": 30,
               "feature_map": {"kind": "fourier", "order": 2, "low": [0.5, 40.0],
                               "high": [10.0, 110.0], "max_coupling": 1},
               "target_policy": {"kind": "uniform", "n_actions": 3},
               "reference_states": {"edge": [10.0, 40.0], "beyond": [12.0, 45.0]}}
    with pytest.raises(ConfigError, match=r"Reference state\(s\) 'beyond' of spec 'icu' lie "
                                          r"outside the feature map's public ranges"):
        EvaluationSpec.from_mapping(mapping)
    mapping["reference_states"].pop("beyond")
    assert EvaluationSpec.from_mapping(mapping).reference_names == ("edge",)

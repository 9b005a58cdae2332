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

"""Configuration: strict parsing, clear errors, and conf/default.yaml equal to the defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpope.config import GpopeConfig, from_mapping, load_config, load_yaml, to_mapping
from gpope.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_defaults_equal_conf_default_yaml():
    """conf/default.yaml spells out exactly the built-in defaults (no drift)."""
    assert load_config(ROOT / "conf" / "default.yaml") == load_config()


def test_round_trip_through_mapping():
    cfg = load_config(lake={"root": "/tmp/x"}, spark={"master": "local[2]"})
    assert from_mapping(GpopeConfig, to_mapping(cfg)) == cfg
    assert cfg.lake.root == "/tmp/x" and cfg.spark.master == "local[2]"


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"spark": {"shuffle_partitions": 0}}, "'shuffle_partitions' parameter of SparkSettings must be >= 1. Got 0"),
        ({"spark": {"shuffle_partitions": "many"}}, "config.spark.shuffle_partitions must be an integer. Got 'many'"),
        ({"spark": {"mastr": "local"}}, "Unknown key(s) 'mastr' in config.spark; valid keys: master"),
        ({"lake": {"storage": "s3"}}, "config.lake.storage must be one of 'auto', 'native', 'delta-rs'. Got 's3'"),
        ({"lake": {"catalog": "main"}}, "needs both 'catalog' and 'schema'"),
        ({"spark": {"ui": "yes"}}, "config.spark.ui must be true or false. Got 'yes'"),
    ],
)
def test_errors_name_key_constraint_and_value(override, needle):
    with pytest.raises(ConfigError) as info:
        load_config(**override)
    assert needle in str(info.value)


def test_unknown_section_and_bad_files(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("sparkk: {}\n")
    with pytest.raises(ConfigError, match="Unknown key\\(s\\) 'sparkk'"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "missing.yaml")
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_yaml(listy)


def test_binary_or_broken_yaml_files_are_one_line_config_errors(tmp_path):
    """Issue 13.6: a binary spec/conf file gives a cause, not a UnicodeDecodeError traceback."""
    from gpope.config import load_yaml

    binary = tmp_path / "spec.yaml"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with pytest.raises(ConfigError, match=r"not UTF-8 text.*binary"):
        load_yaml(binary)
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1,\n  b")
    with pytest.raises(ConfigError, match="not valid YAML") as err:
        load_yaml(broken)
    assert "\n" not in str(err.value)


def test_the_policy_value_benchmark_releases_with_the_resolved_conf(tmp_path):
    """benchmarks/policy_value_coverage.py measures the settings `gpope evaluate` releases with:
    the resolved conf's evaluation.policy_value (share: policy_value_share), a --conf file over
    it, and --settings changes on top; no copy of the defaults in the benchmark."""
    import importlib.util

    from gpope.core.policy_value_settings import PolicyValueSettings

    path = ROOT / "benchmarks" / "policy_value_coverage.py"
    module_spec = importlib.util.spec_from_file_location("policy_value_coverage", path)
    bench = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(bench)
    assert bench.conf_settings(None) == load_config().evaluation.policy_value_settings()
    conf = tmp_path / "conf.yaml"
    conf.write_text("evaluation:\n  policy_value_share: 0.2\n"
                    "  policy_value: {bins_per_decade: 8, method: normal}\n")
    got = bench.conf_settings(str(conf), {"noise_share": 0.3})
    assert got == PolicyValueSettings(share=0.2, bins_per_decade=8, method="normal",
                                      noise_share=0.3)
    assert "PolicyValueSettings(" not in path.read_text()  # no defaults spelled in code


def test_the_behaviour_estimate_rules_come_from_the_conf_and_reach_the_plan(tmp_path):
    """evaluation.behaviour is the one place the estimate's rules are set: the route's rules
    for a state-action spec on a tabular map are the conf's, and the plan's behaviour component
    takes its share of the privacy loss from them (share + quantile_share of mu^2)."""
    import dataclasses

    from gpope.core.envs.registry import random_mdp_of
    from gpope.core.evaluation import plan_loading, plan_release
    from gpope.core.spec import EvaluationSpec
    from gpope.core.state_action import behaviour_rules, state_action_spec

    conf = tmp_path / "conf.yaml"
    conf.write_text("evaluation:\n  behaviour: {share: 0.25, clip_quantile: 0.8}\n")
    settings = load_config(conf).evaluation
    assert (settings.behaviour.share, settings.behaviour.clip_quantile) == (0.25, 0.8)
    spec = state_action_spec(EvaluationSpec.from_mapping(random_mdp_of("random_mdp/4")
                                                         .spec_mapping("rm4")))
    run = dataclasses.replace(settings, estimator="untuned", interval_groups=0, epsilon=1.0,
                              delta=1e-6, policy_value_share=0.0)
    rules = behaviour_rules(spec, run)
    assert rules is settings.behaviour
    layout = plan_loading(m=5000, n=spec.n_features, path="auto", limit_mb=2048)
    plan = plan_release(run, m=5000, spec=spec, layout=layout, statistics_clip=None,
                        untuned=run.untuned, behaviour=rules)
    assert {c.name: c for c in plan.components}.get("behaviour").share == pytest.approx(0.25 + 0.02)
    with pytest.raises(ConfigError, match="behaviour"):
        from_mapping(GpopeConfig, {"evaluation": {"behaviour": {"shares": 0.2}}})

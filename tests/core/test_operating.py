"""The operating point: budget rule, setting layers, the tuned-point rule, the spec block."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpope.core.evaluation.settings import SettingsLayer
from gpope.core.gpope.operating import (
    interval_groups_for,
    merge_layers,
    resolve_budget,
    resolve_step_offset,
)
from gpope.core.guard import utility_guard
from gpope.core.spec import EvaluationSpec
from gpope.errors import ConfigError

SPEC = {
    "name": "chain", "domain": "chain", "gamma": 0.99, "normalization": "transition",
    "length_scale": 200, "feature_map": {"kind": "tabular", "n_states": 40},
    "target_policy": {"kind": "uniform", "n_actions": 1}, "reference_states": {"s0": [0]},
}
BLOCK = {
    "sampling": "poisson", "passes": 20, "iterations": 20000, "step_schedule": "inverse",
    "step_offset_fraction": 0.1, "averaging": "tail",
    "tuned": [{"epsilon": 0.1, "clip": 1e-3, "step_size": 1e5},
              {"epsilon": 1.0, "clip": 2e-3, "step_size": 3e5},
              {"epsilon": 10.0, "clip": 5e-3, "step_size": 1e6}],
    "tuning": {"patients": 10000, "public_seed": 7},
}


@given(m=st.integers(1, 10**7), passes=st.floats(0.01, 1000), n=st.integers(1, 10**6))
@example(m=9999999, passes=282.06564640684576, n=1)  # a genuine 0.0028 of a step past an integer
@example(m=499999, passes=39.0, n=1)  # an integer P m that the division rounds above
@settings(max_examples=200, deadline=None)
def test_budget_touches_passes_times_m(m, passes, n):
    # Poisson with (passes, iterations): q = P / N (capped at 1), touched N q m = P m when q < 1.
    N, q = resolve_budget(m=m, sampling="poisson", passes=passes, iterations=n,
                          batch_rate=None, batch_size=None)
    assert N == n and q == pytest.approx(min(1.0, passes / n))
    if passes <= n:
        assert N * q * m == pytest.approx(passes * m)
    # (passes, batch_size): N = ceil(P / q) steps of expected batch B
    N2, q2 = resolve_budget(m=m, sampling="poisson", passes=passes, iterations=None,
                            batch_rate=None, batch_size=1.0)
    assert q2 == pytest.approx(1.0 / m) and N2 == math.ceil(passes * m - 1e-9)


def test_budget_uniform_and_errors():
    assert resolve_budget(m=1000, sampling="uniform", passes=2.5, iterations=None,
                          batch_rate=None, batch_size=None) == (2500, None)
    assert resolve_budget(m=1000, sampling="uniform", passes=None, iterations=20000,
                          batch_rate=None, batch_size=None) == (20000, None)
    with pytest.raises(ConfigError, match="budget is not set"):
        resolve_budget(m=10, sampling="poisson", passes=None, iterations=None, batch_rate=None,
                       batch_size=None)
    with pytest.raises(ConfigError, match="only to sampling 'poisson'"):
        resolve_budget(m=10, sampling="uniform", passes=1, iterations=None, batch_rate=0.1,
                       batch_size=None)
    with pytest.raises(ConfigError, match="does not fix the Poisson batch"):
        resolve_budget(m=10, sampling="poisson", passes=1, iterations=None, batch_rate=None,
                       batch_size=None)
    assert resolve_step_offset(iterations=500, step_offset=None, step_offset_fraction=0.1) == 50
    assert resolve_step_offset(iterations=500, step_offset=3.0, step_offset_fraction=None) == 3


def test_layers_first_wins_and_budget_stays_consistent():
    cli = {"iterations": 5000, "clip": None}
    spec = {"passes": 20, "iterations": 20000, "clip": 0.01, "step_offset_fraction": 0.1}
    conf = {"passes": 10, "iterations": 100, "batch_rate": 0.5, "clip": 1.0,
            "step_offset": 1.0, "sampling": "poisson"}
    out = merge_layers(cli, spec, conf)
    # N from the command line, passes from the spec (q = 20 / 5000); conf's budget is not used
    assert out["iterations"] == 5000 and out["passes"] == 20 and "batch_rate" not in out
    assert out["clip"] == 0.01 and out["sampling"] == "poisson"
    assert out["step_offset_fraction"] == 0.1 and "step_offset" not in out
    # a command-line batch rate with the spec's (passes, iterations): the rate and the first
    # compatible key (passes) form the budget
    out = merge_layers({"batch_rate": 0.01}, spec, conf)
    assert {k for k in out if k in ("passes", "iterations", "batch_rate", "batch_size")} == {
        "batch_rate", "passes"}
    # the paper's configuration from the command line: uniform with N, no batch keys survive
    out = merge_layers({"sampling": "uniform", "iterations": 20000, "step_offset": 1.0},
                       spec, conf)
    assert out["step_offset"] == 1.0 and "step_offset_fraction" not in out


def test_block_round_trip_and_validation():
    block = SettingsLayer.from_spec_block(BLOCK)
    assert SettingsLayer.from_spec_block(block.to_dict()) == block
    assert [p.epsilon for p in block.tuned] == [0.1, 1.0, 10.0]
    with pytest.raises(ConfigError, match="over-determines the budget"):
        SettingsLayer.from_spec_block({**BLOCK, "batch_rate": 0.01})
    with pytest.raises(ConfigError, match="Unknown key"):
        SettingsLayer.from_spec_block({**BLOCK, "clipp": 1})
    with pytest.raises(ConfigError, match=r"tuning\.patients"):
        SettingsLayer.from_spec_block({**BLOCK, "tuning": {}})
    with pytest.raises(ConfigError, match="epsilon, clip and step_size"):
        SettingsLayer.from_spec_block({**BLOCK, "tuned": [{"epsilon": 1.0}]})


INTERVALS = {"ssp_clip_quantile": 0.5, "interval_groups": 3, "interval_groups_min_patients": 50000,
             "interval_groups_min_m_epsilon": 50000.0,
             "intervals_provenance": {"interval_groups": "a public study"}}


def test_block_interval_settings_round_trip_and_validation():
    block = SettingsLayer.from_spec_block({**BLOCK, **INTERVALS})
    assert SettingsLayer.from_spec_block(block.to_dict()) == block
    assert block.interval_settings() == {k: v for k, v in INTERVALS.items()
                                         if k != "intervals_provenance"}
    assert SettingsLayer.from_spec_block(BLOCK).interval_settings() == {}  # nothing set: no keys
    for bad, match in [({"ssp_clip_quantile": 1.5}, "ssp_clip_quantile"),
                       ({"ssp_clip_quantile": 0.0}, "ssp_clip_quantile"),
                       ({"interval_groups": 1}, "interval_groups"),
                       ({"interval_groups": -2}, "interval_groups"),
                       ({"interval_groups_min_patients": -1}, "interval_groups_min_patients"),
                       ({"interval_groups_min_m_epsilon": -1.0}, "interval_groups_min_m_epsilon"),
                       ({"interval_groups": None}, "but not 'interval_groups'"),
                       ({"intervals_provenance": "study"}, "intervals_provenance")]:
        with pytest.raises(ConfigError, match=match):
            SettingsLayer.from_spec_block({**BLOCK, **INTERVALS, **bad})


@pytest.mark.parametrize(("m", "epsilon", "k", "why"), [
    (50000, 1.0, 3, None),                              # the smallest measured valid point
    (100000, 1.0, 3, None),
    (100000, 0.1, 0, "m epsilon = 1e+04 < interval_groups_min_m_epsilon"),  # 10x the noise
    (10000, 10.0, 0, "m = 10000 < interval_groups_min_patients = 50000"),   # small groups
    (10000, 0.1, 0, "m = 10000 < interval_groups_min_patients = 50000; m epsilon"),
])
def test_interval_groups_apply_only_where_public_m_and_m_epsilon_reach_the_thresholds(
        m, epsilon, k, why):
    got, note = interval_groups_for(3, m=m, epsilon=epsilon, min_patients=50000,
                                    min_m_epsilon=50000.0)
    assert got == k
    assert (note is None) if why is None else (why in note and "hull" in note)
    assert interval_groups_for(3, m=10, epsilon=0.01) == (3, None)  # no thresholds: always
    assert interval_groups_for(0, m=10**6, epsilon=10.0, min_patients=1) == (0, None)


@pytest.mark.parametrize(("m", "epsilon", "expected"), [
    (10000, 1.0, 1.0),      # the tuned cohort's own (m, epsilon)
    (100000, 0.1, 1.0),     # m epsilon = 1e4 = m_pub * 1
    (100000, 1.0, 10.0),    # 1e5 = m_pub * 10
    (1000, 1.0, 0.1),       # 1e3 = m_pub * 0.1
    (3000, 0.01, 0.1),      # far below every point: the smallest
])
def test_select_uses_the_point_nearest_in_m_epsilon(m, epsilon, expected):
    block = SettingsLayer.from_spec_block(BLOCK)
    settings_, point = block.select(m, epsilon)
    assert point.epsilon == expected
    assert settings_["clip"] == point.clip and settings_["step_size"] == point.step_size
    assert settings_["passes"] == 20 and settings_["iterations"] == 20000


def test_spec_carries_the_block_outside_its_id():
    plain = EvaluationSpec.from_mapping(SPEC)
    tuned = EvaluationSpec.from_mapping({**SPEC, "evaluation": BLOCK})
    assert tuned.spec_id == plain.spec_id  # the block does not change the statistics
    assert tuned.evaluation == SettingsLayer.from_spec_block(BLOCK)
    assert EvaluationSpec.from_mapping(tuned.to_dict()) == tuned
    with pytest.raises(ConfigError, match=r"spec\.evaluation"):
        EvaluationSpec.from_mapping({**SPEC, "evaluation": {"passes": -1}})


def test_guard_verdicts():
    assert utility_guard({}).verdict == "unknown"
    assert "nothing in this run can check" in utility_guard({}).message  # said, not silent
    assert utility_guard({"public": None}).verdict == "unknown"
    ok = utility_guard({"public": 0.2, "private": 0.9})
    assert ok.verdict == "ok" and not ok.no_better_than_zero and ok.message == ""
    for bad in ({"public": 1.0}, {"public": 0.1, "private": 3.0}, {"private": math.nan},
                {"public": math.inf}):
        g = utility_guard(bad)
        assert g.no_better_than_zero and g.verdict == "no_better_than_zero"
        # the words say what is checked (the MSPBE against theta = 0's), and the default advice
        # names no command that needs a simulator
        assert "projected Bellman error (MSPBE) is NOT BELOW that of theta = 0" in g.message
        assert "gpope tune" not in g.message
    assert utility_guard({"public": 1.0}, remedy="do X").message.endswith("; do X.")


def test_public_tuning_picks_the_best_candidate_and_grids_reach_the_scale():
    # A small public chain cohort: the tuner's grid is centred on the cohort's own scales, the
    # winner per epsilon is the best scored candidate, and it improves on theta = 0.
    import numpy as np

    from gpope.core.envs import chain as chain_env
    from gpope.core.statistics import statistics_from_transitions
    from gpope.core.tuning.public import tune_operating_point

    cfg = chain_env.ChainConfig(n_states=6)
    tr = chain_env.generate(400, np.random.default_rng(3), cfg)
    stats = statistics_from_transitions(tr, chain_env.feature_map(cfg), np.ones(tr.n_transitions),
                                        gamma=cfg.gamma, length_scale=50.0,
                                        representation="tabular")
    pop = stats.population()
    res = tune_operating_point(
        stats, pop, settings={"passes": 5.0, "iterations": 300, "step_schedule": "inverse",
                              "step_offset_fraction": 0.1, "averaging": "tail"},
        epsilons=(1.0,), delta=1e-5, trials=1, rng=np.random.default_rng(0))
    (point,) = res.points
    rows = [r for r in res.rows if r["epsilon"] == 1.0]
    assert point.score == min(r["score"] for r in rows) < 1.0
    assert res.gradient_scale > 0 and {r["clip"] for r in rows} >= {point.clip}
    steps = sorted({r["step_size"] for r in rows if r["clip"] == point.clip})
    assert steps[0] < point.step_size < steps[-1]  # the optimum is inside the tried range
    # here the best clip of the automatic grid (gradient scale x {1, 3, 10, 30}) is its lower
    # edge: the grid was extended below it until the optimum lay inside
    clips = sorted({r["clip"] for r in rows})
    assert clips[0] < res.gradient_scale * 0.99 and clips[0] < point.clip < clips[-1]


_SPECS = sorted((Path(__file__).resolve().parents[2] / "conf" / "specs").glob("*.yaml"))


@pytest.mark.parametrize("path", _SPECS, ids=lambda p: p.name)
def test_shipped_specs_carry_a_publicly_tuned_block(path):
    import yaml

    spec = EvaluationSpec.from_mapping(yaml.safe_load(path.read_text()), where=str(path))
    block = spec.evaluation
    assert block is not None and block.tuned, path
    t = block.tuning
    assert {"public_seed", "patients", "clip_grid", "step_grid", "command"} <= set(t), path
    assert t["command"].startswith(f"gpope tune --spec conf/specs/{path.name}")
    for p in block.tuned:  # the winners lie on the recorded grids (their own run's, if kept)
        kept = [k for k in t.get("kept", []) if k["epsilon"] == p.epsilon]
        grid = kept[0] if kept else t
        assert p.clip in grid["clip_grid"] and p.step_size in grid["step_grid"], path


def test_outside_tuned_names_the_range_and_the_episode_cap():
    from gpope.core.gpope.operating import TunedPoint

    block = SettingsLayer({}, "spec", tuned=(TunedPoint(epsilon=0.5, clip=1.0, step_size=1.0),
                                             TunedPoint(epsilon=2.0, clip=1.0, step_size=1.0)),
                          tuning={"patients": 2000, "max_length": 40})
    # tuned m*epsilon range: 2000*0.5 = 1000 .. 2000*2 = 4000, tolerance factor 2
    assert block.outside_tuned(2000, 1.0, max_length=40) is None
    assert block.outside_tuned(1000, 0.5, max_length=40) is None  # 500 = 1000 / 2: edge inside
    low = block.outside_tuned(200, 1.0)  # the demo --patients 200: m*eps = 200
    assert low is not None and "200 is outside the tuned range 1e+03..4e+03" in low
    assert block.outside_tuned(100_000, 1.0) is not None  # far above
    steps = block.outside_tuned(2000, 1.0, max_length=20)
    assert steps is not None and "at most 20 decisions, tuned on 40" in steps
    assert SettingsLayer({}, "spec", tuning={"patients": 10}).outside_tuned(1, 1.0) is None

"""Simulate: synthetic cohorts as bronze tables, read back exactly by ingest."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import simulate_tables

from gpope.config import GpopeConfig, LakeSettings
from gpope.errors import ConfigError
from gpope.shell.pipeline.simulate import (
    SimulateOptions,
    dataset_settings_for_domain,
    generate_episodes,
)

GPOPE = [sys.executable, "-c", "import sys; from gpope.cli import main; sys.exit(main())"]


@pytest.mark.parametrize(
    ("domain", "variables", "actions", "terminal", "max_length"),
    [
        ("chain", ("stage",), ("observe",), "absorbed", 1000),
        ("mountaincar", ("position", "velocity"), ("left", "none", "right"), "goal_reached", 200),
        ("hiv", ("cd4_t_cells", "macrophages", "infected_cd4", "infected_macrophages",
                 "viral_load", "immune_effectors"), ("none", "rti", "pi", "rti_pi"), None, 200),
    ],
)  # fmt: skip
def test_dataset_settings_follow_the_domain_spec(domain, variables, actions, terminal, max_length):
    settings = dataset_settings_for_domain(domain)
    assert settings.variables == variables and settings.actions == actions
    assert settings.terminal_variable == terminal and settings.max_length == max_length
    assert settings.domain == domain and settings.defaults == {}


def test_unknown_domain_and_bad_options_are_config_errors():
    with pytest.raises(ConfigError, match="'domain' parameter must be one of"):
        dataset_settings_for_domain("pong")
    with pytest.raises(ConfigError, match="'jitter' parameter of SimulateOptions"):
        SimulateOptions(jitter=0.7)
    with pytest.raises(ConfigError, match="'patients'"):
        generate_episodes("chain", 0, np.random.default_rng(0))


def test_batches_concatenate_into_dense_trajectories_deterministically():
    rng = np.random.default_rng
    batched = generate_episodes("chain", 5, rng(1), batch_size=2, n_steps=50)
    assert batched.n_trajectories == 5
    assert np.array_equal(np.unique(batched.traj_index), np.arange(5))
    again = generate_episodes("chain", 5, rng(1), batch_size=2, n_steps=50)
    assert np.array_equal(batched.state, again.state) and np.array_equal(batched.t, again.t)
    a, tables_a = simulate_tables("mountaincar", 2, 7, SimulateOptions(n_steps=20, jitter=0.2))
    b, tables_b = simulate_tables("mountaincar", 2, 7, SimulateOptions(n_steps=20))
    # the episodes of a seed do not depend on the recording options; the timestamps do
    assert np.array_equal(a.state, b.state) and np.array_equal(a.behavior_prob, b.behavior_prob)
    assert not np.array_equal(tables_a["treatments"]["time"], tables_b["treatments"]["time"])
    assert np.all((a.behavior_prob > 0) & (a.behavior_prob <= 1)) and np.any(a.behavior_prob < 1)


@pytest.mark.spark
def test_hiv_cohort_round_trips_through_bronze_and_ingest(spark, lake_root):
    from gpope.core.envs import hiv
    from gpope.core.policies import LinearQ, SoftmaxPolicy
    from gpope.shell import lake
    from gpope.shell.lake import TableRef
    from gpope.shell.pipeline.ingest import run_ingest
    from gpope.shell.pipeline.simulate import run_simulate

    features = hiv.hiv_feature_map()
    weights = np.random.default_rng(5).normal(size=(4, features.n_features))
    behaviour = SoftmaxPolicy(LinearQ(weights, features), 1.0)  # any stochastic policy will do
    config = GpopeConfig(lake=LakeSettings(root=str(lake_root)))
    options = SimulateOptions(n_steps=6)
    kw = {"domain": "hiv", "options": options, "policy": behaviour}
    # a first, larger cohort that the second run must replace (not append to)
    run_simulate(spark, config, "hiv_rt", patients=4, seed=1, **kw)
    report = run_simulate(spark, config, "hiv_rt", patients=3, seed=0, **kw)
    assert report.rows == {"observations": (18 + 3) * 6, "treatments": 18, "outcomes": 18}
    treatments = TableRef("bronze", "treatments", "hiv_rt")
    lk = lake.Lake.from_settings(spark, config.lake)
    assert lk.read(treatments).count() == 18 and lk.version(treatments) == 1

    # the pipeline remembers the simulation: ingest needs no --domain (and refuses a wrong one)
    from gpope.errors import ConfigError
    from gpope.shell.pipeline.ingest import resolve_dataset_settings

    record = lk.read(TableRef("bronze", "simulation", "hiv_rt")).collect()
    assert [(r.domain, r.patients, r.max_length) for r in record] == [("hiv", 3, 6)]
    assert "seed" not in record[0].asDict()
    settings = resolve_dataset_settings(config, "hiv_rt")
    assert (settings.domain, settings.max_length) == ("hiv", 6)
    with pytest.raises(ConfigError, match="simulated with domain 'hiv'"):
        resolve_dataset_settings(config, "hiv_rt", domain="chain")
    with pytest.raises(ConfigError, match="not written by `gpope simulate`"):
        resolve_dataset_settings(config, "never_simulated")

    ingest = run_ingest(spark, config, "hiv_rt")
    assert ingest.balanced and (ingest.n_trajectories, ingest.n_transitions) == (3, 18)
    assert all(ingest.rows_used[t] == ingest.rows_in[t] for t in ingest.rows_in)

    expected, _ = simulate_tables("hiv", 3, 0, options, policy=behaviour)
    assert np.any(expected.behavior_prob < 0.99) and len(np.unique(expected.action)) > 1
    got = lk.read(TableRef("silver", "transitions", "hiv_rt")).orderBy("traj_index", "t").toPandas()
    assert list(got["patient_id"].unique()) == ["P000000", "P000001", "P000002"]
    np.testing.assert_array_equal(np.stack(got["state"]), expected.state)
    np.testing.assert_array_equal(np.stack(got["next_state"]), expected.next_state)
    for column in ("traj_index", "t", "action", "reward", "behavior_prob", "terminal", "truncated"):
        np.testing.assert_array_equal(got[column].to_numpy(), getattr(expected, column), column)


def test_cli_simulate_help_and_bad_domain():
    help_proc = subprocess.run(
        [*GPOPE, "simulate", "--help"], capture_output=True, text=True, timeout=60
    )
    assert help_proc.returncode == 0 and "--patients" in help_proc.stdout
    bad = subprocess.run(
        [*GPOPE, "simulate", "--domain", "pong", "--patients", "3", "--dataset", "x"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0 and "Got 'pong' instead" in bad.stderr


@pytest.mark.parametrize("domain", ["mountaincar", "hiv"])
def test_default_behaviour_policies_are_stochastic_with_valid_propensities(domain):
    episodes, tables = simulate_tables(domain, 2, 0, SimulateOptions(n_steps=5))
    assert np.all((episodes.behavior_prob > 0) & (episodes.behavior_prob <= 1))
    assert np.any(episodes.behavior_prob < 1)
    np.testing.assert_array_equal(tables["treatments"]["propensity"], episodes.behavior_prob)


def test_a_cohort_simulated_in_parts_equals_the_whole(monkeypatch):
    from gpope.shell.pipeline import simulate

    options = SimulateOptions(n_steps=5, jitter=0.2, missing_prob=0.3, noise=0.1, batch_size=2)
    whole_tr, whole = simulate_tables("chain", 7, 3, options)
    monkeypatch.setattr(simulate, "PATIENTS_PER_PART", 4)  # parts of 4, 3 patients
    parts = list(simulate.iter_simulated_tables("chain", 7, 3, options))
    assert [p.n_trajectories for p, _ in parts] == [4, 3]
    again_tr, again = simulate_tables("chain", 7, 3, options)
    assert again_tr.n_transitions == whole_tr.n_transitions
    ids = np.concatenate([t["treatments"]["patient_id"] for _, t in parts])
    assert sorted(set(ids)) == [f"P{i:06d}" for i in range(7)]  # numbered across the parts
    for name, columns in again.items():
        for column, values in columns.items():
            np.testing.assert_array_equal(values, np.concatenate([t[name][column] for _, t in parts]))
    assert len(again["treatments"]["time"]) == len(whole["treatments"]["time"])
    np.testing.assert_array_equal(again_tr.state, whole_tr.state)  # episodes do not depend on parts

"""Experiment harness: quick chain preset, baselines on the chain, non-private GPOPE convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpope.core.baselines import dp_lsl, dp_lsw
from gpope.core.envs import chain as chain_env
from gpope.core.experiments import (
    ChainProblem,
    ChainSettings,
    Hyper,
    TuningTable,
    block_sizes,
    paper_method,
    product_method,
    rdp_method,
    run_chain,
    run_gpope_method,
    seed_seq,
)


def test_block_sizes_cover_all_trials():
    assert block_sizes(100, 10) == [10] * 10
    assert block_sizes(7, 3) == [3, 2, 2]
    assert block_sizes(2, 5) == [1, 1]
    assert sum(block_sizes(101, 7)) == 101


def test_seed_streams_are_distinct_and_reproducible():
    a = np.random.default_rng(seed_seq(0, 1, 2)).random(4)
    b = np.random.default_rng(seed_seq(0, 1, 2)).random(4)
    c = np.random.default_rng(seed_seq(0, 1, 3)).random(4)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_tuning_table_roundtrip_and_nearest_size():
    table = TuningTable(best={("gpope_paper", 1000, 0.1): Hyper(step_size=0.3, clip=0.01),
                              ("gpope_paper", 100_000, 0.1): Hyper(step_size=1.0, clip=0.003)},
                        rows=[], seed=5, domain="chain")
    again = TuningTable.from_dict(table.to_dict())
    assert again.best == table.best and again.seed == 5
    assert again.get("gpope_paper", 2000, 0.1) == Hyper(step_size=0.3, clip=0.01)
    assert again.get("gpope_paper", 50_000, 0.1) == Hyper(step_size=1.0, clip=0.003)


def test_quick_chain_preset_records():
    settings = ChainSettings.quick(sizes=(2_000,), sweep_size=2_000, trials=2,
                                   data_blocks=2, iterations=500)
    hyper = {"gpope_paper": Hyper(step_size=0.3, clip=0.003),
             "gpope_rdp": Hyper(step_size=0.1, clip=0.003),
             "gpope_product": Hyper(step_size=100.0, clip=0.01)}
    table = TuningTable(best={(k, 2000, settings.epsilon): v for k, v in hyper.items()}, rows=[],
                        seed=1, domain="chain")
    records = run_chain(settings, table)
    on_m = [r for r in records if r["figure"] == "m"]
    methods = {r["method"] for r in on_m}
    assert methods == {"lstd", "dp_lsw", "dp_lsl", "gpope_paper", "gpope_rdp", "gpope_product"}
    assert {r["m"] for r in on_m} == set(settings.sizes)
    for m in settings.sizes:
        for method in methods:
            trials = {r["trial"] for r in on_m if r["m"] == m and r["method"] == method
                      and r["multiplier"] == 1.0}
            assert trials == {0, 1}
    paper_mults = {r["multiplier"] for r in on_m if r["method"] == "gpope_paper"}
    assert paper_mults == {0.1, 1.0, 10.0}
    sweep = [r for r in records if r["figure"] == "step"]
    assert {r["m"] for r in sweep} == {settings.sweep_size}
    assert {r["method"] for r in sweep} == {"gpope_paper", "gpope_product"}
    for r in records:
        assert math.isfinite(r["rel_mspbe"]) and r["rel_mspbe"] >= 0
        assert math.isfinite(r["value_error"]) and r["value_error"] >= 0
    # Reproducible for the same seed; another seed gives other data and noise.
    again = run_chain(settings, table)
    assert [r["rel_mspbe"] for r in again] == [r["rel_mspbe"] for r in records]


@pytest.fixture(scope="module")
def chain_problem():
    settings = ChainSettings.quick()
    return ChainProblem.simulate(20_000, np.random.default_rng(3), settings)


def test_lstd_relative_mspbe_is_tiny_and_values_close(chain_problem):
    theta = chain_problem.lstd_theta()
    assert chain_problem.rel_mspbe(theta)[0] < 1e-3
    assert chain_problem.value_error(theta)[0] < 0.02
    # Oracle: the exact values have zero MSPBE and zero value error.
    v = chain_env.exact_values()
    assert chain_problem.rel_mspbe(v)[0] < 1e-20
    assert chain_problem.value_error(v)[0] < 1e-12
    # theta = 0 has relative MSPBE exactly 1 by definition.
    assert chain_problem.rel_mspbe(np.zeros(40))[0] == pytest.approx(1.0)


def test_dp_ls_block_draws_equal_the_baseline_functions(chain_problem):
    p = chain_problem
    out = p.dp_ls_thetas(np.random.default_rng(9), 1, 0.1, 1e-5)
    g_w, g_l = np.random.default_rng(9).spawn(2)
    tr = p.transitions
    rho = np.full(40, 1 / 39)
    rho[39] = 0.0
    kw = dict(n_states=40, features=np.eye(40), weights=rho, gamma=0.99, f_max=1.0,
              epsilon=0.1, delta=1e-5)
    ref_w = dp_lsw(tr.state[:, 0], tr.reward, tr.traj_index, rng=g_w, **kw)
    ref_l = dp_lsl(tr.state[:, 0], tr.reward, tr.traj_index, rng=g_l, n_trajectories=p.m, **kw)
    np.testing.assert_allclose(out["dp_lsw"][0], ref_w.theta, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["dp_lsl"][0], ref_l.theta, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("method", "hyper", "bound"),
    [
        (paper_method(20_000), Hyper(step_size=3.0, clip=1e6), 0.05),
        (product_method(20_000, batch_size=10.0), Hyper(step_size=1e4, clip=0.01), 0.02),
    ],
)
def test_nonprivate_gpope_converges_on_the_chain(chain_problem, method, hyper, bound):
    thetas, info = run_gpope_method(chain_problem, method, epsilon=None, delta=1e-5, hyper=hyper,
                                    multiplier=1.0, ss=seed_seq(0, 7), trials=2)
    assert info["sigma"] == 0.0
    rm = chain_problem.rel_mspbe(thetas)
    assert np.all(rm < bound)
    # Much better than the starting point theta = 0 (relative MSPBE 1).
    assert np.all(rm < 0.1)


def test_rigorous_uniform_needs_more_noise_than_paper_accounting():
    m, eps, delta = 2_000, 0.1, 1e-5  # the quick preset's calibration (cached)
    assert rdp_method(500).sigma(m, eps, delta) > paper_method(500).sigma(m, eps, delta)


# ---------------------------------------------------------------------- continuous quick presets
_QUICK = {
    # domain: (figures, sizes, trial methods, PNG stems)
    "mountaincar": ({"on", "off"}, {300, 1000},
                    {"lstd", "dp_lsw", "wis_lstd", "gpope_paper", "gpope_rdp", "gpope_product"},
                    ["mountaincar_offpolicy_mspbe_vs_m.png", "mountaincar_onpolicy_mspbe_vs_m.png"]),
    "hiv": ({"off"}, {30, 60}, {"wis_lstd", "gpope_paper", "gpope_rdp", "gpope_product"},
            ["hiv_mspbe_vs_m.png"]),
}


@pytest.mark.parametrize("domain", sorted(_QUICK))
def test_continuous_quick_preset_through_the_cli(domain, tmp_path, capsys, monkeypatch):
    """`gpope experiment {mountaincar,hiv} --quick` as run in CI: outputs, MLflow, batching."""
    import csv
    import json

    from gpope.cli import main
    from gpope.core.envs import hiv, train_hiv
    from gpope.core.experiments import continuous

    # Fresh truth cache; count HIV simulator cohorts and stand-alone truth simulations.
    monkeypatch.setattr(continuous, "_TRUTH_CACHE", {})
    calls = {"cohorts": [], "large_sample": 0}
    generate_many, large_sample = hiv.generate_many, train_hiv.large_sample_statistics

    def counting_generate_many(sizes, *args, **kwargs):
        calls["cohorts"].append(list(sizes))
        return generate_many(sizes, *args, **kwargs)

    def counting_large_sample(*args, **kwargs):
        calls["large_sample"] += 1
        return large_sample(*args, **kwargs)

    monkeypatch.setattr(hiv, "generate_many", counting_generate_many)
    monkeypatch.setattr(train_hiv, "large_sample_statistics", counting_large_sample)

    figures, sizes, methods, pngs = _QUICK[domain]
    out = tmp_path / domain
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    status = main(["experiment", domain, "--quick", "--out", str(out), "--tracking-uri", uri,
                   "--quiet", "--json"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)

    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert {r["figure"] for r in rows} == figures
    assert {int(r["m"]) for r in rows} == sizes
    assert {r["method"] for r in rows} == methods
    assert all(math.isfinite(float(r["rel_mspbe"])) and float(r["rel_mspbe"]) >= 0 for r in rows)
    # The non-private (WIS-)LSTD fit beats theta = 0 (relative MSPBE 1) against the truth.
    assert all(float(r["rel_mspbe"]) < 1.0 for r in rows if r["method"] in {"lstd", "wis_lstd"})
    for r in rows:
        if r["method"].startswith("gpope"):
            assert float(r["sigma"]) > 0 and float(r["epsilon"]) == 1.0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["mlflow_run_id"] == printed["mlflow_run_id"]
    assert summary["domain"] == domain and summary["n_records"] == len(rows)
    assert set(summary["settings"]["sizes"]) == sizes and summary["settings"]["coarse_grid"]
    assert {b["method"] for b in summary["tuning"]} == {f"{f}:{m}" for f in figures for m in
                                                        ("gpope_paper", "gpope_rdp",
                                                         "gpope_product")}
    tuning = json.loads((out / "tuning.json").read_text())
    assert len(tuning["grid"]) == len(figures) * 3 * 6  # coarse 3 x 2 grid per variant
    assert sorted(p.name for p in (out / "figures").glob("*.png")) == pngs
    assert all((out / "figures" / p).stat().st_size > 1000 for p in pngs)

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    parent = client.get_run(summary["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.tags["gpope.domain"] == domain
    children = client.search_runs([parent.info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert {c.data.tags["gpope.method"] for c in children} == methods
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials.csv", "summary.json", "tuning.json", "figures"} <= artifacts

    if domain == "hiv":
        # Truth sample and public tuning data in one cohort, then both data sets in one cohort;
        # the truth is computed once (shared by tuning and trials), never simulated on its own.
        assert calls["cohorts"] == [[60, 60], [30, 60]]
        assert calls["large_sample"] == 0
    else:
        assert calls["cohorts"] == []

"""`gpope evaluate --tune private` through the real pipeline: Spark statistics, ledger, release,
MLflow; the seeded run equals the core's tuning on the same statistics."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest
from dp_accounting.rdp import RdpAccountant

from gpope.config import load_config
from gpope.core.accounting import RDP_ORDERS
from gpope.core.envs import mountaincar
from gpope.core.evaluation.settings import SettingsLayer
from gpope.core.gpope.solver import GPOPEConfig
from gpope.core.policies import importance_ratios
from gpope.core.spec import EvaluationSpec
from gpope.core.statistics import statistics_from_transitions
from gpope.core.tuning.private import plan_private_tuning, tune_privately
from gpope.errors import ConfigError
from gpope.shell import lake
from gpope.shell.evaluate.run import run_evaluate
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

SPEC = {
    "name": "mc_tune",
    "domain": "mountaincar",
    "gamma": 0.95,
    "normalization": "transition",
    "length_scale": 60,
    "reward_scale": 0.05,
    "feature_map": {"kind": "fourier", "order": 2, "low": [-1.2, -0.07], "high": [0.6, 0.07]},
    "target_policy": {"kind": "uniform", "n_actions": 3},
    "reference_states": {"bottom": [-0.5, 0.0], "right": [0.3, 0.02]},
}
ITER = 600
M = 80


@pytest.fixture(scope="module")
def setup(spark, tmp_path_factory, exact_count):
    tmp = tmp_path_factory.mktemp("evaluate_tune")
    config = load_config(None, lake={"root": str(tmp / "lake")})
    behaviour = mountaincar.learned_policy("epsilon_greedy", epsilon=0.1)
    transitions = mountaincar.generate(M, np.random.default_rng(5), behaviour, max_steps=60)
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    lake.write_table(df, config.lake, "silver", "mct", "transitions", mode="overwrite")
    spec = EvaluationSpec.from_mapping(SPEC)
    run_stats(spark, config, dataset="mct", spec=spec)
    PrivacyLedger(spark, config).set_budget("mct", epsilon=100.0, delta=1e-3)
    exact_count(spark, config, "mct", spec)
    return config, spec, transitions, f"sqlite:///{tmp / 'mlflow.db'}"


def _options(**kw):
    base = dict(epsilon=2.0, delta=1e-5, iterations=ITER, clip=1.0, step_size=0.2,
                sampling="poisson", batch_rate=0.1, step_schedule="inverse", step_offset=60.0,
                averaging="tail", accountant="rdp", public_trajectories=10,
                public_max_length=40, tune="private", statistics_share=0.0,
                allow_not_private=True)
    base.update(kw)
    return SettingsLayer(base)


def _ledger_rows(spark, config, dataset):
    ledger = lake.read_shared_table(spark, config.lake, "privacy_ledger")
    return ledger.where(ledger.dataset == dataset).collect()


def test_seeded_tuned_run_equals_the_core_and_is_charged_once(spark, setup):
    config, spec, transitions, uri = setup
    before = len(_ledger_rows(spark, config, "mct"))
    report = run_evaluate(spark, config, dataset="mct", spec=spec, options=_options(seed=3),
                          tracking_uri=uri)

    # the core alone on the same statistics, with the same plan and seed
    scaled = transitions.__class__(**{**transitions.__dict__, "reward": transitions.reward * 0.05})
    stats = statistics_from_transitions(
        scaled, spec.feature_map, importance_ratios(spec.target_policy, transitions), gamma=0.95,
        normalization="transition", length_scale=60, representation="dense")
    settings = config.evaluation.private_tuning
    plan = plan_private_tuning(m=M, iterations=ITER, batch_rate=0.1, epsilon=2.0, delta=1e-5,
                               settings=settings, accountant="rdp")
    base = GPOPEConfig(iterations=ITER, step_size=0.2, clip=1.0, noise_multiplier=plan.gpope_sigma,
                       sampling="poisson", batch_rate=0.1, step_schedule="inverse",
                       step_offset=60.0, averaging="tail")
    core = tune_privately(stats, base, plan, settings, 3)
    np.testing.assert_allclose(report.theta, core.theta, rtol=1e-8, atol=1e-12)
    assert report.sigma == pytest.approx(plan.gpope_sigma)
    assert report.spent_epsilon == pytest.approx(plan.epsilon_spent) and report.spent_epsilon <= 2.0
    assert RdpAccountant(orders=RDP_ORDERS).compose(plan.dp_event).get_epsilon(1e-5) <= 2.0
    assert report.tuning["clip"] == pytest.approx(core.config.clip)
    assert report.tuning["step_size"] == pytest.approx(core.config.step_size)
    assert report.tuning["runs"] == len(settings.step_multipliers) * len(settings.clip_multipliers)
    assert not report.private  # seeded
    # without a separate noisy-statistics release, the tuning's one gives the private MSPBE
    assert report.private_relative_mspbe == pytest.approx(core.private_relative_mspbe)
    assert "tuned privately" in report.summary()

    # ledger: ONE reservation of the whole epsilon, recording the composed event
    rows = [r for r in _ledger_rows(spark, config, "mct") if r.run_id == report.run_id]
    assert len(_ledger_rows(spark, config, "mct")) == before + len(rows)
    reserved = [r for r in rows if r.status == "reserved"]
    assert len(reserved) == 1 and reserved[0].epsilon == 2.0
    assert "ComposedDpEvent" in reserved[0].mechanism
    assert sorted(r.status for r in rows) == ["released", "reserved"]

    # released_estimates: one row; MLflow: the chosen settings (DP outputs) and tuning.json
    rel = lake.read_shared_table(spark, config.lake, "released_estimates")
    assert rel.where(rel.run_id == report.run_id).count() == 1
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(report.mlflow_run_id)
    assert float(run.data.params["clip"]) == pytest.approx(core.config.clip)
    assert float(run.data.params["tuned.step_size"]) == pytest.approx(core.config.step_size)
    assert run.data.params["tune"] == "private"
    assert "tuned.relative_mspbe_private" in run.data.metrics
    assert run.data.metrics["relative_mspbe_private"] == pytest.approx(core.private_relative_mspbe)
    path = client.download_artifacts(run.info.run_id, "tuning.json")
    with open(path) as fh:
        tuning = json.load(fh)
    assert len(tuning["candidates"]) == report.tuning["runs"]


@pytest.mark.parametrize("kw, match", [
    (dict(sampling="uniform", batch_rate=None), "sampling poisson"),
    (dict(path="stream"), "driver"),
    (dict(accountant="paper", allow_invalid_accounting=True, sampling="uniform", batch_rate=None),
     "sampling poisson"),
    (dict(estimator="ssp", ssp_clip=5.0), "estimator ssp"),
])
def test_unsupported_settings_fail_before_the_reservation(spark, setup, kw, match):
    config, spec, _, uri = setup
    before = len(_ledger_rows(spark, config, "mct"))
    with pytest.raises(ConfigError, match=match):
        run_evaluate(spark, config, dataset="mct", spec=spec, options=_options(seed=1, **kw),
                     tracking_uri=uri)
    assert len(_ledger_rows(spark, config, "mct")) == before


def test_cli_tune_private(spark, setup, capsys, tmp_path):
    from gpope.cli import main

    config, _, _, uri = setup
    spec_file = str(tmp_path / "spec.yaml")
    import yaml

    with open(spec_file, "w") as fh:
        yaml.safe_dump(SPEC, fh)
    code = main([
        "evaluate", "--dataset", "mct", "--spec", spec_file, "--epsilon", "2", "--delta", "1e-5",
        "--iterations", str(ITER), "--batch-rate", "0.1", "--step-schedule", "inverse",
        "--step-offset", "60", "--accountant", "rdp", "--tune", "private",
        "--public-trajectories", "0", "--ssp-clip", "5", "--lake", config.lake.root,
        "--tracking-uri", uri, "--json",
    ])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tuning"]["mode"] == "private" and out["private"] is True
    # the default statistics_share (intervals, private MSPBE) composes with the tuned GPOPE part
    assert out["statistics_epsilon"] == pytest.approx(0.2)
    assert out["tuning"]["epsilon_spent"] <= 1.8 + 1e-9
    assert out["spent_epsilon"] <= 2.0 + 1e-9
    assert out["intervals"] is not None

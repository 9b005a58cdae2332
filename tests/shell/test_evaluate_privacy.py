"""Privacy edges of a release (issue 12 defects 1, 2, 6, 8) and killed or interrupted runs
(issue 13 section 4): real Spark, real Delta tables, real MLflow; runs killed at each point are
in tests/shell/test_kill_points.py."""

from __future__ import annotations

import json
from pathlib import Path

import dp_accounting
import mlflow
import numpy as np
import pytest
from deltalake import DeltaTable
from dp_accounting.rdp import RdpAccountant

from gpope.cli import main
from gpope.config import load_config
from gpope.core.accounting import RDP_ORDERS, calibrate_sigma
from gpope.core.envs import chain
from gpope.core.evaluation.settings import SettingsLayer
from gpope.errors import ConfigError
from gpope.shell import lake
from gpope.shell.evaluate.run import run_evaluate
from gpope.shell.pipeline.jobargs import load_spec
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
SPEC_FILE = REPO / "conf" / "specs" / "chain.yaml"
SEED = 987654321


@pytest.fixture(scope="module")
def chain_lake(spark, tmp_path_factory, exact_count):
    """40 chain trajectories written straight to silver: NOT produced by `gpope simulate`."""
    root = tmp_path_factory.mktemp("privacy") / "lake"
    config = load_config(None, lake={"root": str(root)})
    transitions = chain.generate(40, np.random.default_rng(0), chain.ChainConfig(max_steps=200))
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    # "chu" (same rows) takes the uniform-sampling runs: a dataset's runs share one
    # neighbouring relation (the ledger refuses to mix replace-one and add/remove runs)
    for name in ("ch", "chu"):
        lake.write_table(df, config.lake, "silver", name, "transitions", mode="overwrite")
        run_stats(spark, config, dataset=name, spec=load_spec(SPEC_FILE))
        PrivacyLedger(None, config).set_budget(name, epsilon=1000.0, delta=1e-3)
        exact_count(spark, config, name, load_spec(SPEC_FILE))
    return config, root


def _ledger_version(root: Path) -> int:
    return DeltaTable(str(root / "gold" / "privacy_ledger")).version()


def _released(root: Path) -> list[dict]:
    path = root / "gold" / "released_estimates"
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist() if path.exists() else []


def test_paper_accountant_is_refused_before_anything_is_written(tmp_path, capsys):
    root = tmp_path / "lake"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["evaluate", "--dataset", "ch", "--spec", str(SPEC_FILE), "--epsilon", "0.5",
                 "--delta", "1e-5", "--accountant", "paper", "--sampling", "uniform",
                 "--lake", str(root), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert "not a valid privacy bound" in err and "--allow-invalid-accounting" in err
    assert len(err.strip().splitlines()) == 1
    assert not root.exists() and not (tmp_path / "mlflow.db").exists()  # nothing written
    conf = tmp_path / "paper.yaml"
    conf.write_text("evaluation:\n  accountant: paper\n  sampling: uniform\n")
    assert main(["demo", "--conf", str(conf), "--lake", str(root), "--tracking-uri", uri,
                 "--no-progress"]) == 2
    assert "not a valid privacy bound" in capsys.readouterr().err
    assert not root.exists()


def test_paper_release_with_the_flag_is_not_private_everywhere(spark, chain_lake, tmp_path):
    config, root = chain_lake
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    options = SettingsLayer.of(epsilon=0.5, delta=1e-5, iterations=300, sampling="uniform",
                              accountant="paper", allow_invalid_accounting=True,
                              statistics_share=0.0, policy_value_share=0.0,
                              public_trajectories=0)
    report = run_evaluate(spark, config, dataset="chu", spec=load_spec(SPEC_FILE),
                          options=options, tracking_uri=uri)
    assert not report.private and "not a valid bound" in report.label
    assert "not a valid bound" in report.summary() and "PRIVATE)" not in report.summary()
    (row,) = [r for r in _released(root) if r["run_id"] == report.run_id]
    assert row["private"] is False and row["accountant"] == "paper"
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id)
    assert run.data.tags["gpope.private"] == "false"
    assert run.data.tags["gpope.valid_bound"] == "false"
    assert run.data.params["private"] == "False"
    entry = PrivacyLedger(None, config).entry("chu", report.run_id)
    assert entry.valid_bound is False and entry.status == "released"
    # oracle: dp-accounting itself on the mechanism actually run (uniform, replace-one, 2h)
    sigma = calibrate_sigma(m=40, iterations=300, epsilon=0.5, delta=1e-5, accountant="paper")
    acc = RdpAccountant(orders=list(RDP_ORDERS),
                        neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.SampledWithoutReplacementDpEvent(
        40, 1, dp_accounting.GaussianDpEvent(sigma / 2)), 300))
    rigorous = acc.get_epsilon(1e-5)
    assert rigorous > 0.5 and entry.charged_epsilon == pytest.approx(rigorous, rel=1e-6)


def test_seed_refused_on_real_data_and_never_persisted(spark, chain_lake, tmp_path):
    config, root = chain_lake
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = load_spec(SPEC_FILE)
    before = _ledger_version(root)
    with pytest.raises(ConfigError, match="--allow-not-private"):
        run_evaluate(spark, config, dataset="ch", spec=spec, tracking_uri=uri,
                     options=SettingsLayer.of(epsilon=0.5, delta=1e-5, iterations=200,
                                             seed=SEED, public_trajectories=0))
    assert _ledger_version(root) == before and not (tmp_path / "mlflow.db").exists()
    # delta >= 1/m (m = 40) is refused, delta > 1/(10 m) warns
    with pytest.raises(ConfigError, match=r"below 1/m"):
        run_evaluate(spark, config, dataset="ch", spec=spec, tracking_uri=uri,
                     options=SettingsLayer.of(epsilon=0.5, delta=0.03, iterations=200,
                                             public_trajectories=0))
    assert _ledger_version(root) == before
    with pytest.warns(UserWarning, match=r"1/\(10 m\)"):
        report = run_evaluate(
            spark, config, dataset="ch", spec=spec, tracking_uri=uri,
            options=SettingsLayer.of(epsilon=0.5, delta=0.005, iterations=200, seed=SEED,
                                    allow_not_private=True, public_trajectories=0))
    assert not report.private and "fixed seed" in report.label
    # the seed is nowhere: tables, MLflow params/tags/artifacts, ledger
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(report.mlflow_run_id)
    texts = [json.dumps(run.data.params), json.dumps(run.data.tags)]
    local = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, tracking_uri=uri,
                                                     dst_path=str(tmp_path / "art")))
    texts += [p.read_text(errors="ignore") for p in local.rglob("*") if p.is_file()]
    texts.append(json.dumps(_released(root), default=str))
    texts.append(json.dumps(DeltaTable(str(root / "gold" / "privacy_ledger"))
                            .to_pyarrow_table().to_pylist(), default=str))
    assert "options.json" in {p.name for p in local.rglob("*")}
    assert not any(str(SEED) in t for t in texts)


def test_interrupt_after_the_release_reports_what_was_released(chain_lake, tmp_path, capsys,
                                                              monkeypatch):
    config, root = chain_lake
    monkeypatch.setenv("GPOPE_FAULT", "evaluate.after_release:int")
    code = main(["evaluate", "--dataset", "ch", "--spec", str(SPEC_FILE), "--epsilon", "0.5",
                 "--delta", "1e-5", "--iterations", "200", "--public-trajectories", "0",
                 "--lake", str(root), "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    out = capsys.readouterr()
    assert code == 130
    assert "interrupted AFTER the release" in out.err and "Do not re-run" in out.err
    assert "V(" in out.out
    run_id = out.err.split("run ")[1].split()[0]
    assert run_id in {r["run_id"] for r in _released(root)}
    assert PrivacyLedger(None, config).entry("ch", run_id).status == "released"


def test_jobs_keep_noise_free_counts_out_of_stdout(spark, tmp_path, capsys):
    """Job stdout (readable by anyone viewing a Databricks job) never carries m, the sum of tau
    or rejected counts: they go to the operator log (0600), tagged diagnostic.private=true (m is
    released only as the noisy count m~)."""
    from gpope.shell.pipeline.simulate import run_simulate

    root = tmp_path / "lake"
    config = load_config(None, lake={"root": str(root)})
    run_simulate(spark, config, "sim", domain="chain", patients=30, seed=5)
    assert PrivacyLedger(None, config).origin("sim") == "simulate"
    from gpope.shell import entrypoints

    assert entrypoints.ingest(["--dataset", "sim", "--domain", "chain", "--lake", str(root)]) == 0
    assert entrypoints.stats(["--dataset", "sim", "--spec", str(SPEC_FILE), "--lake",
                              str(root)]) == 0
    out = capsys.readouterr().out
    log = root / "_operator" / "private_diagnostics.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["stage"] for r in records] == ["ingest", "stats"]
    assert all(r["diagnostic.private"] is True for r in records)
    total = records[0]["operator_only"]["n_transitions"]
    assert total > 30 and records[1]["n_transitions"] == total
    assert str(total) not in out and "rejected" not in out and "trajectories" not in out
    assert records[0]["operator_only"]["n_trajectories"] == records[1]["n_trajectories"] == 30
    assert "silver transitions written" in out and "operator log" in out
    assert (log.stat().st_mode & 0o777) == 0o600


def test_json_report_never_prints_the_private_lstd_theta_unless_asked():
    from gpope.shell.evaluate.run import EvaluationReport

    report = EvaluationReport(
        run_id="r", mlflow_run_id=None, dataset="d", spec_id="s", spec_name="s", policy="p",
        epsilon=1.0, delta=1e-6, spent_epsilon=1.0, accountant="pld", sigma=1.0, m=10, n=2,
        iterations=10, sampling="poisson", batch_rate=0.1, private=True, path="memory",
        theta=np.zeros(2), reference_values={}, public_mspbe=None, remaining_epsilon=1.0,
        remaining_delta=0.0, private_diagnostics={"lstd_theta": [0.123456789, 2.0]},
    )
    assert "0.123456789" not in json.dumps(report.to_dict())
    shown = report.to_dict(include_private=True)["private_diagnostics"]
    assert shown["diagnostic.private"] is True and shown["lstd_theta"][0] == 0.123456789


def test_uniform_statistics_share_is_calibrated_and_charged_under_replace_one(spark, chain_lake,
                                                                              tmp_path):
    # Uniform sampling = replace-one adjacency: one replaced patient moves the noisy-statistics
    # release by 2 clip. Its share must be met at sensitivity 2 clip (oracle: dp-accounting's PLD
    # of the Gaussian mechanism with the noise actually drawn), reported and charged alike.
    config, _ = chain_lake
    options = SettingsLayer.of(epsilon=1.0, delta=1e-5, iterations=200, sampling="uniform",
                              statistics_share=0.2, ssp_clip=2.0, public_trajectories=0)
    report = run_evaluate(spark, config, dataset="chu", spec=load_spec(SPEC_FILE),
                          options=options, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    from dp_accounting.pld import privacy_loss_distribution as pld_mod

    std = report.statistics_sigma * report.ssp_clip
    oracle = pld_mod.from_gaussian_mechanism(
        standard_deviation=std, sensitivity=2.0 * report.ssp_clip,
        value_discretization_interval=1e-4).get_epsilon_for_delta(0.2 * 1e-5)
    assert oracle <= 0.2 * 1.0 * (1 + 1e-3)
    assert oracle == pytest.approx(0.2, rel=0.02)  # calibrated, not over-noised
    gpope_part = float(calibrate_sigma(m=40, iterations=200, epsilon=0.8, delta=0.8e-5))
    assert report.spent_epsilon <= 1.0 + 1e-9
    from gpope.core.accounting import epsilon_spent

    assert report.spent_epsilon == pytest.approx(
        epsilon_spent(m=40, iterations=200, sigma=gpope_part, delta=0.8e-5) + oracle, rel=0.02)
    # the ledger stores the same release under REPLACE_ONE: Gaussian events (statistics and, if
    # any, moments) whose composition is ONE Gaussian with multiplier noise std / sensitivity
    # (1/s^2 adds up: Mironov 2017, Prop. 7 with RDP additivity)
    stored = json.loads(PrivacyLedger(None, config).entry("chu", report.run_id).mechanism)
    assert stored["relation"] == "replace_one"

    def gaussians(ev: dict) -> list[float]:
        if ev["type"] == "GaussianDpEvent":
            return [ev["noise_multiplier"]]
        assert ev["type"] == "ComposedDpEvent"
        return [s for sub in ev["events"] for s in gaussians(sub)]

    multipliers = gaussians(stored["event"]["events"][1])
    equivalent = sum(1.0 / s**2 for s in multipliers) ** -0.5
    assert equivalent == pytest.approx(std / (2.0 * report.ssp_clip), rel=1e-9)


def test_secure_noise_covers_the_policy_value_release(spark, chain_lake, tmp_path, monkeypatch):
    # --secure-noise covers the policy value release too: its three noisy releases (clip
    # histogram, first and second moments) go through the OS-CSPRNG discrete Gaussian, inside the
    # run's RDP event; the three scalars are released with finite intervals.
    from gpope.core import policy_value_release as pvr

    calls = []
    real = pvr.secure_perturb

    def counted(values, std, sensitivity):
        calls.append((np.size(values), std, sensitivity))
        return real(values, std, sensitivity)

    monkeypatch.setattr(pvr, "secure_perturb", counted)
    config, root = chain_lake
    options = SettingsLayer.of(epsilon=1.0, delta=1e-5, estimator="ssp", accountant="rdp",
                              secure_noise=True, public_trajectories=0, ssp_clip=2.0)
    report = run_evaluate(spark, config, dataset="ch", spec=load_spec(SPEC_FILE),
                          options=options, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    assert report.private
    assert len(calls) == 3  # histogram, first moments, second moments
    assert all(std > 0 and sens > 0 for _, std, sens in calls)
    rows = DeltaTable(str(root / "gold" / "released_values")).to_pyarrow_table().to_pylist()
    scalars = {r["state"]: r for r in rows if r["run_id"] == report.run_id
               and r["state"] in ("policy_value", "behaviour_value", "policy_contrast")}
    assert set(scalars) == {"policy_value", "behaviour_value", "policy_contrast"}
    assert all(np.isfinite([r["lower"], r["upper"]]).all() for r in scalars.values())


def test_secure_noise_is_refused_where_the_tuning_free_default_applies(spark, chain_lake,
                                                                       tmp_path):
    # --secure-noise with the settings its refusal message names (uniform, rdp) on a spec
    # without an evaluation: block: the default would draw continuous Gaussian noise under a
    # PLD event, so the run is refused before anything is reserved; naming the estimator
    # (ssp, whose clip histogram and sums take the discrete Gaussian) is accepted
    import dataclasses

    from gpope.core.estimators import claiming
    from gpope.shell.evaluate.inputs import check_request

    config, root = chain_lake
    spec = dataclasses.replace(load_spec(SPEC_FILE), evaluation=None)
    assert claiming(False, {"secure_noise": "options", "sampling": "options"}) == "untuned"
    before = _ledger_version(root)
    options = SettingsLayer.of(epsilon=1.0, delta=1e-5, secure_noise=True, sampling="uniform",
                              accountant="rdp", public_trajectories=0)
    with pytest.raises(ConfigError, match="--estimator ssp --accountant rdp --secure-noise"):
        check_request(config, spec, options)  # before Spark: the CLI's preflight
    check_request(config, spec, SettingsLayer.of(**{**options.values, "estimator": "ssp"}))
    with pytest.raises(ConfigError, match="--secure-noise is not available for the tuning-free"):
        run_evaluate(spark, config, dataset="chu", spec=spec, options=options,
                     tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    assert _ledger_version(root) == before  # nothing reserved


def test_statistics_without_policy_terms_are_refused_in_one_line(spark, chain_lake, tmp_path,
                                                                  capsys, exact_count):
    # A lake whose trajectory_stats were written before the policy value existed (no
    # policy_terms column): evaluate refuses before reserving anything, telling the user to re-run
    # `gpope stats`; the CLI prints it as one line.
    import shutil

    from deltalake import write_deltalake

    config, root = chain_lake
    for layer in ("silver", "gold"):
        shutil.copytree(root / layer / "ch", root / layer / "old_stats")
    path = str(root / "gold" / "old_stats" / "trajectory_stats")
    table = DeltaTable(path).to_pyarrow_table().drop(["policy_terms"])
    write_deltalake(path, table, mode="overwrite", schema_mode="overwrite")
    PrivacyLedger(None, config).set_budget("old_stats", epsilon=100.0, delta=1e-3)
    exact_count(spark, config, "old_stats", load_spec(SPEC_FILE))
    before = _ledger_version(root)
    code = main(["evaluate", "--dataset", "old_stats", "--spec", str(SPEC_FILE), "--epsilon",
                 "1", "--delta", "1e-5", "--lake", str(root),
                 "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "re-run `gpope stats`" in err[0], err
    assert _ledger_version(root) == before  # nothing reserved


def test_statistics_older_than_the_latest_ingest_are_refused_or_released_and_recorded(
        spark, chain_lake, tmp_path, capsys, exact_count):
    # stats of 40 trajectories, then a later write of 55 to silver (stats not re-run): evaluate
    # refuses in one line naming `gpope stats` before reserving anything; --allow-stale-stats
    # releases from the 40 and records it (report, --json, MLflow tag); stats again -> fresh.
    config, root = chain_lake
    uri = f"sqlite:///{tmp_path / 'm.db'}"

    def silver(m: int, seed: int) -> None:
        tr = chain.generate(m, np.random.default_rng(seed), chain.ChainConfig(max_steps=200))
        df = spark.createDataFrame(transitions_to_arrow(tr), schema=TRANSITIONS)
        lake.write_table(df, config.lake, "silver", "st", "transitions", mode="overwrite")

    silver(40, 1)
    run_stats(spark, config, dataset="st", spec=load_spec(SPEC_FILE))
    PrivacyLedger(None, config).set_budget("st", epsilon=100.0, delta=1e-3)
    exact_count(spark, config, "st", load_spec(SPEC_FILE))
    silver(55, 2)  # silver version 1; the statistics come from version 0
    argv = ["evaluate", "--dataset", "st", "--spec", str(SPEC_FILE), "--epsilon", "1",
            "--delta", "1e-5", "--iterations", "300", "--public-trajectories", "0",
            "--lake", str(root), "--tracking-uri", uri, "--json"]
    before = _ledger_version(root)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "silver transitions version 0" in err[0] and "committed version 1" in err[0]
    assert f"`gpope stats --dataset st --spec {SPEC_FILE}`" in err[0], err[0]
    assert "--allow-stale-stats" in err[0]
    assert _ledger_version(root) == before  # nothing reserved

    assert main([*argv, "--allow-stale-stats"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["m"] == 40  # released from the older statistics, as the warning says
    assert out["warnings"][0].startswith("STALE STATISTICS (--allow-stale-stats)")
    assert "version 0" in out["warnings"][0] and "version 1" in out["warnings"][0]
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(out["mlflow_run_id"])
    assert run.data.tags["gpope.stale_stats"] == "true"

    run_stats(spark, config, dataset="st", spec=load_spec(SPEC_FILE))
    exact_count(spark, config, "st", load_spec(SPEC_FILE))  # a new version: a new count
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["m"] == 55 and not any("STALE" in w for w in out["warnings"])
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(out["mlflow_run_id"])
    assert run.data.tags["gpope.stale_stats"] == "false"



class _Toy:
    """A toy estimator, the whole of it: the mean of the trajectories' b_i clipped to the public
    ``clip``, plus one Gaussian draw at its share of the run's joint multiplier."""

    @staticmethod
    def build():
        from gpope.core.estimators import Estimate, Estimator
        from gpope.core.evaluation.components import ReleaseComponent, gaussian_share
        from gpope.core.gpope.solver import GPOPEResult
        from gpope.core.mechanisms.clipping import clip_rows

        class Toy(Estimator):
            name = "toy"
            description = "noisy mean of clipped b (test only)"
            public_clip = False  # no noisy-statistics release: its own release only
            clip = 1.0  # the public L2 bound of one trajectory's b_i

            def plan(self, inputs, context, *, share=None, epsilon=None, delta=None):
                cal = gaussian_share(inputs, share)
                return ReleaseComponent(
                    name="toy", **cal, event=dp_accounting.GaussianDpEvent(cal["sigma"]),
                    label="toy(mean of clipped b)", releases=("theta", "values")), {}

            def execute(self, source, *, plan, settings, spec):
                n, clip = source.n, self.clip
                total = source.aggregate(
                    lambda idx, rows: clip_rows(rows[:, n * n:n * n + n], clip).sum(
                        axis=0, keepdims=True), n)
                noise = np.random.default_rng(settings.seed).normal(0, plan.sigma * clip, n)
                theta = (total + noise) / plan.m
                result = GPOPEResult(
                    theta=theta, w=np.zeros(n), theta_avg=None, sigma=plan.sigma,
                    epsilon=plan.spent_epsilon, delta=settings.delta, accountant=plan.accountant,
                    sampling="poisson", iterations=1, clip=clip, private=settings.seed is None,
                    privacy_note="toy")
                return Estimate(result=result, theta=theta, values=spec.reference_values(theta),
                                settings=settings)

        return Toy()


@pytest.fixture
def toy_estimator():
    from gpope.core.estimators import register, unregister

    register(_Toy.build())  # the one registration line
    yield "toy"
    unregister("toy")


def test_a_registered_toy_estimator_runs_through_cli_plan_ledger_mlflow_and_report(
        spark, chain_lake, tmp_path, capsys, toy_estimator):
    import pyarrow.compute as pc

    from gpope.cli import build_parser
    from gpope.core.evaluation.settings import RunSettings

    config, root = chain_lake
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert RunSettings(estimator="toy").estimator == "toy"  # the settings' constraint
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices
               and "evaluate" in a.choices)
    assert "toy: noisy mean of clipped b" in " ".join(
        sub.choices["evaluate"].format_help().split())
    assert main(["evaluate", "--dataset", "ch", "--spec", str(SPEC_FILE), "--epsilon", "20",
                 "--delta", "1e-5", "--estimator", "toy", "--seed", str(SEED),
                 "--allow-not-private", "--lake", str(root), "--tracking-uri", uri,
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["estimator"] == "toy" and report["iterations"] is None
    assert not {"passes", "clip", "step_size"} & set(report["settings"])
    assert report["statistics_sigma"] is None and report["spent_epsilon"] <= 20.0
    # oracle: the stored statistics, clipped and summed by numpy, plus the seeded draw
    spec = load_spec(SPEC_FILE)
    stats = DeltaTable(str(root / "gold" / "ch" / "trajectory_stats")).to_pyarrow_table()
    stats = stats.filter(pc.equal(stats.column("spec_id"), spec.spec_id))
    b = np.array(stats.column("b").to_pylist(), dtype=np.float64)
    clipped = b * np.minimum(1.0, 1.0 / np.linalg.norm(b, axis=1, keepdims=True))
    noise = np.random.default_rng(SEED).normal(0, report["sigma"], spec.n_features)
    assert len(b) == report["m"] == 40
    np.testing.assert_allclose(report["theta"], (clipped.sum(axis=0) + noise) / 40,
                               rtol=1e-9, atol=1e-12)
    # the ledger charged the run; MLflow holds the toy's params, none of the solver's
    entry = PrivacyLedger(None, config).entry("ch", report["run_id"])
    assert entry.status == "released" and entry.epsilon == 20.0
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report["mlflow_run_id"])
    assert run.data.params["epsilon"] == "20.0" and "iterations" not in run.data.params
    rows = [r for r in DeltaTable(str(root / "gold" / "released_values")).to_pyarrow_table()
            .to_pylist() if r["run_id"] == report["run_id"]]
    assert {r["estimator"] for r in rows if r["state"] in spec.reference_names} == {"toy"}
    # the policy value, from its own share of the toy's run (the run releases it)
    assert {"policy_value", "behaviour_value", "policy_contrast"} <= {r["state"] for r in rows}


def test_an_unregistered_estimator_is_refused_everywhere():
    from gpope.cli import build_parser
    from gpope.core.evaluation.settings import RunSettings

    with pytest.raises(ConfigError, match="'estimator' parameter of RunSettings"):
        RunSettings(estimator="toy")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["evaluate", "--dataset", "d", "--spec", "s.yaml",
                                   "--epsilon", "1", "--delta", "1e-6", "--estimator", "toy"])

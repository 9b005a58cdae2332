"""The evaluate stage end to end: ledger, released_estimates, MLflow; memory and streamed paths."""

from __future__ import annotations

import dataclasses
import json

import mlflow
import numpy as np
import pytest

from gpope.config import load_config
from gpope.core.accounting import calibrate_sigma
from gpope.core.envs import mountaincar
from gpope.core.evaluation.settings import SettingsLayer
from gpope.core.gpope.solver import GPOPEConfig, run_gpope
from gpope.core.policies import importance_ratios
from gpope.core.spec import EvaluationSpec
from gpope.core.statistics import statistics_from_transitions
from gpope.shell import lake
from gpope.shell.evaluate.report import EvaluationReport
from gpope.shell.evaluate.run import run_evaluate
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import PRIVACY_LEDGER, RELEASED_ESTIMATES, TRANSITIONS

pytestmark = pytest.mark.spark

SPEC = {
    "name": "mc_eval",
    "domain": "mountaincar",
    "gamma": 0.95,
    "normalization": "transition",
    "length_scale": 60,
    "reward_scale": 0.05,
    "feature_map": {"kind": "fourier", "order": 2, "low": [-1.2, -0.07], "high": [0.6, 0.07]},
    "target_policy": {"kind": "uniform", "n_actions": 3},
    "reference_states": {"bottom": [-0.5, 0.0], "right": [0.3, 0.02]},
}
ITER = 3000


@pytest.fixture(scope="module")
def setup(spark, tmp_path_factory, exact_count):
    tmp = tmp_path_factory.mktemp("evaluate")
    config = load_config(None, lake={"root": str(tmp / "lake")})
    behaviour = mountaincar.learned_policy("epsilon_greedy", epsilon=0.1)
    transitions = mountaincar.generate(60, np.random.default_rng(11), behaviour, max_steps=60)
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    spec = EvaluationSpec.from_mapping(SPEC)
    # "mcu" (same rows) takes the uniform-sampling runs: a dataset's runs share one
    # neighbouring relation (the ledger refuses to mix replace-one and add/remove runs)
    for name in ("mc", "mcu"):
        lake.write_table(df, config.lake, "silver", name, "transitions", mode="overwrite")
        run_stats(spark, config, dataset=name, spec=spec)
        PrivacyLedger(spark, config).set_budget(name, epsilon=100.0, delta=1e-3)
        exact_count(spark, config, name, spec)
    return config, spec, transitions, f"sqlite:///{tmp / 'mlflow.db'}"


def _options(**kw):
    # Every solver setting explicit (the command-line layer): q = 1/m via batch_size 1.
    base = dict(epsilon=1.0, delta=1e-5, iterations=ITER, clip=1.0, step_size=0.2,
                sampling="poisson", averaging="tail", public_trajectories=15,
                public_max_length=40, trace_every=500, step_schedule="constant",
                step_offset=1.0, tail_fraction=0.5,
                allow_not_private=True)
    base.update(kw)
    if base["sampling"] == "poisson" and "batch_rate" not in base:
        base["batch_size"] = 1.0
    return SettingsLayer(base)


def _core_result(spec, transitions, *, seed, sampling="poisson", epsilon=1.0, share=0.1):
    """The core alone: statistics from the transitions, sigma from the accountant, run_gpope.

    GPOPE gets the (1 - share) part of (epsilon, delta); the rest buys the noisy-statistics release
    (private MSPBE and intervals; basic composition)."""
    epsilon, delta = epsilon * (1 - share), 1e-5 * (1 - share)
    scaled = transitions.__class__(**{**transitions.__dict__, "reward": transitions.reward * 0.05})
    rho = importance_ratios(spec.target_policy, transitions)
    stats = statistics_from_transitions(scaled, spec.feature_map, rho, gamma=0.95,
                                        normalization="transition", length_scale=60,
                                        representation="dense")
    m = transitions.n_trajectories
    q = 1.0 / m if sampling == "poisson" else None
    sigma = calibrate_sigma(m=m, iterations=ITER, epsilon=epsilon, delta=delta, sampling=sampling,
                            batch_rate=q)
    cfg = GPOPEConfig(iterations=ITER, step_size=0.2, clip=1.0, noise_multiplier=sigma,
                      delta=delta, sampling=sampling, batch_rate=q, averaging="tail",
                      trace_every=500)
    return run_gpope(stats, cfg, seed), sigma


def test_seeded_release_equals_the_core_and_is_recorded_everywhere(spark, setup):
    config, spec, transitions, uri = setup
    report = run_evaluate(spark, config, dataset="mc", spec=spec,
                          options=_options(seed=7, private_diagnostics=True), tracking_uri=uri)
    core, sigma = _core_result(spec, transitions, seed=7)
    assert report.sigma == pytest.approx(sigma, rel=1e-12)
    assert report.m == transitions.n_trajectories
    np.testing.assert_allclose(report.theta, core.theta_avg, rtol=1e-9, atol=1e-12)
    assert not report.private

    # released_estimates: one row, the documented columns, values = post-processing of theta
    rel = lake.read_shared_table(spark, config.lake, "released_estimates")
    assert [f.name for f in rel.schema.fields] == [f.name for f in RELEASED_ESTIMATES.fields]
    row = rel.where(rel.run_id == report.run_id).collect()
    assert len(row) == 1
    row = row[0]
    assert (row.dataset, row.spec_id, row.private) == ("mc", spec.spec_id, False)
    phi = spec.feature_map(np.array([[-0.5, 0.0], [0.3, 0.02]]))
    np.testing.assert_allclose(row.values, phi @ core.theta_avg / 0.05, rtol=1e-8)
    assert row.reference_states == ["bottom", "right"]

    # ledger: reserved then released, counted once
    ledger = lake.read_shared_table(spark, config.lake, "privacy_ledger")
    assert [f.name for f in ledger.schema.fields] == [f.name for f in PRIVACY_LEDGER.fields]
    statuses = [r.status for r in ledger.where(ledger.run_id == report.run_id).orderBy("created_at").collect()]
    assert statuses == ["reserved", "released"]

    # MLflow: params named like the CLI flags, metrics per traced step, artifacts, tags, lineage
    client = mlflow.MlflowClient(tracking_uri=uri)
    run = client.get_run(report.mlflow_run_id)
    p = run.data.params
    assert p["spec_id"] == spec.spec_id and p["dataset"] == "mc" and p["spec"] == "mc_eval"
    assert float(p["epsilon"]) == 1.0 and float(p["delta"]) == 1e-5
    assert int(p["m"]) == 60 and int(p["iterations"]) == ITER and float(p["clip"]) == 1.0
    assert float(p["step_size"]) == 0.2 and float(p["tail_fraction"]) == 0.5
    assert float(p["gamma"]) == 0.95 and float(p["reward_scale"]) == 0.05
    assert (int(p["public_trajectories"]), p["public_max_length"]) == (15, "40")
    assert float(p["sigma"]) == pytest.approx(sigma, rel=1e-9)
    assert p["accountant"] == "pld" and p["sampling"] == "poisson" and p["seeded"] == "True"
    assert "seed" not in p and "N" not in p
    tags = run.data.tags
    assert tags["gpope.private"] == "false" and tags["gpope.estimator"] == "gpope"
    assert tags["gpope.run_id"] == report.run_id and tags["gpope.version"]
    assert run.info.run_name.startswith("mc | mc_eval | gpope | eps=1 | ")
    history = client.get_metric_history(run.info.run_id, "public_mspbe")
    assert sorted(h.step for h in history) == list(range(0, ITER + 1, 500))
    m_ = run.data.metrics
    assert m_["relative_mspbe_public"] == pytest.approx(
        m_["public_mspbe_final"] / m_["public_mspbe_zero"], rel=1e-12)
    assert m_["spent_epsilon"] <= 1.0 + 1e-12
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"theta.json", "values.png", "values.json", "config.json", "spec.json",
            "options.json"} <= artifacts
    theta_file = client.download_artifacts(run.info.run_id, "theta.json")
    with open(theta_file) as fh:
        np.testing.assert_allclose(json.load(fh)["theta"], core.theta_avg, rtol=1e-9, atol=1e-12)
    with open(client.download_artifacts(run.info.run_id, "options.json")) as fh:
        assert "seed" not in json.load(fh)
    with open(client.download_artifacts(run.info.run_id, "values.json")) as fh:
        logged = json.load(fh)  # a Fourier map: each V estimates its features' fixed point
    at = logged["columns"].index("estimand")
    assert [row[at].startswith("LSTD fixed point of the spec's features")
            for row in logged["data"]] == [True, True]
    # lineage: the statistics table and its Delta version as an MLflow dataset input
    (inp,) = run.inputs.dataset_inputs
    source = json.loads(inp.dataset.source)
    assert source["path"] == lake.table_location(config.lake, "gold", "mc", "trajectory_stats")
    version = lake.Lake.from_settings(spark, config.lake).version(
        lake.TableRef("gold", "trajectory_stats", "mc"))
    assert source.get("delta_table_version", 0) == version  # MLflow drops a version 0
    assert inp.dataset.name == f"gold/mc/trajectory_stats@v{version}"
    assert p["statistics_table"] == f"gold/mc/trajectory_stats@v{version}"
    # private diagnostics only in the separate diagnostics experiment with their tag, never
    # beside released metrics or in the releases' experiment
    assert "diagnostic.private" not in tags
    assert not any("lstd" in k or "private_diagnostic" in k for k in m_)
    released_exp = client.get_experiment(run.info.experiment_id).name
    diag_exp = client.get_experiment_by_name(f"{released_exp}/private-diagnostics")
    assert not client.search_runs([run.info.experiment_id], "tags.`diagnostic.private` = 'true'")
    (child,) = client.search_runs(
        [diag_exp.experiment_id], f"tags.`gpope.released_run_id` = '{run.info.run_id}'")
    assert child.data.tags["diagnostic.private"] == "true"
    assert "mspbe_released_theta" in child.data.metrics
    assert any(k.startswith("lstd_value.") for k in child.data.metrics)


def test_streamed_path_releases_the_same_theta_as_in_memory(spark, setup):
    config, spec, transitions, uri = setup
    opts = dict(seed=3, sampling="uniform", public_trajectories=0)
    memory = run_evaluate(spark, config, dataset="mcu", spec=spec,
                          options=_options(path="memory", **opts), tracking_uri=uri)
    streamed = run_evaluate(spark, config, dataset="mcu", spec=spec,
                            options=_options(path="stream", rows_per_fetch=700, **opts),
                            tracking_uri=uri)
    assert (memory.path, streamed.path) == ("memory", "stream")
    # public_trajectories=0: no public clip bound, so no statistics release: GPOPE gets the whole budget
    core, _ = _core_result(spec, transitions, seed=3, sampling="uniform", share=0.0)
    np.testing.assert_allclose(streamed.theta, memory.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(streamed.theta, core.theta_avg, rtol=1e-9, atol=1e-12)
    # a different seed gives a different release (the test can fail)
    other = run_evaluate(spark, config, dataset="mcu", spec=spec,
                         options=_options(path="stream", rows_per_fetch=700, **{**opts, "seed": 4}),
                         tracking_uri=uri)
    assert not np.allclose(other.theta, streamed.theta)


def test_row_file_fetcher_reads_the_rows_the_spark_join_fetches(spark, setup, tmp_path,
                                                                 monkeypatch):
    """The streamed path's row file (a local master) and its Spark join (elsewhere) bring the
    same float64 rows in plan order, repeats kept, and the row file's folder is removed."""
    import tempfile

    from gpope.shell.pipeline.sampled import spark_fetcher, streamed_fetcher
    from gpope.shell.pipeline.stats import read_statistics

    config, spec, _, _ = setup
    stats_df = read_statistics(spark, config, dataset="mc", spec_id=spec.spec_id)
    m, n = stats_df.count(), spec.n_features
    ids = np.random.default_rng(5).integers(0, m, size=3 * m)  # every block repeats ids
    joined = spark_fetcher(spark, stats_df, n, normalization=spec.normalization)(ids)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's folders only
    with streamed_fetcher(spark, stats_df, n, m=m, normalization=spec.normalization) as fetch:
        made = list(tmp_path.glob("gpope-stream-*"))
        assert len(made) == 1  # a local master: the row file, not the join
        read = fetch(ids)
    assert not made[0].exists()
    assert np.array_equal(read.tau, joined.tau)
    for got, want in zip(read.dense(), joined.dense(), strict=True):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(read.dense()[1], read.dense()[1][::-1])  # rows differ: order counts


def test_unseeded_run_is_marked_private(spark, setup):
    config, spec, _, uri = setup
    report = run_evaluate(spark, config, dataset="mc", spec=spec,
                          options=_options(public_trajectories=0), tracking_uri=uri)
    assert report.private
    rel = lake.read_shared_table(spark, config.lake, "released_estimates")
    assert rel.where(rel.run_id == report.run_id).collect()[0].private is True
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id)
    assert run.data.tags["gpope.private"] == "true"
    assert "diagnostic.private" not in run.data.tags  # not asked for


def test_secure_noise_run_releases_grid_values_privately(spark, setup):
    # --secure-noise end to end: the solver and the noisy-statistics release draw discrete
    # Gaussian noise from the OS CSPRNG; the released theta lies on the public grid.
    config, spec, _, uri = setup
    grid = 2.0**-8  # a public grid set by the user (the default is the noise std * 2^-12)
    report = run_evaluate(spark, config, dataset="mcu", spec=spec,
                          options=_options(public_trajectories=0, secure_noise=True,
                                           sampling="uniform", accountant="rdp",
                                           noise_grid=grid),
                          tracking_uri=uri)
    assert report.private
    rel = lake.read_shared_table(spark, config.lake, "released_estimates")
    theta = np.asarray(rel.where(rel.run_id == report.run_id).collect()[0].theta)
    assert np.all(np.isfinite(theta))
    np.testing.assert_allclose(theta / grid, np.rint(theta / grid), rtol=0, atol=1e-6)


def test_spec_evaluation_block_sets_the_run_and_flags_override_it(spark, setup):
    # The spec's evaluation: block (tuned on public data) is used when no option says otherwise;
    # the reported settings say where each came from; an explicit option wins over the block.
    from gpope.core.gpope.operating import TunedPoint

    config, spec, transitions, uri = setup
    block = SettingsLayer(
        dict(sampling="poisson", passes=5.0, iterations=400, step_schedule="inverse",
             step_offset_fraction=0.1, averaging="tail", tail_fraction=0.5), "spec",
        tuned=(TunedPoint(epsilon=0.5, clip=0.3, step_size=2.0),
               TunedPoint(epsilon=50.0, clip=0.9, step_size=8.0)),
        tuning={"patients": 60, "public_seed": 1},
    )
    tuned = dataclasses.replace(spec, evaluation=block)
    opts = SettingsLayer.of(epsilon=1.0, delta=1e-5, seed=5, allow_not_private=True,
                           public_trajectories=15,
                           public_max_length=40)
    report = run_evaluate(spark, config, dataset="mc", spec=tuned, options=opts, tracking_uri=uri)
    st = report.settings
    m = transitions.n_trajectories
    # m epsilon = 60 is nearest (log scale) to m_pub * 0.5 = 30, not 60 * 50 = 3000
    assert (st["clip"], st["step_size"]) == (0.3, 2.0)
    assert report.iterations == 400 and st["batch_rate"] == pytest.approx(5.0 / 400)
    assert st["passes"] == pytest.approx(5.0) and st["step_offset"] == pytest.approx(40.0)
    assert st["source"]["clip"] == "spec" and st["source"]["passes"] == "spec"
    assert st["touched_trajectories"] == pytest.approx(5.0 * m)
    # the released theta is the core's run at exactly these settings
    scaled = transitions.__class__(**{**transitions.__dict__, "reward": transitions.reward * 0.05})
    rho = importance_ratios(spec.target_policy, transitions)
    stats = statistics_from_transitions(scaled, spec.feature_map, rho, gamma=0.95,
                                        normalization="transition", length_scale=60,
                                        representation="dense")
    cfg = GPOPEConfig(iterations=400, step_size=2.0, clip=0.3, noise_multiplier=report.sigma,
                      sampling="poisson", batch_rate=5.0 / 400, step_schedule="inverse",
                      step_offset=40.0, averaging="tail", trace_every=20)
    np.testing.assert_allclose(report.theta, run_gpope(stats, cfg, 5).theta_avg, rtol=1e-9,
                               atol=1e-12)

    over = run_evaluate(spark, config, dataset="mc", spec=tuned, tracking_uri=uri,
                        options=opts.replace(clip=0.7, iterations=100))
    assert over.settings["clip"] == 0.7 and over.settings["source"]["clip"] == "options"
    # --json shows where every setting came from: command line, spec block or configuration
    shown = json.loads(json.dumps(over.to_dict()))["settings"]["source"]
    assert (shown["clip"], shown["step_size"], shown["iterations"]) == ("options", "spec",
                                                                        "options")
    assert shown["ci_level"] == "conf" and shown["epsilon"] == "options"
    assert over.settings["step_size"] == 2.0  # still the block's
    # inside the tuned range (m eps = 60 within 30..3000): no warning, tag false; at epsilon 0.1
    # (m eps = 6 < 30 / 2) the run still releases but says it is outside what was tuned
    client = mlflow.MlflowClient(tracking_uri=uri)
    assert client.get_run(report.mlflow_run_id).data.tags["gpope.outside_tuned_range"] == "false"
    assert not any("outside what was tuned" in w for w in report.warnings)
    far = run_evaluate(spark, config, dataset="mc", spec=tuned, tracking_uri=uri,
                       options=opts.replace(epsilon=0.1, iterations=100))
    assert any("m*epsilon = 6 is outside the tuned range 30..3e+03" in w for w in far.warnings)
    assert client.get_run(far.mlflow_run_id).data.tags["gpope.outside_tuned_range"] == "true"
    assert "outside what was tuned" in far.summary()
    assert over.iterations == 100 and over.settings["batch_rate"] == pytest.approx(5.0 / 100)


def test_guard_says_when_the_release_is_no_better_than_zero(spark, setup, capsys):
    # A step size far too large for the noise: the public relative MSPBE is >= 1, and the
    # command's output, its JSON and the MLflow run all say the release is useless.
    config, spec, _, uri = setup
    report = run_evaluate(spark, config, dataset="mc", spec=spec, tracking_uri=uri,
                          options=_options(step_size=50.0, iterations=200))
    assert report.public_relative_mspbe >= 1.0
    assert report.no_better_than_zero and report.utility_guard == "no_better_than_zero"
    lo, hi = report.to_dict()["private_relative_mspbe_interval"]  # the private one's bootstrap
    assert 0.0 <= lo <= hi
    assert "MSPBE) is NOT BELOW that of theta = 0" in report.summary()
    assert "`gpope tune --spec FILE`" in report.summary()  # the spec has a simulator to tune on
    assert report.to_dict()["no_better_than_zero"] is True
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id)
    assert run.data.tags["gpope.utility_guard"] == "no_better_than_zero"


def test_unbounded_intervals_print_as_unbounded_with_a_note():
    from gpope.shell.pipeline.interval_notes import UNBOUNDED_NOTE, format_span, unbounded_note

    inf = float("inf")
    assert format_span(-inf, inf) == "unbounded" and format_span(1.0, 2.5) == "[1, 2.5]"
    assert format_span(-inf, 3.0) == "[-inf, 3]"
    fields = dict(run_id="r", mlflow_run_id=None, dataset="d", spec_id="s", spec_name="n",
                  policy="p", epsilon=1.0, delta=1e-5, spent_epsilon=1.0, accountant="pld",
                  sigma=1.0, m=10, n=1, iterations=10, sampling="poisson", batch_rate=0.1,
                  private=True, path="memory", theta=np.zeros(1), reference_values={"s0": 1.0},
                  public_mspbe=None, remaining_epsilon=0.0, remaining_delta=0.0)
    report = EvaluationReport(**{**fields, "intervals": {
        "value": [1.0], "lower": [-inf], "upper": [inf], "lower_bound": [-inf], "se": [inf],
        "level": 0.95, "df": 399}})
    text = report.summary()
    assert "95% interval unbounded" in text and UNBOUNDED_NOTE in text
    # unbounded because the identification test did not reject a singular A: that note instead
    report = EvaluationReport(**{**fields, "intervals": {
        "value": [1.0], "lower": [-inf], "upper": [inf], "lower_bound": [-inf], "se": [inf],
        "level": 0.95, "df": 399, "unidentified": True, "separation": 0.4213}})
    text = report.summary()
    assert "95% interval unbounded" in text and UNBOUNDED_NOTE not in text
    assert unbounded_note(report.intervals) in text and "singular A" in text and "0.42" in text
    assert unbounded_note({"lower": [0.0], "upper": [1.0], "unidentified": True}) is None
    # the advice names only what helps the run's estimator (--statistics-share is a gpope knob)
    untuned = unbounded_note(report.intervals, estimator="untuned")
    assert "--statistics-share" not in untuned and "more patients or a larger epsilon" in untuned


def test_tracking_failure_after_release_reports_the_release_and_track_relogs_it(
    spark, setup, tmp_path, capsys
):
    # An MLflow store that cannot be opened (its directory is a file): the run is released and
    # charged, the command does not fail, and its one line says so and how to re-log it;
    # `gpope track --run-id` then logs the released numbers from the lake, once.
    from gpope.cli import main

    config, spec, _, uri = setup
    (tmp_path / "blocked").write_text("a file where the store's directory should be")
    broken = f"sqlite:///{tmp_path / 'blocked' / 'mlflow.db'}"
    report = run_evaluate(spark, config, dataset="mc", spec=spec,
                          options=_options(public_trajectories=0), tracking_uri=broken)
    assert report.mlflow_run_id is None
    line = report.warnings[0]
    assert "WAS RELEASED" in line and f"gpope track --run-id {report.run_id}" in line
    assert "Do not re-run" in line and line in report.summary()
    assert PrivacyLedger(None, config).entry("mc", report.run_id).status == "released"
    relog = ["track", "--run-id", report.run_id, "--lake", str(config.lake.root),
             "--tracking-uri", uri, "--json"]
    assert main(relog) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["created"] is True and first["run_id"] == report.run_id
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(first["mlflow_run_id"])
    assert run.data.tags["gpope.run_id"] == report.run_id
    assert run.data.tags["gpope.relogged"] == "lake"
    for state, value in report.reference_values.items():
        assert run.data.metrics[f"value.{state}"] == pytest.approx(value, rel=1e-12)
    assert run.data.metrics["reserved_epsilon"] == 1.0
    assert main(relog) == 0  # idempotent: already tracked, nothing logged
    again = json.loads(capsys.readouterr().out)
    assert again == {**first, "created": False}
    assert main(["track", "--run-id", "0" * 32, "--lake", str(config.lake.root),
                 "--tracking-uri", uri]) == 2
    assert "has no release" in capsys.readouterr().err
    # an unreachable tracking server (connection refused): MLflow's own retries would take
    # about 4 minutes after the release; under tracking.http_* the run reports in seconds
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{sock.getsockname()[1]}"
    start = time.monotonic()
    report = run_evaluate(spark, config, dataset="mc", spec=spec,
                          options=_options(public_trajectories=0), tracking_uri=down)
    assert time.monotonic() - start < 60
    assert report.mlflow_run_id is None and "WAS RELEASED" in report.warnings[0]
    assert f"gpope track --run-id {report.run_id}" in report.warnings[0]
    assert main(["track", "--run-id", report.run_id, "--lake", str(config.lake.root),
                 "--tracking-uri", down]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "still untracked" in err[0], err


def test_the_default_releases_what_the_in_memory_benchmarks_measure(spark, setup):
    # benchmarks/own_data_*core.py measure the tuning-free default in memory
    # (release_untuned_rows on the statistics rows); the pipeline's Spark aggregates must release
    # the same numbers from the same rows, noise seed and multipliers, or those benchmarks
    # describe another estimator than the one a user runs
    from gpope.core.ssp import statistics_vectors
    from gpope.core.trajectories.batch import statistics_of_transitions
    from gpope.core.untuned.release import UntunedSettings, release_untuned_rows, split_untuned

    config, spec, transitions, uri = setup
    report = run_evaluate(spark, config, dataset="mc", spec=spec,
                          options=SettingsLayer({"epsilon": 20.0, "delta": 1e-5, "seed": 5,
                                                 "allow_not_private": True}), tracking_uri=uri)
    assert report.estimator == "untuned" and not report.private
    rows = statistics_of_transitions(transitions, spec).to_rows()
    vec = statistics_vectors(rows["A"], rows["b"], rows["C"])
    settings = UntunedSettings()
    # the run's multiplier of the SSP sums (no policy value release: the spec has no reward
    # bounds) is the statistics' share of the one Gaussian mechanism the default composes to
    sigmas = split_untuned(report.statistics_sigma * np.sqrt(settings.statistics_share), settings)
    core = release_untuned_rows(vec, spec, sigmas=sigmas, moments_share=0.1, settings=settings,
                                rng=np.random.default_rng(np.random.SeedSequence([5, 0x554E54])))
    assert report.ssp_clip == pytest.approx(core.clip, rel=1e-12)
    assert np.count_nonzero(core.theta) >= 2  # 60 trajectories at epsilon 20: features supported
    np.testing.assert_allclose(report.theta, core.theta, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose([report.reference_values[k] for k, _ in spec.reference_states],
                               core.interval.value, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(report.intervals["lower"], core.interval.lower, rtol=1e-9)
    # another noise seed in memory gives another release (the comparison can fail)
    other = release_untuned_rows(vec, spec, sigmas=sigmas, moments_share=0.1, settings=settings,
                                 rng=np.random.default_rng(np.random.SeedSequence([6, 0x554E54])))
    assert not np.allclose(other.theta, report.theta)
    _check_relation_against_dp_accounting(config, report)


def _check_relation_against_dp_accounting(config, report) -> None:
    """docs/ARCHITECTURE.md section 4, "Neighbouring relation": a default run's stored ledger
    event is charged under add/remove-one and holds (m is public only as the count m~, whose own
    stored event is checked too); restated under replace-one at the epsilon the report's --json
    and `budget show --relation replace_one` state. Oracle:
    dp-accounting's PLD accountant on the stored event, under each relation (under REPLACE_ONE it
    reads each Gaussian leaf as a query whose replacement moves it by twice its clip)."""
    import contextlib
    import io

    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    from gpope.cli import main
    from gpope.core.accounting.composition import mechanism_from_json

    stored = mechanism_from_json(PrivacyLedger(None, config).entry("mc", report.run_id).mechanism)
    assert stored.relation == report.relation == "add_or_remove_one"

    def pld(relation):
        acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=relation)
        acc.compose(stored.event)
        return acc.get_epsilon(report.delta)

    R = dp_accounting.NeighboringRelation
    assert pld(R.ADD_OR_REMOVE_ONE) <= report.epsilon * 1.01  # the charge holds for its event
    replace_one = pld(R.REPLACE_ONE)
    assert report.relation_epsilons["add_or_remove_one"] == report.epsilon
    assert report.relation_epsilons["replace_one"] == pytest.approx(replace_one, rel=0.01)
    assert replace_one > report.epsilon  # the replace-one guarantee is the weaker one, restated
    assert "charged under add/remove-one adjacency, which holds: m is public only as the noisy " \
        "count m~" in report.summary()
    # the count m~ the run published is a release of its own, charged once under add/remove:
    # its stored event is the Gaussian of the released_counts row, within its charge for PLD
    from gpope.shell.pipeline.released_count import read_counts

    (count,) = read_counts(config, dataset="mc")  # the seeded run reads the released one
    assert report.m == count["m_noisy"] and count["private"]
    counted = mechanism_from_json(PrivacyLedger(None, config).entry("mc", count["run_id"])
                                  .mechanism)
    assert counted.relation == "add_or_remove_one"
    assert counted.event == dp_accounting.GaussianDpEvent(count["noise_std"])
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=R.ADD_OR_REMOVE_ONE)
    acc.compose(counted.event)
    assert acc.get_epsilon(count["delta"]) <= count["epsilon"] * 1.01
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["budget", "show", "--dataset", "mc", "--relation", "replace_one", "--json",
                     "--lake", str(config.lake.root)]) == 0
    shown = json.loads(out.getvalue())
    assert shown["relation"] == "add_or_remove_one"
    assert shown["under_relation"]["runs"][report.run_id] == pytest.approx(replace_one, rel=0.01)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["budget", "show", "--dataset", "mc", "--lake", str(config.lake.root)]) == 0
    (line,) = [x for x in out.getvalue().splitlines() if x.strip().startswith("relation")]
    assert "add/remove-one adjacency" in line and "add/remove-one holds" in line

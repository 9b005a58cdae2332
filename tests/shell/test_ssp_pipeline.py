"""SSP through the pipeline: the Spark aggregate equals the core's sums; `--estimator ssp` runs
are accounted, released (released_estimates.estimator, released_values with intervals) and logged."""

from __future__ import annotations

import mlflow
import numpy as np
import pytest

from gpope.config import load_config
from gpope.core import ssp
from gpope.core.envs import chain as chain_env
from gpope.core.evaluation.settings import SettingsLayer
from gpope.core.intervals import bootstrap_interval, split_interval, ssp_values
from gpope.core.spec import EvaluationSpec
from gpope.errors import DataError
from gpope.shell import lake
from gpope.shell.evaluate.intervals import noise_generators
from gpope.shell.evaluate.run import run_evaluate
from gpope.shell.pipeline.interval_notes import unbounded_note
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.ssp import (
    public_residual_bound,
    spark_group_sums,
    spark_moment_sum,
    statistics_files,
)
from gpope.shell.pipeline.stats import read_statistics, run_stats, transitions_to_arrow
from gpope.shell.schemas import RELEASED_VALUES, TRANSITIONS

pytestmark = pytest.mark.spark

CFG = chain_env.ChainConfig(n_states=8, max_steps=60)
SPEC = {
    "name": "chain8", "gamma": CFG.gamma, "normalization": "transition", "length_scale": 60,
    "feature_map": {"kind": "tabular", "n_states": 8},
    "target_policy": {"kind": "uniform", "n_actions": 1},
    "reference_states": {"s0": [0], "s3": [3], "s6": [6]},
}
M = 400


@pytest.fixture(scope="module")
def setup(spark, tmp_path_factory, exact_count):
    tmp = tmp_path_factory.mktemp("ssp")
    config = load_config(None, lake={"root": str(tmp / "lake")})
    transitions = chain_env.generate(M, np.random.default_rng(5), CFG)
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    lake.write_table(df.repartition(3), config.lake, "silver", "ch", "transitions", mode="overwrite")
    spec = EvaluationSpec.from_mapping(SPEC)
    run_stats(spark, config, dataset="ch", spec=spec)
    PrivacyLedger(spark, config).set_budget("ch", epsilon=100.0, delta=1e-3)
    exact_count(spark, config, "ch", spec)
    return config, spec, f"sqlite:///{tmp / 'mlflow.db'}"


def _core_vectors(spark, config, spec):
    """Oracle: the statistics rows on the driver, flattened by the core."""
    rows = read_statistics(spark, config, dataset="ch", spec_id=spec.spec_id).toPandas()
    n = spec.n_features
    vec = ssp.statistics_vectors(np.stack(rows["A"].to_numpy()), np.stack(rows["b"].to_numpy()),
                                 np.stack(rows["C"].to_numpy()))
    assert vec.shape == (M, 2 * n * n + n)
    return rows["traj_index"].to_numpy(), vec


@pytest.mark.parametrize("clip", [0.02, 10.0])
def test_spark_sums_equal_core_sums_of_the_same_clipped_statistics(spark, setup, clip):
    config, spec, _ = setup
    idx, vec = _core_vectors(spark, config, spec)
    n = spec.n_features
    stats = read_statistics(spark, config, dataset="ch", spec_id=spec.spec_id).repartition(4)
    got = spark_group_sums(stats, n=n, clip=clip, key=99, groups=5, expected_rows=M)
    want = ssp.clipped_group_sums([(idx, vec)], n=n, clip=clip, key=99, groups=5)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    if clip < 1:  # clipping was active: the bound holds per row, so per group sum <= count * clip
        assert np.linalg.norm(ssp.clip_statistics(vec, clip), axis=1).max() <= clip * (1 + 1e-12)
    theta = np.linspace(-1.0, 2.0, n)
    bound = ssp.residual_bound(theta, clip) / 3.0
    got_m = spark_moment_sum(stats, n=n, clip=clip, theta=theta, bound=bound, expected_rows=M)
    want_m = ssp.clipped_moment_sum(vec, theta, n=n, clip=clip, bound=bound)
    np.testing.assert_allclose(got_m, want_m, rtol=1e-12, atol=1e-12 * np.abs(want_m).max())
    # the delta-rs storage's path (what `gpope evaluate` uses here): the same sums from the
    # table's files, each read by a Spark task's Python worker
    files = statistics_files(spark, config, dataset="ch", spec_id=spec.spec_id)
    assert files is not None and len(files.paths) >= 2  # the stats stage wrote several files
    got_f = spark_group_sums(files, n=n, clip=clip, key=99, groups=5, expected_rows=M)
    np.testing.assert_allclose(got_f, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    got_fm = spark_moment_sum(files, n=n, clip=clip, theta=theta, bound=bound, expected_rows=M)
    np.testing.assert_allclose(got_fm, want_m, rtol=1e-12, atol=1e-12 * np.abs(want_m).max())
    with pytest.raises(DataError, match="m = 401"):  # the row count is still checked
        spark_group_sums(files, n=n, clip=clip, expected_rows=M + 1)


def test_ssp_run_is_accounted_released_with_intervals_and_logged(spark, setup):
    config, spec, uri = setup
    # epsilon 8: the noisy summed A is separated from singularity (s_min 0.31 against the test's
    # 0.13; at epsilon 2, 0.27 against 0.42, every value would be unbounded)
    opts = SettingsLayer.of(epsilon=8.0, delta=1e-5, estimator="ssp", ssp_clip=0.05, moments_share=0.2,
                           seed=4, allow_not_private=True, public_trajectories=50)
    report = run_evaluate(spark, config, dataset="ch", spec=spec, options=opts, tracking_uri=uri)

    # the release equals the core mechanism on the same clipped sums with the same streams
    _idx, vec = _core_vectors(spark, config, spec)
    n = spec.n_features
    rng, boot = noise_generators(4)
    sums = ssp.clip_statistics(vec, 0.05).sum(axis=0, keepdims=True)
    sigma = ssp.ssp_sigma(m=M, epsilon=8.0, delta=1e-5)
    s1, s2 = ssp.split_sigma(sigma, 0.2)
    noisy = ssp.release_noisy_statistics(sums, n=n, m=M, sigma=s1, clip=0.05, rng=rng)
    theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
    bound = public_residual_bound(spec, theta, clip=0.05, n_trajectories=50, quantile=0.99)
    moments = ssp.release_moments(ssp.clipped_moment_sum(vec, theta, n=n, clip=0.05, bound=bound),
                                  n=n, theta=theta, sigma=s2, bound=bound, rng=rng)
    _, both = bootstrap_interval(noisy, moments, lambda th: np.concatenate([spec.reference_values(th), th]),
                                 rng=boot, regularize=False)
    iv, _ = split_interval(both, 3)
    assert report.sigma == pytest.approx(sigma, rel=1e-12)
    np.testing.assert_allclose(report.theta, theta, rtol=1e-9, atol=1e-12)
    # the bootstrap quantiles amplify the sums' rounding differences (Spark vs numpy order)
    np.testing.assert_allclose(report.intervals["lower"], iv.lower, rtol=1e-6, atol=1e-9)
    assert report.estimator == "ssp" and not report.private
    assert report.spent_epsilon <= 8.0 + 1e-12
    assert np.all(np.isfinite(iv.lower)) and np.all(np.isfinite(iv.upper))

    rel = lake.read_shared_table(spark, config.lake, "released_estimates")
    row = rel.where(rel.run_id == report.run_id).collect()[0]
    assert row.estimator == "ssp"
    vals = lake.read_shared_table(spark, config.lake, "released_values")
    assert [f.name for f in vals.schema.fields] == [
        "run_id", "dataset", "spec_id", "spec_name", "estimator", "state", "value", "lower", "upper",
        "lower_bound", "ci_level", "epsilon", "delta", "accountant", "private", "created_at",
        "estimand"]
    assert [f.name for f in vals.schema.fields] == [f.name for f in RELEASED_VALUES.fields]
    got = {r.state: r for r in vals.where(vals.run_id == report.run_id).collect()}
    assert sorted(got) == ["s0", "s3", "s6"]
    for i, s in enumerate(spec.reference_names):
        r = got[s]
        assert r.value == pytest.approx(row["values"][i], rel=1e-12)
        assert r.lower <= r.lower_bound <= r.value <= r.upper
        assert (r.ci_level, r.estimator, r.private, r.created_at) == (0.95, "ssp", False, row.created_at)
    ledger = lake.read_shared_table(spark, config.lake, "privacy_ledger")
    mech = ledger.where(ledger.run_id == report.run_id).collect()[0].mechanism
    assert "ssp(" in mech and "ComposedDpEvent" in mech and "GaussianDpEvent" in mech

    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id)
    assert run.data.params["estimator"] == "ssp"
    assert run.data.metrics["ssp_clip_used"] == pytest.approx(0.05)  # the public --ssp-clip
    assert run.data.tags["gpope.ssp_clip_source"] == "public"
    assert "ssp_clip_quantile_used" not in run.data.metrics
    assert run.data.metrics["relative_mspbe_private"] == pytest.approx(report.private_relative_mspbe)
    assert run.data.metrics["value_lower.s0"] == pytest.approx(report.intervals["lower"][0])
    assert "[" in report.summary() and "interval" in report.summary()
    # only what an ssp run uses: no GPOPE solver settings
    assert "operating point" not in report.summary() and "sampling" not in report.summary()
    # identified (the test is on by default): no note, no tag
    assert not report.intervals["unidentified"] and report.intervals["separation"] > 1.0
    assert "gpope.interval_note" not in run.data.tags and unbounded_note(report.intervals) is None


def test_gpope_run_records_private_mspbe_and_anchored_intervals(spark, setup):
    config, spec, uri = setup
    opts = SettingsLayer.of(epsilon=2.0, delta=1e-5, iterations=500, clip=0.05, step_size=0.5,
                           ssp_clip=0.05, seed=8, allow_not_private=True,
                           public_trajectories=50)
    report = run_evaluate(spark, config, dataset="ch", spec=spec, options=opts, tracking_uri=uri)
    assert report.estimator == "gpope" and report.statistics_epsilon == pytest.approx(0.2)
    v = np.array(list(report.reference_values.values()))
    iv = report.intervals
    assert np.all(np.array(iv["lower"]) <= v) and np.all(v <= np.array(iv["upper"]))
    assert report.private_relative_mspbe is not None and report.spent_epsilon <= 2.0 + 1e-12
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id)
    assert "mspbe_private" in run.data.metrics and run.data.params["estimator"] == "gpope"
    # the hull rests on the 10 % release (epsilon 0.2 on 400 patients), whose noisy A the
    # identification test (on by default) cannot separate from a singular one: every value is
    # unbounded, and the summary and the MLflow tag say why in one line
    assert iv["unidentified"] and iv["separation"] <= 1.0
    assert np.all(np.isinf(iv["lower"])) and np.all(np.isinf(iv["upper"]))
    note = unbounded_note(iv)
    assert "singular A" in note and note in report.summary()
    assert "operating point: " in report.summary() and "N 500, sampling " in report.summary()
    assert run.data.tags["gpope.interval_note"] == note
    # unbounded ends: no metric (MLflow would show NaN), a tag per state naming the omitted ones
    assert not any(k.startswith(("value_lower", "value_upper")) for k in run.data.metrics)
    assert run.data.tags["gpope.unbounded"] == ",".join(spec.reference_names)
    for s in spec.reference_names:
        assert run.data.tags[f"gpope.unbounded.{s}"] == "value_lower,value_upper,value_lower_bound"
    assert run.data.params["ssp_identification"] == "True"


def test_interval_groups_cost_one_run_and_release_the_t_interval_of_the_groups(spark, setup):

    from scipy.stats import t

    from gpope.core.accounting import calibrate_sigma, gpope_dp_event
    from gpope.core.accounting.composition import mechanism_from_json
    from gpope.errors import ConfigError

    config, spec, uri = setup
    opts = SettingsLayer.of(epsilon=2.0, delta=1e-5, iterations=500, clip=0.05, step_size=0.5,
                           statistics_share=0.0, interval_groups=4, seed=9,
                           allow_not_private=True, public_trajectories=0)
    report = run_evaluate(spark, config, dataset="ch", spec=spec, options=opts, tracking_uri=uri)
    # the 4 runs on disjoint groups are calibrated and charged as ONE run (parallel composition)
    q = report.batch_rate
    sigma = calibrate_sigma(m=M, iterations=500, epsilon=2.0, delta=1e-5, accountant="auto",
                            sampling="poisson", batch_rate=q)
    assert report.sigma == pytest.approx(sigma, rel=1e-12)
    ledger = lake.read_shared_table(spark, config.lake, "privacy_ledger")
    rows = [r for r in ledger.where(ledger.run_id == report.run_id).collect()
            if r.kind != "settlement"]
    assert len(rows) == 1 and rows[0].epsilon == 2.0
    stored = mechanism_from_json(rows[0].mechanism)
    assert "interval_groups=4" in stored.label and stored.relation == "add_or_remove_one"
    assert stored.event == gpope_dp_event(m=M, iterations=500, sigma=report.sigma,
                                          sampling="poisson", batch_rate=q)
    # released: the mean of the group values and the Student-t interval of their spread
    iv = report.intervals
    value, se = np.array(iv["value"]), np.array(iv["se"])
    assert iv["df"] == 3 and np.all(se > 0)
    np.testing.assert_allclose(value, list(report.reference_values.values()), rtol=1e-9)
    np.testing.assert_allclose(np.array(iv["upper"]) - value, t.ppf(0.975, 3) * se, rtol=1e-9)
    np.testing.assert_allclose(value - np.array(iv["lower_bound"]), t.ppf(0.95, 3) * se, rtol=1e-9)
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id)
    assert run.data.params["interval_groups"] == "4"
    # replace-one adjacency (uniform sampling): refused before anything is reserved
    before = ledger.count()
    with pytest.raises(ConfigError, match="sampling poisson"):
        run_evaluate(spark, config, dataset="ch", spec=spec,
                     options=opts.replace(sampling="uniform"), tracking_uri=uri)
    assert lake.read_shared_table(spark, config.lake, "privacy_ledger").count() == before


def test_a_spec_groups_rule_sets_the_interval_by_the_public_m_and_epsilon(spark, setup):
    config, spec, uri = setup
    ruled = EvaluationSpec.from_mapping({**SPEC, "evaluation": {
        "interval_groups": 3, "interval_groups_min_patients": M,
        "interval_groups_min_m_epsilon": 1.5 * M,
        "intervals_provenance": {"interval_groups": "test"}}})
    assert ruled.spec_id == spec.spec_id  # the same statistics
    opts = SettingsLayer.of(epsilon=2.0, delta=1e-5, iterations=300, clip=0.05, step_size=0.5,
                           statistics_share=0.0, seed=3, allow_not_private=True,
                           public_trajectories=0)
    # m epsilon = 2 M >= 1.5 M: three runs on disjoint groups, the t interval with 2 df
    report = run_evaluate(spark, config, dataset="ch", spec=ruled, options=opts, tracking_uri=uri)
    assert report.intervals["df"] == 2 and report.settings["interval_groups"] == 3
    assert report.settings["interval_note"] is None and "3 runs on disjoint" in report.summary()
    # m epsilon = M < 1.5 M: the hull (no noisy-statistics share here: no interval), and why

    low = run_evaluate(spark, config, dataset="ch", spec=ruled,
                       options=opts.replace(epsilon=1.0), tracking_uri=uri)
    assert low.settings["interval_groups"] == 0 and "m epsilon = 400" in low.settings["interval_note"]
    assert mlflow.MlflowClient(tracking_uri=uri).get_run(
        low.mlflow_run_id).data.params["interval_groups"] == "0"


@pytest.mark.parametrize("layout", ["dense", "sparse"])
def test_group_statistics_are_the_rows_of_each_group_from_one_load(spark, setup, layout):
    from gpope.shell.pipeline.sampled import load_group_statistics, load_statistics

    config, spec, _ = setup
    n = spec.n_features
    stats_df = read_statistics(spark, config, dataset="ch", spec_id=spec.spec_id)
    full = load_statistics(stats_df, n, normalization=spec.normalization, layout="dense").dense()
    groups = np.random.default_rng(1).integers(0, 3, size=M)
    parts = list(load_group_statistics(stats_df, n, groups, normalization=spec.normalization,
                                       layout=layout))
    assert [p.m for p in parts] == [int(np.sum(groups == g)) for g in range(3)]
    for g, part in enumerate(parts):  # each group's rows, in traj_index order
        ids = np.flatnonzero(groups == g)
        for got, want in zip(part.dense(), full, strict=True):
            np.testing.assert_array_equal(got, want[ids])

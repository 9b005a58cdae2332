"""Seeded evaluate runs release bit-identical numbers: the pins of the evaluate stage's behaviour.

A small simulated chain cohort goes through the pipeline (silver transitions, gold statistics,
``gpope.api.evaluate`` with a fixed seed) for each kind of release: GPOPE with the
noisy-statistics share (the default), the one-shot SSP estimator, GPOPE on K disjoint patient
groups, and uniform sampling (replace-one adjacency). Each run's released theta, reference values,
interval ends, sigmas and its ledger event are compared with the exact floats the stage released
when the pins were taken. Any refactor of the evaluate stage keeps these equal; a change of the
released numbers is a behaviour change and needs its own reasoned update of the pins
(``GPOPE_PRINT_PINS=1`` prints the current values in the pin format).
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from gpope import api
from gpope.config import load_config
from gpope.core.envs import chain
from gpope.shell import lake
from gpope.shell.pipeline.ledger import PrivacyLedger
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

pytestmark = pytest.mark.spark

M = 120  # patients: small, so each run is quick; the statistics are tabular (n = 40)
# the pins cover the estimator's releases as they were taken: no policy value share (that
# release is a separate component, checked by tests/shell/test_demo.py)
SOLVER = {"iterations": 600, "public_trajectories": 30, "allow_not_private": True,
          "policy_value_share": 0.0}

#: name -> (dataset, solver settings beyond SOLVER)
RUNS = {
    "gpope": ("chain_pin", {}),
    "ssp": ("chain_pin", {"estimator": "ssp"}),
    "groups": ("chain_pin", {"interval_groups": 3}),
    "uniform": ("chain_pin_u", {"sampling": "uniform", "iterations": 300}),
}


def _digest(a) -> str:
    """sha256 of the float64 bytes: equal iff every float is bit-identical."""
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()[:24]


def _hex(x) -> str | None:
    return None if x is None else float(x).hex()


def _released(spark, config, report) -> dict:
    """What the run released and charged, in exact form."""
    ledger = lake.read_shared_table(spark, config.lake, "privacy_ledger")
    rows = ledger.where((ledger.run_id == report.run_id) & (ledger.status == "reserved")).collect()
    mechanism = json.loads(rows[0].mechanism)
    iv = report.intervals or {}
    return {
        "theta": _digest(report.theta),
        "values": [_hex(report.reference_values[k]) for k in sorted(report.reference_values)],
        "intervals": _digest([x for k in ("lower", "upper", "lower_bound") for x in iv.get(k, [])]),
        "sigma": _hex(report.sigma),
        "statistics_sigma": _hex(report.statistics_sigma),
        "spent_epsilon": _hex(report.spent_epsilon),
        "relation": mechanism["relation"],
        "event": hashlib.sha256(json.dumps(mechanism["event"], sort_keys=True).encode())
        .hexdigest()[:24],
    }


#: The exact releases of the seeded runs (GPOPE_PRINT_PINS=1 prints them).
PINS: dict[str, dict] = {
    "gpope": {
        "theta": "6da8bcebee37e63031556092",
        "values": [
            "0x0.0p+0",
            "0x1.88890636f2836p-4",
            "0x1.775125355ad8ap-1"
        ],
        "intervals": "cffcfb66adb81cba4873d490",
        "sigma": "0x1.fe2dd47f321efp+0",
        "statistics_sigma": "0x1.2fd3bb7a33579p+4",
        "spent_epsilon": "0x1.ffd7fd00e0a60p+0",
        "relation": "add_or_remove_one",
        "event": "98322e3bbbea85c16b7e54fd"
    },
    "ssp": {
        "theta": "8d6801b00cc217f49e3c2706",
        "values": [
            "0x0.0p+0",
            "0x0.0p+0",
            "0x1.38f15af2b97dfp-1"
        ],
        "intervals": "cffcfb66adb81cba4873d490",
        "sigma": "0x1.fe6be425249efp+0",
        "statistics_sigma": "0x1.fe6be425249efp+0",
        "spent_epsilon": "0x1.fffe6f1e89edbp+0",
        "relation": "add_or_remove_one",
        "event": "f3b158c148aebaed434ca31d"
    },
    "groups": {
        "theta": "6119f5c0c6550651c1fa2029",
        "values": [
            "0x1.8b73cbe87aabbp-2",
            "0x0.0p+0",
            "0x1.64cc6cb4fc0c0p-1"
        ],
        "intervals": "3c77739eaa0b50eeb21bcfd5",
        "sigma": "0x1.fe2dd47f321efp+0",
        "statistics_sigma": "0x1.2fd3bb7a33579p+4",
        "spent_epsilon": "0x1.ffd7fd00e0a60p+0",
        "relation": "add_or_remove_one",
        "event": "98322e3bbbea85c16b7e54fd"
    },
    "uniform": {
        "theta": "045a948a4bdc6671cc0834de",
        "values": [
            "0x0.0p+0",
            "0x1.84fcf5c55ce2dp+1",
            "0x1.291455d981d49p+2"
        ],
        "intervals": "cffcfb66adb81cba4873d490",
        "sigma": "0x1.f6d2a5cb8f920p+0",
        "statistics_sigma": "0x1.2fd3bb7a33579p+5",
        "spent_epsilon": "0x1.ff1f01e1be254p+0",
        "relation": "replace_one",
        "event": "72a560fb90a725c46e37f3f1"
    }
}


@pytest.fixture(scope="module")
def released(spark, tmp_path_factory, exact_count):
    tmp = tmp_path_factory.mktemp("pinned")
    config = load_config(None, lake={"root": str(tmp / "lake")})
    spec = api.load_spec("conf/specs/chain.yaml")
    transitions = chain.generate(M, np.random.default_rng(20261126))
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    for name in {d for d, _ in RUNS.values()}:
        lake.write_table(df, config.lake, "silver", name, "transitions", mode="overwrite")
        run_stats(spark, config, dataset=name, spec=spec)
        PrivacyLedger(spark, config).set_budget(name, epsilon=100.0, delta=1e-3)
        exact_count(spark, config, name, spec)  # m~ = m: the pins' arithmetic
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    out = {}
    for name, (dataset, extra) in RUNS.items():
        report = api.evaluate(spark, dataset, "conf/specs/chain.yaml", epsilon=2.0, delta=1e-5,
                              seed=11, solver={**SOLVER, **extra}, config=config,
                              tracking_uri=uri)
        out[name] = _released(spark, config, report)
    if os.environ.get("GPOPE_PRINT_PINS"):
        print("PINS = " + json.dumps(out, indent=4))
    return out


@pytest.mark.parametrize("name", list(RUNS))
def test_seeded_runs_release_the_pinned_numbers(released, name):
    assert released[name] == PINS[name]

"""The privacy ledger: budgets, basic composition, and refusal that writes nothing."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import mlflow
import numpy as np
import pytest
from pyspark.sql.types import StringType, StructField, StructType

from gpope.config import load_config
from gpope.core.envs import chain
from gpope.errors import BudgetExceededError, ConfigError, GpopeError
from gpope.shell import lake
from gpope.shell.cli import main
from gpope.shell.pipeline.evaluate import EvaluateOptions, run_evaluate
from gpope.shell.pipeline.jobargs import load_spec
from gpope.shell.pipeline.ledger import PrivacyLedger, _status
from gpope.shell.pipeline.stats import run_stats, transitions_to_arrow
from gpope.shell.schemas import TRANSITIONS

SPEC_FILE = Path(__file__).resolve().parents[2] / "conf" / "specs" / "chain.yaml"


def _row(run_id, status, eps, delta, minute, dataset="d"):
    return {"dataset": dataset, "run_id": run_id, "mechanism": "m", "epsilon": eps, "delta": delta,
            "accountant": "pld", "status": status,
            "created_at": datetime(2024, 1, 1) + timedelta(minutes=minute)}


def test_basic_composition_counts_reserved_released_failed_not_cancelled():
    config = load_config(None)
    rows = [
        _row("b1", "budget", 5.0, 1e-4, 0),
        _row("b2", "budget", 4.0, 1e-4, 1),  # the latest budget applies
        _row("r1", "reserved", 1.0, 1e-5, 2), _row("r1", "released", 1.0, 1e-5, 3),
        _row("r2", "reserved", 0.5, 1e-6, 4), _row("r2", "failed", 0.5, 1e-6, 5),
        _row("r3", "reserved", 0.25, 1e-6, 6),  # still open: counted
        _row("r4", "reserved", 2.0, 1e-6, 7), _row("r4", "cancelled", 2.0, 1e-6, 8),
    ]
    status = _status("d", rows, config)
    assert status.budget_epsilon == 4.0
    assert status.spent_epsilon == pytest.approx(1.75)
    assert status.spent_delta == pytest.approx(1.2e-5)
    assert status.remaining_epsilon == pytest.approx(2.25)
    assert {r.run_id: r.status for r in status.runs} == {
        "r1": "released", "r2": "failed", "r3": "reserved", "r4": "cancelled"}
    assert status.allows(2.25, 1e-6) and not status.allows(2.26, 1e-6)
    default = _status("other", [], config)
    assert (default.budget_epsilon, default.budget_delta) == (3.0, 1e-5)


@pytest.mark.spark
def test_reserve_mark_and_refuse_on_the_delta_table(spark, tmp_path):
    config = load_config(None, lake={"root": str(tmp_path / "lake")})
    ledger = PrivacyLedger(spark, config)
    ledger.set_budget("d", epsilon=2.0, delta=1e-5)
    ledger.reserve("d", run_id="a", epsilon=1.5, delta=5e-6, accountant="pld", mechanism="x")
    with pytest.raises(BudgetExceededError, match=r"only epsilon 0\.5"):
        ledger.reserve("d", run_id="b", epsilon=1.0, delta=1e-6, accountant="pld", mechanism="x")
    assert ledger.entry("d", "b") is None  # nothing written for the refused run
    ledger.mark("d", "a", "failed")  # failed stays counted
    assert ledger.status("d").spent_epsilon == pytest.approx(1.5)
    with pytest.raises(ConfigError, match="no open reservation"):
        ledger.mark("d", "a", "released")
    with pytest.raises(ConfigError, match="at least"):
        ledger.set_budget("d", epsilon=1.0, delta=1e-5)
    assert ledger.status("other").spent_epsilon == 0.0  # datasets are separate


def _chain_lake(spark, root):
    config = load_config(None, lake={"root": str(root)})
    transitions = chain.generate(40, np.random.default_rng(0), chain.ChainConfig(max_steps=200))
    df = spark.createDataFrame(transitions_to_arrow(transitions), schema=TRANSITIONS)
    lake.write_table(df, config.lake, "silver", "ch", "transitions", mode="overwrite")
    run_stats(spark, config, dataset="ch", spec=load_spec(SPEC_FILE))
    return config


@pytest.mark.spark
def test_failure_after_reservation_is_marked_failed_counted_and_releases_nothing(spark, tmp_path):
    config = _chain_lake(spark, tmp_path / "lake")
    # a released_estimates table that does not match the contract makes the release commit fail
    broken = StructType([StructField("run_id", StringType(), False)])
    lake.write_shared_table(spark.createDataFrame([("x",)], broken), config.lake,
                            "released_estimates", mode="overwrite", schema=broken)
    options = EvaluateOptions(epsilon=0.5, delta=1e-6, iterations=200, public_trajectories=0)
    with pytest.raises(GpopeError):
        run_evaluate(spark, config, dataset="ch", spec=load_spec(SPEC_FILE), options=options,
                     tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    status = PrivacyLedger(spark, config).status("ch")
    assert [r.status for r in status.runs] == ["failed"]
    assert status.spent_epsilon == pytest.approx(0.5)  # privacy spent is spent
    assert lake.read_shared_table(spark, config.lake, "released_estimates").count() == 1
    assert not (tmp_path / "mlflow.db").exists()  # no tracking run for a failed release


@pytest.mark.spark
def test_cli_second_evaluate_past_the_budget_fails_and_writes_nothing(spark, tmp_path, capsys):
    root = tmp_path / "lake"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = _chain_lake(spark, root)
    common = ["--lake", str(root), "--tracking-uri", uri]
    assert main(["budget", "set", "--dataset", "ch", "--epsilon", "1.5", "--delta", "1e-4", *common]) == 0
    evaluate = ["evaluate", "--dataset", "ch", "--spec", str(SPEC_FILE), "--epsilon", "1",
                "--delta", "1e-5", "--iterations", "500", "--public-trajectories", "0", *common]
    assert main(evaluate) == 0
    capsys.readouterr()

    def snapshot():
        rel = lake.read_shared_table(spark, config.lake, "released_estimates").count()
        led = lake.read_shared_table(spark, config.lake, "privacy_ledger").count()
        runs = len(mlflow.MlflowClient(tracking_uri=uri).search_runs(
            [e.experiment_id for e in mlflow.MlflowClient(tracking_uri=uri).search_experiments()]))
        return rel, led, runs

    before = snapshot()
    assert main(evaluate) == 2
    err = capsys.readouterr().err
    assert "budget" in err and "exceeded" in err and len(err.strip().splitlines()) == 1
    assert snapshot() == before

    assert main(["budget", "show", "--dataset", "ch", "--json", *common]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["spent"]["epsilon"] == pytest.approx(1.0)
    assert shown["remaining"]["epsilon"] == pytest.approx(0.5)
    assert [r["status"] for r in shown["runs"]] == ["released"]

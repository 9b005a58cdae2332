"""`gpope experiment chain --quick`: CSV, JSON, PNGs and an MLflow parent run with nested runs."""

from __future__ import annotations

import csv
import json
import math

from gpope.cli import main


def test_experiment_chain_quick_writes_outputs_and_mlflow_runs(tmp_path, capsys):
    out = tmp_path / "chain"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    status = main(["experiment", "chain", "--quick", "--out", str(out), "--trials", "2",
                   "--sizes", "2000", "--iterations", "500", "--tracking-uri", uri, "--quiet",
                   "--json"])
    assert status == 0
    printed = json.loads(capsys.readouterr().out)

    rows = list(csv.DictReader((out / "trials.csv").open()))
    methods = {r["method"] for r in rows}
    assert methods == {"lstd", "dp_lsw", "dp_lsl", "gpope_paper", "gpope_rdp", "gpope_product"}
    assert {int(r["m"]) for r in rows} == {2000}
    assert all(math.isfinite(float(r["rel_mspbe"])) for r in rows)

    summary = json.loads((out / "summary.json").read_text())
    assert summary["mlflow_run_id"] == printed["mlflow_run_id"]
    assert summary["public_seed"] != summary["settings"]["seed"]
    assert {b["method"] for b in summary["tuning"]} == {"gpope_paper", "gpope_rdp",
                                                        "gpope_product"}
    tuning = json.loads((out / "tuning.json").read_text())
    assert len(tuning["grid"]) == 3 * 6  # coarse 3 x 2 grid per GPOPE variant
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert pngs == ["chain_mspbe_vs_m.png", "chain_mspbe_vs_step.png",
                    "chain_value_error_vs_m.png"]
    assert all((out / "figures" / p).stat().st_size > 1000 for p in pngs)

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    parent = client.get_run(summary["mlflow_run_id"])
    assert parent.info.status == "FINISHED"
    assert parent.data.params["trials"] == "2"
    exp_id = parent.info.experiment_id
    children = client.search_runs(
        [exp_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    child_methods = {c.data.tags["gpope.method"] for c in children}
    assert child_methods == methods
    assert len(children) >= 6
    some = next(c for c in children if c.data.tags["gpope.method"] == "gpope_paper")
    history = client.get_metric_history(some.info.run_id, "rel_mspbe_mean_eps0.1")
    assert [h.step for h in history] == [2000]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"trials.csv", "summary.json", "tuning.json", "figures"} <= artifacts
    figs = {a.path for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert "figures/chain_mspbe_vs_m.png" in figs

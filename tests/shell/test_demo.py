"""``gpope demo`` at a tiny size: every stage runs, tables are Delta, a second run succeeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpope.cli import main
from gpope.shell.pipeline.demo import demo_spec

REPO = Path(__file__).resolve().parents[2]


def test_demo_reads_the_shipped_spec_with_its_tuned_block():
    spec = demo_spec()
    shipped = yaml.safe_load((REPO / "conf" / "specs" / "hiv_demo.yaml").read_text())
    assert spec.to_dict()["evaluation"] == shipped["evaluation"]
    assert spec.evaluation.tuned  # tuned on public data (gpope tune --spec), not in code
    assert demo_spec().target_policy.to_dict()["kind"] == "epsilon_greedy"  # greedy Q artifact


@pytest.mark.spark
@pytest.mark.slow
def test_demo_smoke_twice(spark, tmp_path, capsys):
    root = tmp_path / "lake"
    # 8 patients: the released count m~ at the default count_epsilon (noise std 45) would swamp
    # them; a count epsilon of 50 (noise std 0.17) keeps m~ = 8, inside a budget that pays it
    conf = tmp_path / "small_cohort.yaml"
    conf.write_text("privacy:\n  count_epsilon: 50.0\n  default_epsilon: 53.0\n")
    args = ["demo", "--patients", "8", "--steps", "4", "--iterations", "400",
            "--public-trajectories", "4", "--seed", "1", "--lake", str(root), "--json",
            "--conf", str(conf)]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    for table in first["tables"].values():
        assert (Path(table) / "_delta_log").is_dir(), table
    assert first["ingest"]["operator_only"]["n_trajectories"] == 8 and first["ingest"]["operator_only"]["balanced"]
    ev = first["evaluation"]
    assert ev["private"] is True and ev["epsilon"] == 1.0 and ev["delta"] == 1e-5
    assert set(ev["reference_values"]) == set(first["ground_truth"]) == set(first["non_private_lstd"])
    assert first["ground_truth"]["target_day100"] > first["ground_truth"]["unhealthy_start"] > 0
    assert first["tracking_uri"] == f"sqlite:///{root.resolve() / 'mlflow.db'}"
    # the SSP clip comes from a public cohort with the data's episode cap (--steps 4), not the
    # simulator's 200 decisions (a clip ~5x too large buried every feature of the release)
    from gpope.shell.pipeline.demo import demo_spec
    from gpope.shell.pipeline.ssp import public_clip

    assert ev["ssp_clip"] == pytest.approx(public_clip(demo_spec(), n_trajectories=4, quantile=0.99,
                                                       max_length=4), rel=1e-12)
    _check_policy_value(first, root)

    assert main(args) == 0  # a second run: fresh dataset, its own budget
    second = json.loads(capsys.readouterr().out)
    assert second["dataset"] != first["dataset"]
    # the same --seed simulates the same cohort; the privacy noise still comes from OS entropy
    from gpope.shell.query import query

    for table in ("observations", "treatments", "outcomes", "transitions"):
        rows = [query(f"SELECT * EXCLUDE (dataset) FROM {table} WHERE dataset = '{d}' "
                      "ORDER BY ALL", lake=str(root), operator=True).to_pylist() for d in (first["dataset"],
                                                                             second["dataset"])]
        assert rows[0] == rows[1] and rows[0], table
    assert second["non_private_lstd"] == first["non_private_lstd"]
    assert second["evaluation"]["theta"] != first["evaluation"]["theta"]
    # the count (50) and one run spent of the fresh default budget (53): at most 51, less where
    # the ledger's tight composition of the count and the run's components is below (about 48.5)
    assert 2.0 - 1e-9 <= second["evaluation"]["remaining_epsilon"] < 53.0 - 45.0


def _check_policy_value(report: dict, root: Path) -> None:
    """Issue 27: the run released J(target), J(behaviour) and their contrast, finite, beside the
    simulator's truth, as released_values rows, from one composed ledger event."""
    import math

    import dp_accounting
    from deltalake import DeltaTable

    from gpope.config import load_config
    from gpope.core.accounting.composition import mechanism_from_json
    from gpope.shell.pipeline.ledger import PrivacyLedger

    quantities = ("policy_value", "behaviour_value", "policy_contrast")
    ev = report["evaluation"]
    pv = ev["policy_value"]
    assert set(pv) == set(quantities) and set(quantities) <= set(report["policy_truth"])
    for q in quantities:
        assert all(math.isfinite(pv[q][k]) for k in ("value", "lower", "upper", "lower_bound"))
        assert pv[q]["lower"] <= pv[q]["value"] <= pv[q]["upper"] and pv[q]["ci_level"] == 0.95
    rows = DeltaTable(str(root / "gold" / "released_values")).to_pyarrow_table().to_pylist()
    mine = {r["state"]: r for r in rows if r["run_id"] == ev["run_id"]}
    assert set(quantities) <= set(mine) and "unhealthy_start" in mine
    assert mine["policy_value"]["value"] == pytest.approx(pv["policy_value"]["value"])
    assert mine["policy_contrast"]["estimator"] == "clipped_is"
    # each row names what it estimates: a Fourier map's V is its features' fixed point; J(target)
    # and the contrast the estimand the run printed; J(behaviour) the mean recorded return
    assert mine["unhealthy_start"]["estimand"].startswith("LSTD fixed point of the spec's features")
    assert mine["behaviour_value"]["estimand"].startswith("mean recorded discounted return")
    for q in ("policy_value", "policy_contrast"):
        assert mine[q]["estimand"] == pv[q]["estimand"], q
    config = load_config(None, lake={"root": str(root)})
    stored = mechanism_from_json(PrivacyLedger(None, config).entry(report["dataset"],
                                                                    ev["run_id"]).mechanism)
    assert "policy value" in stored.label and isinstance(stored.event, dp_accounting.ComposedDpEvent)
    assert isinstance(stored.event.events[-1], dp_accounting.GaussianDpEvent)
    # the analysts' view shows them as the dataset's latest answers
    from gpope.shell.query import query

    latest = query("SELECT state, value FROM latest_release WHERE dataset = "
                   f"'{report['dataset']}' AND estimator = 'clipped_is'", lake=config)
    rows = {r["state"]: r["value"] for r in latest.to_pylist()}
    assert rows == pytest.approx({q: pv[q]["value"] for q in quantities})


def test_databricks_conf_leaves_the_solver_settings_to_the_spec():
    # The scheduled pipeline evaluates conf/specs/hiv_demo.yaml with conf/databricks.yaml: no tuned
    # solver constant in the conf; the spec's evaluation: block supplies them.
    conf = yaml.safe_load((REPO / "conf" / "databricks.yaml").read_text())
    assert set(conf["evaluation"]) <= {"accountant", "in_memory_limit_mb", "trace_every"}

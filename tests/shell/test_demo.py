"""``gpope demo`` at a tiny size: every stage runs, tables are Delta, a second run succeeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gpope.shell.cli import main
from gpope.shell.pipeline.demo import DEMO_SPEC_YAML, demo_spec

REPO = Path(__file__).resolve().parents[2]


def test_embedded_demo_spec_is_the_shipped_spec_file():
    shipped = yaml.safe_load((REPO / "conf" / "specs" / "hiv_demo.yaml").read_text())
    assert yaml.safe_load(DEMO_SPEC_YAML) == shipped
    assert demo_spec().target_policy.to_dict()["kind"] == "epsilon_greedy"  # greedy Q artifact


@pytest.mark.spark
@pytest.mark.slow
def test_demo_smoke_twice(spark, tmp_path, capsys):
    root = tmp_path / "lake"
    args = ["demo", "--patients", "8", "--steps", "4", "--iterations", "400",
            "--public-trajectories", "4", "--seed", "1", "--lake", str(root), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    for table in first["tables"].values():
        assert (Path(table) / "_delta_log").is_dir(), table
    assert first["ingest"]["n_trajectories"] == 8 and first["ingest"]["balanced"]
    ev = first["evaluation"]
    assert ev["private"] is True and ev["epsilon"] == 1.0 and ev["delta"] == 1e-5
    assert set(ev["reference_values"]) == set(first["ground_truth"]) == set(first["non_private_lstd"])
    assert first["ground_truth"]["target_day100"] > first["ground_truth"]["unhealthy_start"] > 0
    assert first["tracking_uri"] == f"sqlite:///{root.resolve() / 'mlflow.db'}"

    assert main(args) == 0  # a second run: fresh dataset, its own budget
    second = json.loads(capsys.readouterr().out)
    assert second["dataset"] != first["dataset"]
    assert second["evaluation"]["remaining_epsilon"] == pytest.approx(2.0)


def test_databricks_conf_evaluates_the_demo_spec_with_the_demo_settings():
    # The scheduled Databricks pipeline evaluates conf/specs/hiv_demo.yaml with conf/databricks.yaml:
    # its public hyperparameters must be the ones tuned for that spec, not the generic defaults.
    from gpope.config import load_config
    from gpope.core.gpope import GPOPEConfig
    from gpope.shell.pipeline.demo import DEMO_EVALUATION

    ev = load_config(REPO / "conf" / "databricks.yaml").evaluation
    for key, value in DEMO_EVALUATION.items():
        if key == "tail_fraction":  # not a conf key: the solver's default applies
            assert GPOPEConfig.__dataclass_fields__[key].default == value
        else:
            assert getattr(ev, key) == value, key

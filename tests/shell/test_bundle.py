"""The Databricks bundle: validates against the official schema and points at real entry points."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# The shared tools beside the repository are the reference; a clone without them uses the copies
# in tests/data/bundle (see its README), so the validation always runs.
_TOOLS = REPO.parent / "shared" / "tools"
if not (_TOOLS / "validate_bundle.py").is_file():
    _TOOLS = REPO / "tests" / "data" / "bundle"
VALIDATOR = _TOOLS / "validate_bundle.py"
SCHEMA = _TOOLS / "bundle_jsonschema.json"


def _resources() -> dict:
    jobs: dict = {}
    for path in sorted((REPO / "resources").glob("*.yml")):
        jobs.update(yaml.safe_load(path.read_text())["resources"]["jobs"])
    return jobs


def test_bundle_validates_against_official_schema():
    proc = subprocess.run(
        [sys.executable, str(VALIDATOR), "--schema", str(SCHEMA), "databricks.yml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 invalid" in proc.stdout


def test_bundle_has_dev_and_prod_targets_and_a_wheel():
    bundle = yaml.safe_load((REPO / "databricks.yml").read_text())
    assert bundle["targets"]["dev"]["mode"] == "development"
    assert bundle["targets"]["prod"]["mode"] == "production"
    assert {"catalog", "schema", "conf"} <= set(bundle["variables"])
    assert any(a.get("type") == "whl" for a in bundle["artifacts"].values())
    assert "resources/*.yml" in bundle["include"]


def test_pipeline_job_chains_ingest_stats_evaluate_daily():
    job = _resources()["gpope_pipeline"]
    assert "quartz_cron_expression" in job["schedule"]
    tasks = {t["task_key"]: t for t in job["tasks"]}
    assert list(tasks) == ["ingest", "stats", "evaluate"]
    assert [d["task_key"] for d in tasks["stats"]["depends_on"]] == ["ingest"]
    assert [d["task_key"] for d in tasks["evaluate"]["depends_on"]] == ["stats"]
    for task in tasks.values():
        assert task["job_cluster_key"] in {c["job_cluster_key"] for c in job["job_clusters"]}
        assert any("whl" in lib for lib in task["libraries"])


def _job_flags(script: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_task_runs_an_existing_entry_point_that_accepts_its_parameters():
    seen = 0
    for job in _resources().values():
        for task in job["tasks"]:
            py = task["spark_python_task"]
            script = (REPO / "resources" / py["python_file"]).resolve()
            if script.name == "ingest.py" and not script.is_file():
                pytest.skip("jobs/ingest.py belongs to the ingest stage and is not there yet")
            assert script.is_file(), script
            help_text = _job_flags(script)
            for flag in (p for p in py["parameters"] if p.startswith("--")):
                assert flag in help_text, f"{script.name} does not accept {flag}"
            seen += 1
    assert seen >= 4

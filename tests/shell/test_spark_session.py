"""The session factory's choices and the package-wide rule: no sparkContext, JVM handle or RDD."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpope.config import SparkSettings, load_config
from gpope.errors import ConfigError
from gpope.shell.lake.delta_rs.store import _check_visible
from gpope.shell.spark import is_loopback, resolve_remote

PACKAGE = Path(__file__).resolve().parents[2] / "gpope"


def test_no_spark_context_jvm_or_rdd_anywhere_in_the_package():
    """Spark Connect has none of these: every code path must work without them."""
    banned = re.compile(r"sparkContext|\._jvm\b|\._jsc\b|\.rdd\b|SparkContext\b")
    hits = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if banned.search(line)
    ]
    assert hits == []


def test_remote_url_precedence_argument_then_conf_then_environment(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert resolve_remote(SparkSettings()) is None
    monkeypatch.setenv("SPARK_REMOTE", "sc://env:1")
    assert resolve_remote(SparkSettings()) == "sc://env:1"
    assert resolve_remote(SparkSettings(remote="sc://conf:2")) == "sc://conf:2"
    assert resolve_remote(SparkSettings(remote="sc://conf:2"), "sc://arg:3") == "sc://arg:3"
    monkeypatch.setenv("SPARK_REMOTE", "local[2]")
    with pytest.raises(ConfigError, match="sc://"):
        resolve_remote(SparkSettings())


def test_remote_option_reaches_the_configuration_and_bad_urls_are_refused():
    from gpope.shell.pipeline.jobargs import config_from_args, job_parser

    args = job_parser(None, dataset=True).parse_args(["--dataset", "d", "--remote", "sc://h:15002"])
    assert config_from_args(args).spark.remote == "sc://h:15002"
    with pytest.raises(ConfigError, match="Spark Connect URL"):
        load_config(None, spark={"remote": "spark://h:7077"})


def test_cli_stage_commands_accept_remote():
    from gpope.cli import build_parser

    parser = build_parser()
    for command in ("simulate", "ingest", "stats", "evaluate", "demo"):
        sub = parser._subparsers._group_actions[0].choices[command]
        assert "--remote" in sub.format_help(), command


def test_loopback_hosts():
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in (None, "10.0.0.1", "adb-123.azuredatabricks.net"))


def test_staged_files_invisible_to_this_process_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="share the lake's file system"):
        _check_visible(tmp_path / "gpope-never-written", "transitions")
    (tmp_path / "gpope-written").mkdir()
    _check_visible(tmp_path / "gpope-written", "transitions")

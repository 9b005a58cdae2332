"""Helpers shared by the CLI command modules: common options and output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpope.jsonable import jsonable

if TYPE_CHECKING:
    from gpope.config import GpopeConfig


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """Add ``--json``: print one JSON document on stdout instead of text."""
    parser.add_argument("--json", action="store_true",
                        help="print the result as one JSON document on stdout")


def add_dataset_option(parser: argparse.ArgumentParser) -> None:
    """Add the required ``--dataset NAME``: the cohort a pipeline command reads or writes."""
    parser.add_argument("--dataset", required=True, help="dataset (cohort) name")


def add_lake_options(parser: argparse.ArgumentParser, *, tracking: bool = False,
                     remote: bool = True, json: bool = True, progress: bool = False) -> None:
    """Add the common pipeline options ``--lake`` and ``--conf``; with ``tracking`` (commands
    that log to MLflow) also ``--tracking-uri``; with ``remote`` (commands that start Spark)
    also ``--remote``; with ``progress`` ``--no-progress`` (hides the bars of
    :func:`show_progress`); with ``json`` ``--json`` (:func:`add_json_flag`)."""
    parser.add_argument("--lake", default=None,
                        help="lake root directory (default: ./lake, or lake.root in --conf)")
    parser.add_argument("--conf", default=None,
                        help="YAML configuration file (default: the packaged conf/default.yaml)")
    if tracking:
        parser.add_argument(
            "--tracking-uri",
            default=None,
            help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<lake>/mlflow.db)",
        )
    if remote:
        add_remote_option(parser)
    if progress:
        parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    if json:
        add_json_flag(parser)


def add_remote_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--remote sc://host:port``: run through a Spark Connect server."""
    parser.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                        help="Spark Connect URL (Databricks Connect, a Connect server); default: "
                             "spark.remote in --conf, else $SPARK_REMOTE, else a local Spark (an "
                             "already active session always wins)")


def stderr_log(args: argparse.Namespace) -> Callable[[str], None]:
    """A progress-line printer on stderr, silent with ``--quiet``."""

    def log(msg: str) -> None:
        if not getattr(args, "quiet", False):
            print(msg, file=sys.stderr, flush=True)

    return log


def show_progress(args: argparse.Namespace) -> bool:
    """Progress bars only on a terminal: never with --json, --no-progress or redirected stderr."""
    if getattr(args, "json", False) or getattr(args, "no_progress", False):
        return False
    return sys.stderr.isatty()


def config_from_args(args: argparse.Namespace) -> GpopeConfig:
    """The configuration of ``--conf`` with ``--lake``, ``--catalog``/``--schema`` and
    ``--remote`` applied (:func:`gpope.api.load_config`)."""
    from gpope import api

    return api.load_config(getattr(args, "conf", None) or None, lake=getattr(args, "lake", None),
                           catalog=getattr(args, "catalog", None),
                           schema=getattr(args, "schema", None),
                           remote=getattr(args, "remote", None))


def emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    """Print ``payload`` as JSON when ``--json`` was given, else the human-readable ``text``."""
    if getattr(args, "json", False):
        json.dump(payload, sys.stdout, indent=2, sort_keys=True, default=jsonable)
        sys.stdout.write("\n")
    else:
        print(text)


"""Argument parsing and set-up shared by the tiny ``jobs/*.py`` entry points and the CLI.

Relative paths to the configuration and spec files are looked up in the working directory first,
then in the bundle / repository root, so the same parameters work locally and on Databricks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["config_from_args", "job_parser", "job_setup", "load_spec", "resolve_path"]


def resolve_path(path: str | Path) -> Path:
    """An existing file for ``path``: as given, else relative to the bundle or repository root.

    Raises:
        ConfigError: no candidate exists (the message lists where it looked).
    """
    p = Path(path)
    candidates = [p]
    if not p.is_absolute():
        if sys.argv and sys.argv[0]:
            candidates.append(Path(sys.argv[0]).resolve().parent.parent / p)
        candidates.append(Path(__file__).resolve().parents[3] / p)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"File {str(p)!r} does not exist (looked in: {', '.join(str(c) for c in candidates)}); "
        "pass an existing path."
    )


def load_spec(path: str | Path) -> EvaluationSpec:
    """Read an evaluation spec YAML file (``conf/specs/*.yaml``) into an EvaluationSpec."""
    from gpope.config import load_yaml
    from gpope.core.spec import EvaluationSpec

    resolved = resolve_path(path)
    return EvaluationSpec.from_mapping(load_yaml(resolved), where=str(path))


def job_parser(doc: str | None, *, dataset: bool = False, spec: bool = False) -> argparse.ArgumentParser:
    """The argument parser of a job entry point (common options plus the stage's own)."""
    parser = argparse.ArgumentParser(description=(doc or "").strip().splitlines()[0] if doc else None)
    parser.add_argument("--conf", default=None, help="gpope YAML configuration file")
    parser.add_argument("--lake", default=None, help="lake root (default: lake.root of --conf)")
    parser.add_argument("--catalog", default=None, help="Unity Catalog catalog (with --schema)")
    parser.add_argument("--schema", default=None, help="Unity Catalog schema (with --catalog)")
    parser.add_argument("--tracking-uri", default=None, help="MLflow tracking URI")
    parser.add_argument("--remote", default=None, metavar="sc://HOST:PORT",
                        help="Spark Connect URL (default: spark.remote of --conf, else $SPARK_REMOTE)")
    if dataset:
        parser.add_argument("--dataset", required=True, help="dataset (cohort) name")
    if spec:
        parser.add_argument("--spec", required=True, help="evaluation spec YAML file")
    return parser


def config_from_args(args: argparse.Namespace) -> GpopeConfig:
    """Load ``--conf`` with ``--lake``/``--catalog``/``--schema``/``--remote`` applied."""
    from gpope.config import load_config

    conf = getattr(args, "conf", None)
    lake = {"root": getattr(args, "lake", None), "catalog": getattr(args, "catalog", None),
            "schema": getattr(args, "schema", None)}
    spark = {"remote": getattr(args, "remote", None)}
    return load_config(resolve_path(conf) if conf else None, lake=lake, spark=spark)


def job_setup(args: argparse.Namespace) -> tuple[SparkSession, GpopeConfig, EvaluationSpec | None]:
    """Config, SparkSession and (when ``--spec`` was given) the evaluation spec of a job."""
    from gpope.shell.spark import get_spark

    config = config_from_args(args)
    spec = load_spec(args.spec) if getattr(args, "spec", None) else None
    return get_spark(config.spark), config, spec

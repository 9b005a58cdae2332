"""``gpope stats``: silver transitions -> gold trajectory_stats for an evaluation spec."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_dataset_option, add_lake_options, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``stats`` command."""
    parser = subparsers.add_parser(
        "stats",
        help="silver -> gold: per-trajectory statistics A, b, C for an evaluation spec",
        description=("Compute per-trajectory statistics (A_i, b_i, C_i) of a dataset's silver "
                     "transitions under an evaluation spec (feature map, target policy, gamma, "
                     "normalisation) with Spark, grouped by trajectory. Re-running replaces that "
                     "spec's partition of the dataset's gold trajectory_stats table; other specs "
                     "are kept."),
    )
    add_dataset_option(parser)
    parser.add_argument("--spec", required=True, help="evaluation spec YAML (e.g. conf/specs/hiv_demo.yaml)")
    add_lake_options(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.cli._common import config_from_args

    config = config_from_args(args)
    spec = api.check_stage("stats", args.dataset, spec=args.spec, config=config)  # before Spark
    spark = api.get_spark(config)
    report = api.stats(spark, args.dataset, spec, config=config)
    emit(args, report.to_dict(), report.summary())
    return 0

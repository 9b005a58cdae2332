"""``gpope load``: existing Parquet/CSV files -> a dataset's bronze tables (your own data)."""

from __future__ import annotations

import argparse

from gpope.shell.cli._common import add_json_flag, add_lake_options, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``load`` command."""
    parser = subparsers.add_parser(
        "load",
        help="load your own Parquet/CSV event files into a dataset's bronze tables",
        description=(
            "Replace the bronze observations, treatments and outcomes of --dataset with the rows "
            "of three files (each a file, a folder of files or a glob), as delivered: the columns "
            "are checked against the bronze contract (docs/OWN_DATA.md), nothing is parsed or "
            "dropped here; `gpope ingest` parses text columns and quarantines unusable rows with "
            "a reason. Times without a time zone are read as UTC. The three tables become visible "
            "together (one manifest commit). Next: `gpope ingest --dataset NAME --conf CONF`."
        ),
    )
    parser.add_argument("--dataset", required=True, help="dataset name (bronze/<dataset>/...)")
    from gpope.shell.pipeline.load import BRONZE_COLUMNS

    for table, columns in BRONZE_COLUMNS.items():
        parser.add_argument(f"--{table}", required=True, metavar="PATH",
                            help=f"{table} file, folder or glob (columns {', '.join(columns)})")
    parser.add_argument("--format", choices=("auto", "parquet", "csv"), default="auto",
                        help="file format (default: from the file names, .parquet or .csv)")
    add_lake_options(parser)
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.shell.pipeline.jobargs import config_from_args
    from gpope.shell.pipeline.load import BRONZE_TABLES
    from gpope.shell.preflight import check_load
    from gpope.shell.spark import get_spark

    config = config_from_args(args)
    files = {t: getattr(args, t) for t in BRONZE_TABLES}
    check_load(config, args.dataset, files, fmt=args.format)  # refused before Spark starts
    spark = get_spark(config.spark)
    report = api.load(spark, args.dataset, files, fmt=args.format, config=config)
    emit(args, report.to_dict(), report.summary())
    return 0

"""``gpope load``: existing Parquet/CSV files -> a dataset's bronze tables (your own data)."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_lake_options, config_from_args, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``load`` command."""
    parser = subparsers.add_parser(
        "load",
        help="load your own Parquet/CSV event files into a dataset's bronze tables",
        description=("Replace the bronze observations, treatments and outcomes of --dataset with "
                     "the rows of three files (each a file, a folder of files or a glob), as "
                     "delivered: the columns are checked against the bronze contract "
                     "(docs/OWN_DATA.md), nothing is parsed or dropped here; `gpope ingest` "
                     "parses text columns and quarantines unusable rows with a reason. Columns "
                     "named otherwise in your files are mapped with --columns (renamed as Spark "
                     "reads them; other columns are kept as delivered). Times without a time "
                     "zone are read as UTC, or as wall-clock times of --time-zone. The three "
                     "tables become visible together (one manifest commit). Next: `gpope ingest "
                     "--dataset NAME --conf CONF`."),
        epilog=("example (a ward's exports with their own names; docs/OWN_DATA.md): "
                "--columns patient_id=mrn,time=charted_at,variable=item,value=result "
                "--columns treatments.time=ordered_at,action=order_code,propensity=p_logged "
                "--columns outcomes.time=recorded_at,reward=comfort_score"),
    )
    parser.add_argument("--dataset", required=True, help="dataset name (bronze/<dataset>/...)")
    from gpope import api

    for table, columns in api.BRONZE_COLUMNS.items():
        parser.add_argument(f"--{table}", required=True, metavar="PATH",
                            help=f"{table} file, folder or glob (columns {', '.join(columns)})")
    parser.add_argument("--format", choices=("auto", "parquet", "csv"), default="auto",
                        help="file format (default: from the file names, .parquet or .csv)")
    parser.add_argument(
        "--columns", action="append", metavar="BRONZE=YOURS[,...]",
        help="your column names for the bronze ones, e.g. patient_id=mrn,time=charted_at: an "
             "entry applies to every table with that bronze column; TABLE.BRONZE=YOURS (e.g. "
             "treatments.time=ordered_at) to that table only, over the plain entry. Bronze "
             "columns: patient_id, time, variable, value, action, propensity, reward; columns "
             "not named are taken by their own name (repeatable)")
    parser.add_argument(
        "--time-zone", default=None, metavar="ZONE",
        help="IANA time zone (e.g. Europe/Berlin) of the times your files write without one "
             "(CSV text without a UTC offset, Parquet timestamps not adjusted to UTC, as pandas "
             "writes naive datetimes); default: they are UTC")
    add_lake_options(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api

    config = config_from_args(args)
    files = {t: getattr(args, t) for t in api.BRONZE_COLUMNS}
    api.check_load(args.dataset, files, fmt=args.format, columns=args.columns,
                   time_zone=args.time_zone, config=config)  # refused before Spark starts
    spark = api.get_spark(config)
    report = api.load(spark, args.dataset, files, fmt=args.format, columns=args.columns,
                      config=config, time_zone=args.time_zone)
    emit(args, report.to_dict(), report.summary())
    return 0

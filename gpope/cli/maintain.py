"""``gpope maintain``: compact and vacuum the lake's Delta tables (no Spark, no JVM)."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_lake_options, config_from_args, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``maintain`` command."""
    parser = subparsers.add_parser(
        "maintain",
        help="compact small files and vacuum old ones (keeps time travel within the retention)",
        description=("Compact the small files of every Delta table of a local lake (or of "
                     "--dataset) and vacuum files removed more than --retention-hours ago, plus "
                     "files no commit ever referenced (left by killed runs) once they are that "
                     "old. Versions younger than the retention stay readable (time travel); "
                     "versions readers are pinned to by the pipeline_runs manifests are always "
                     "kept; a table whose latest commit belongs to an unfinished step is left "
                     "alone. Runs with deltalake only: no Spark is started."),
    )
    parser.add_argument("--dataset", default=None, help="only this dataset's tables (default: all)")
    parser.add_argument(
        "--retention-hours",
        type=float,
        default=None,
        help="time-travel window kept by vacuum (default: lake.retention_hours in --conf, 168)",
    )
    parser.add_argument("--dry-run", action="store_true",
                        help="list what vacuum would delete; change nothing")
    add_lake_options(parser, remote=False)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api

    args.tracking_uri = None
    report = api.maintain(retention_hours=args.retention_hours, dataset=args.dataset,
                          dry_run=args.dry_run, config=config_from_args(args))
    emit(args, report.to_dict(), report.summary())
    return 0

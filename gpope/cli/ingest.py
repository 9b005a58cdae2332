"""``gpope ingest``: bronze event tables -> silver transitions and rejected events."""

from __future__ import annotations

import argparse

from gpope.cli._common import add_dataset_option, add_lake_options, emit
from gpope.cli.domains import domain_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``ingest`` command."""
    parser = subparsers.add_parser(
        "ingest",
        help="bronze -> silver: transitions and rejected_events of a dataset",
        description=(
            "Turn a dataset's bronze observations, treatments and outcomes into silver transitions "
            "(one trajectory per patient) and rejected_events (every unusable row with its reason). "
            "Re-running replaces the dataset's silver tables. The dataset's variables, actions and "
            "max_length come from 'datasets:' in --conf; for a cohort written by `gpope simulate` "
            "from its recorded simulation (--domain is then optional). It reports how episodes "
            "end (terminal, truncated, at the length cap); with neither 'terminal_variable' nor "
            "'no_terminal_events: true' declared it refuses data holding an undeclared variable "
            "seen mostly after patients' last treatments (an undeclared end event), and warns "
            "when episodes stop early (docs/OWN_DATA.md, 'How an episode ends')."
        ),
    )
    add_dataset_option(parser)
    parser.add_argument(
        "--domain",
        type=domain_arg,
        default=None,
        help="simulated domain whose settings to use when the dataset is not in --conf",
    )
    add_lake_options(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.cli._common import config_from_args

    config = config_from_args(args)
    api.check_stage("ingest", args.dataset, domain=args.domain, config=config)  # before Spark
    spark = api.get_spark(config)
    report = api.ingest(spark, args.dataset, domain=args.domain, config=config)
    emit(args, report.to_dict(), report.summary())
    return 0

"""``gpope budget show|set``: a dataset's privacy budget, spent and remaining (the ledger)."""

from __future__ import annotations

import argparse

from gpope.shell.cli._common import add_json_flag, add_lake_options, emit


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``budget`` command group."""
    parser = subparsers.add_parser(
        "budget",
        help="privacy ledger: a dataset's budget, spent and remaining (epsilon, delta)",
        description=(
            "The privacy ledger records every private run's (epsilon, delta) before it releases "
            "anything. Budgets compose basically: spent = sum over reserved, released and failed "
            "runs. A run that would exceed the budget stops with an error and writes nothing."
        ),
    )
    sub = parser.add_subparsers(dest="budget_command", metavar="{show,set}")
    show = sub.add_parser("show", help="print budget, spent and remaining of a dataset")
    show.add_argument("--dataset", required=True, help="dataset (cohort) name")
    add_lake_options(show)
    add_json_flag(show)
    show.set_defaults(func=_show)
    set_ = sub.add_parser("set", help="set a dataset's total budget (epsilon, delta)")
    set_.add_argument("--dataset", required=True, help="dataset (cohort) name")
    set_.add_argument("--epsilon", type=float, required=True, help="total epsilon budget (> 0)")
    set_.add_argument("--delta", type=float, required=True, help="total delta budget (in [0, 1))")
    add_lake_options(set_)
    add_json_flag(set_)
    set_.set_defaults(func=_set)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _ledger(args: argparse.Namespace):
    from gpope.shell.pipeline.jobargs import config_from_args
    from gpope.shell.pipeline.ledger import PrivacyLedger
    from gpope.shell.spark import get_spark

    config = config_from_args(args)
    return PrivacyLedger(get_spark(config.spark), config)


def _show(args: argparse.Namespace) -> int:
    status = _ledger(args).status(args.dataset)
    emit(args, status.to_dict(), status.summary())
    return 0


def _set(args: argparse.Namespace) -> int:
    status = _ledger(args).set_budget(args.dataset, epsilon=args.epsilon, delta=args.delta)
    emit(args, status.to_dict(), status.summary())
    return 0

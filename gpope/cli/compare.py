"""``gpope compare``: contrast two released runs on the same dataset: per quantity ``run A - run B``
with an interval from the released numbers only (:func:`gpope.api.compare_runs`) and one plain
sentence: better, worse, or cannot tell at this size and epsilon.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpope.cli._common import add_lake_options

_EPILOG = """\
The difference interval of two 95% intervals holds at 90% at least, whatever the two runs share
(union bound). Example:
  gpope compare --dataset ward --runs 3f2c... 9a1b...
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` command."""
    parser = subparsers.add_parser(
        "compare",
        help="contrast two released runs on one dataset: differences with intervals, no budget",
        description=(
            "Contrast two released runs on the same dataset: per reference state and policy "
            "value row, run A minus run B with an interval built from the two released "
            "intervals only (post-processing: no privacy budget, no private table read), and a "
            "sentence saying whether A is better, worse, or cannot be told from B."),
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True, help="the dataset both runs released on")
    parser.add_argument("--runs", nargs=2, metavar=("RUN_A", "RUN_B"), required=True,
                        help="the two run ids (released_values.run_id)")
    add_lake_options(parser, tracking=True, remote=False, json=False)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--track", action="store_true",
        help="also log the differences (JSON) and their figure to an MLflow run in the conf's "
             "experiment, named 'compare | <dataset> | <spec A> - <spec B>'")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope import api
    from gpope.cli._common import config_from_args

    run_a, run_b = args.runs
    comparison = api.compare_runs(args.dataset, run_a, run_b, config=config_from_args(args),
                                  track=args.track, tracking_uri=args.tracking_uri)
    if args.json:
        json.dump(comparison.to_dict(), sys.stdout, indent=1)
        print()
    else:
        print(comparison.summary())
    return 0

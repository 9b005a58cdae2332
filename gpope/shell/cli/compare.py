"""``gpope compare``: contrast two released runs on the same dataset (issue 36.3).

Reads the two runs' rows of ``released_values`` (the reference states' V and the policy value
rows) through the query views, and prints per quantity ``run A - run B`` with an interval built
from the released numbers only (:mod:`gpope.core.compare`: post-processing, no budget spent, no
private table read) and one plain sentence: better, worse, or cannot tell at this size and
epsilon.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from gpope.shell.cli._common import add_lake_options

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
    add_lake_options(parser, remote=False)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=_run)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def released_rows(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """run_id -> state -> its released_values row, for the two runs of ``args``.

    Raises:
        ConfigError: a run has no released row on the dataset (named, with what to check).
    """
    from gpope.errors import ConfigError
    from gpope.shell.cli.query import _config
    from gpope.shell.query import query

    run_a, run_b = args.runs
    sql = ("SELECT run_id, dataset, spec_name, estimator, state, value, lower, upper, ci_level, "
           "epsilon FROM released_values WHERE dataset = " + _sql_string(args.dataset)
           + " AND run_id IN (" + _sql_string(run_a) + ", " + _sql_string(run_b) + ")")
    rows = query(sql, lake=_config(args)).table.to_pylist()
    out: dict[str, dict[str, Any]] = {run_a: {}, run_b: {}}
    for row in rows:
        out[row["run_id"]][row["state"]] = row
    for run in (run_a, run_b):
        if not out[run]:
            raise ConfigError(
                f"Run {run!r} released nothing on dataset {args.dataset!r}. List the runs with "
                f"gpope query \"SELECT DISTINCT run_id, spec_name, created_at FROM released_values "
                f"WHERE dataset = '{args.dataset}'\".")
    return out


def _quantity(row: dict[str, Any]) -> Any:
    from gpope.core.compare import ReleasedQuantity

    if row["ci_level"] is None:  # released without an interval: nothing to compare it by
        return None
    lo = -math.inf if row["lower"] is None else float(row["lower"])
    hi = math.inf if row["upper"] is None else float(row["upper"])
    return ReleasedQuantity(float(row["value"]), lo, hi, float(row["ci_level"]))


def _run(args: argparse.Namespace) -> int:
    from gpope.core.compare import compare_released, sentence

    rows = released_rows(args)
    run_a, run_b = args.runs
    a = {k: q for k, r in rows[run_a].items() if (q := _quantity(r)) is not None}
    b = {k: q for k, r in rows[run_b].items() if (q := _quantity(r)) is not None}
    diffs = compare_released(a, b)
    label = {run: f"{next(iter(rows[run].values()))['spec_name']} ({run[:8]})"
             for run in (run_a, run_b)}
    if args.json:
        json.dump({"dataset": args.dataset, "run_a": run_a, "run_b": run_b,
                   "differences": [{"quantity": d.name, "value": d.value,
                                    "lower": _finite(d.lower), "upper": _finite(d.upper),
                                    "level": d.level, "verdict": d.verdict,
                                    "sentence": sentence(d, label_a="A", label_b="B")}
                                   for d in diffs]}, sys.stdout, indent=1)
        print()
        return 0
    print(f"A = {label[run_a]}, B = {label[run_b]}, dataset {args.dataset}: A - B, from the "
          "released intervals only (no budget)")
    for d in diffs:
        print(sentence(d))
    return 0


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded end is null."""
    return x if math.isfinite(x) else None

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
    add_lake_options(parser, tracking=True, remote=False)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--track", action="store_true",
        help="also log the differences (JSON) and their figure to an MLflow run in the conf's "
             "experiment, named 'compare | <dataset> | <spec A> - <spec B>'")
    parser.set_defaults(func=_run)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def released_rows(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """run_id -> state -> its released_values row, for the two runs of ``args``.

    Raises:
        ConfigError: a run has no released row on the dataset (named, with what to check).
    """
    from gpope.cli._common import config_from_args
    from gpope.errors import ConfigError
    from gpope.shell.query import query

    run_a, run_b = args.runs
    sql = ("SELECT run_id, dataset, spec_name, estimator, state, value, lower, upper, ci_level, "
           "epsilon, estimand FROM released_values WHERE dataset = " + _sql_string(args.dataset)
           + " AND run_id IN (" + _sql_string(run_a) + ", " + _sql_string(run_b) + ")")
    rows = query(sql, lake=config_from_args(args)).table.to_pylist()
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
    payload = {"dataset": args.dataset, "run_a": run_a, "run_b": run_b,
               "differences": [{"quantity": d.name, "value": d.value,
                                "lower": _finite(d.lower), "upper": _finite(d.upper),
                                "level": d.level, "verdict": d.verdict,
                                "sentence": sentence(d, label_a="A", label_b="B"),
                                "estimand_a": rows[run_a][d.name]["estimand"],
                                "estimand_b": rows[run_b][d.name]["estimand"]}
                               for d in diffs]}
    if args.track:
        payload["mlflow_run_id"] = _track(args, payload, diffs, label)
    if args.json:
        json.dump(payload, sys.stdout, indent=1)
        print()
        return 0
    print(f"A = {label[run_a]}, B = {label[run_b]}, dataset {args.dataset}: A - B, from the "
          "released intervals only (no budget)")
    for d, out in zip(diffs, payload["differences"], strict=True):
        print(sentence(d))
        if None not in (out["estimand_a"], out["estimand_b"]) and (
                out["estimand_a"] != out["estimand_b"]):
            print(f"  NOTE: A's row estimates \"{out['estimand_a']}\", B's "
                  f"\"{out['estimand_b']}\": the difference mixes two estimands.")
    return 0


def difference_figure(diffs: list[Any], title: str) -> Any:
    """Matplotlib figure: each difference A - B with its interval (an unbounded end drawn to the
    axis edge and marked), and the zero line the verdicts read."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = list(range(len(diffs)))
    finite = [e for d in diffs for e in (d.lower, d.upper, d.value) if math.isfinite(e)]
    span = (max(finite) - min(finite)) if finite else 1.0
    lo_edge, hi_edge = min([*finite, 0.0]) - 0.2 * span, max([*finite, 0.0]) + 0.2 * span
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 * len(diffs) + 2.0), 3.6))
    for i, d in enumerate(diffs):
        lo = d.lower if math.isfinite(d.lower) else lo_edge
        hi = d.upper if math.isfinite(d.upper) else hi_edge
        colour = {"better": "tab:green", "worse": "tab:red"}.get(d.verdict, "tab:gray")
        ax.errorbar([i], [d.value], yerr=[[d.value - lo], [hi - d.value]], fmt="o", capsize=6,
                    color=colour)
        if not (math.isfinite(d.lower) and math.isfinite(d.upper)):
            ax.annotate("unbounded", (i, hi), fontsize=7, ha="center", va="bottom")
    ax.axhline(0.0, color="k", lw=0.8)
    ax.set_xticks(x, [d.name for d in diffs])
    ax.set_ylim(lo_edge, hi_edge)
    level = f"{min(d.level for d in diffs):.0%}" if diffs else ""
    ax.set_ylabel(f"A - B, {level} interval (union bound)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def _track(args: argparse.Namespace, payload: dict[str, Any], diffs: list[Any],
           label: dict[str, str]) -> str:
    """Log the comparison to MLflow (released numbers only); returns the MLflow run id."""
    import matplotlib.pyplot as plt
    import mlflow

    from gpope.cli._common import config_from_args
    from gpope.shell import mlflow_names as names
    from gpope.shell.tracking import log_json_artifact, resolve_tracking_uri, start_run

    config = config_from_args(args)
    uri = resolve_tracking_uri(getattr(args, "tracking_uri", None), config.tracking.uri,
                               config.lake.root)
    run_a, run_b = args.runs
    title = f"{args.dataset}: A = {label[run_a]} minus B = {label[run_b]}"
    with start_run(tracking_uri=uri, experiment=config.tracking.experiment,
                   run_name=f"compare | {args.dataset} | {label[run_a]} - {label[run_b]}",
                   tags={names.STAGE: "compare", names.DATASET: args.dataset,
                         names.COMPARED_RUN_A: run_a, names.COMPARED_RUN_B: run_b}) as run:
        log_json_artifact(payload, "differences.json")
        fig = difference_figure(diffs, title)
        mlflow.log_figure(fig, "differences.png")
        plt.close(fig)
        return str(run.info.run_id)


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded end is null."""
    return x if math.isfinite(x) else None

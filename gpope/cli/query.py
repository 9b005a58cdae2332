"""``gpope query "SQL"``: one read-only SELECT over the lake's released views (DuckDB over Delta,
no Spark, no JVM); ``--operator`` also opens the raw and per-patient tables."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from typing import Any

from gpope.cli._common import add_lake_options, config_from_args
from gpope.jsonable import jsonable

_EPILOG = """\
views served to analysts: the released tables (released_values, released_estimates), the
ledger (privacy_ledger), budget_status (one row per dataset) and latest_release (the latest
released value and interval per dataset, spec, estimator and reference state, with the budget
left; latest by commit order, release_version, never by the writer's clock). Every table a
query reads is read as of one instant.

a sandbox: exactly one read-only SELECT (WITH ... SELECT, FROM ..., DESCRIBE included) over
those views; files, COPY, ATTACH, EXPORT, INSTALL, SET, writes and a second statement are
refused.

--operator (operators only, not private) also opens the raw and per-patient tables: one
dataset's table as <dataset>__<table> (hiv_demo__transitions), every dataset's table stacked
with a leading dataset column as <table> (observations, transitions, trajectory_stats...),
rejected_events and pipeline_runs.
`gpope query --tables` lists the views; `--describe VIEW` shows the columns with their
comments (units, scale, meaning).

examples:
  gpope query "SELECT dataset, spec_name, state, value, lower, upper, remaining_epsilon
               FROM latest_release WHERE spec_name = 'hiv_demo'"
  gpope query "SELECT dataset, spec_name, estimator, state, value, lower_bound, release_version
               FROM latest_release ORDER BY dataset, spec_name, state"
  gpope query "SELECT * FROM budget_status"
  gpope query --csv "SELECT * FROM released_values WHERE spec_name = 'hiv_demo' ORDER BY created_at"
"""

_MAX_CELL = 48


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``query`` command."""
    parser = subparsers.add_parser(
        "query",
        help="SQL over the released values, estimates and budgets in seconds, no Spark",
        description=("Run one read-only SELECT (DuckDB dialect) over the lake's released Delta "
                     "tables, read directly with delta-rs: no Spark and no JVM start, so it "
                     "answers in about a second. Only the views the query names are opened. The "
                     "same view names are the Unity Catalog table names on a cluster, so the "
                     "query also runs in Spark SQL there."),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sql", nargs="?", default=None,
                        help="one SELECT statement (quote it)")
    add_lake_options(parser, remote=False, json=False)
    parser.add_argument("--operator", action="store_true",
                        help="operators only, not private: also open the raw event tables "
                             "(bronze), patients' transitions and rejected rows (silver), "
                             "per-patient trajectory_stats and pipeline_runs")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--tables", action="store_true",
                      help="list the lake's views (name, layer, dataset, table, path)")
    what.add_argument("--describe", metavar="VIEW", default=None,
                      help="list VIEW's columns with their types and comments")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true",
                     help="print one JSON document: columns and rows (full values)")
    out.add_argument("--csv", action="store_true",
                     help="print CSV with a header (arrays as JSON) for spreadsheets and pandas")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from gpope.errors import ConfigError

    if args.tables:
        return _tables(args)
    if args.describe:
        return _describe(args)
    if args.sql is None:
        raise ConfigError(
            'gpope query needs a SQL statement, e.g. gpope query "SELECT * FROM budget_status", '
            "or --tables / --describe VIEW."
        )
    from gpope import api

    _operator_notice(args)
    result = api.query(args.sql, config=config_from_args(args), operator=args.operator)
    columns = [(f.name, str(f.type)) for f in result.table.schema]
    rows = result.table.to_pylist()
    payload = {"lake": result.lake, "sql": result.sql,
               "columns": [{"name": n, "type": t} for n, t in columns], "rows": rows,
               "row_count": len(rows)}
    names = [n for n, _ in columns]
    _show(args, payload, names, [[row[n] for n in names] for row in rows])
    if not (args.json or args.csv):
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''}, lake {result.lake}, "
              f"{result.seconds:.2f} s)", file=sys.stderr)
    return 0


def _tables(args: argparse.Namespace) -> int:
    from gpope import api

    _operator_notice(args)
    listed = api.lake_views(config=config_from_args(args), operator=args.operator)
    cols = ["view", "layer", "dataset", "table", "path"]
    _show(args, {"lake": listed.lake, "views": list(listed.views)}, cols,
          [[e[c] or "" for c in cols] for e in listed.views], shown=4)
    if not (args.json or args.csv):
        if listed.hidden:
            print(f"({listed.hidden} raw and per-patient table(s) not listed: operators see them "
                  "with --operator)", file=sys.stderr)
    return 0


def _describe(args: argparse.Namespace) -> int:
    from gpope import api

    _operator_notice(args)
    columns = api.describe_view(args.describe, config=config_from_args(args),
                                operator=args.operator)
    _show(args, {"view": args.describe, "columns": columns}, ["column", "type", "comment"],
          [[c["column"], c["type"], c["comment"] or ""] for c in columns], max_cell=None)
    return 0


def _show(args: argparse.Namespace, payload: dict[str, Any], header: list[str],
          rows: list[list[Any]], *, shown: int | None = None, max_cell: int | None = _MAX_CELL,
          ) -> None:
    """``payload`` as JSON (--json), ``rows`` under ``header`` as CSV (--csv), else their first
    ``shown`` columns as a plain-text table."""
    if args.json:
        _dump_json(payload)
    elif args.csv:
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(header)
        writer.writerows([_csv_cell(v) for v in row] for row in rows)
    else:
        print(format_table(header[:shown], [r[:shown] for r in rows], max_cell=max_cell))


def _operator_notice(args: argparse.Namespace) -> None:
    if args.operator:
        print("operator mode: raw and per-patient tables are open; their rows and numbers are "
              "not private releases: operators only, never to be shared as results.",
              file=sys.stderr)


def _plain(value: Any) -> Any:
    """Strict-JSON form: datetimes as ISO strings, non-finite floats as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _dump_json(payload: dict[str, Any]) -> None:
    json.dump(_plain(payload), sys.stdout, indent=2, default=jsonable, allow_nan=False)
    sys.stdout.write("\n")


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(_plain(value), default=jsonable)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value if isinstance(value, str | int | float | bool) else jsonable(value)


def _cell(value: Any, max_cell: int | None) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, float):
        text = f"{value:.6g}" if math.isfinite(value) else str(value)
    elif isinstance(value, list):
        text = "[" + ", ".join(_cell(v, None) for v in value) + "]"
    elif hasattr(value, "isoformat"):
        text = value.isoformat(sep=" ") if hasattr(value, "hour") else value.isoformat()
    else:
        text = str(value)
    text = text.replace("\n", " ")
    if max_cell is not None and len(text) > max_cell:
        text = text[: max_cell - 1] + "…"
    return text


def format_table(columns: list[str], rows: list[list[Any]], *, max_cell: int | None = _MAX_CELL) -> str:
    """A plain-text table: header, rule, one line per row (floats to 6 significant digits)."""
    cells = [[_cell(v, max_cell) for v in row] for row in rows]
    widths = [len(c) for c in columns]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    numeric = [
        all(isinstance(r[i], int | float) and not isinstance(r[i], bool) for r in rows if r[i] is not None)
        and any(r[i] is not None for r in rows)
        for i in range(len(columns))
    ]

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w,
                         num in zip(values, widths, numeric, strict=True)).rstrip()

    out = [line(columns), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)

"""The rules of the analysts' query sandbox: which views are served, and which SQL is run.

``gpope query`` runs exactly one read-only ``SELECT`` (:func:`check_select`, DuckDB's own parser,
before anything is opened) over the released views; the raw and per-patient tables need the
operator switch (:func:`check_served`). :func:`gpope.shell.query.connect` locks the connection.
"""

from __future__ import annotations

from gpope.errors import QueryError

__all__ = ["BUDGET_STATUS_VIEW", "LATEST_RELEASE_VIEW", "OPERATOR_SWITCH",
           "RELEASE_CONTRASTS_VIEW", "RELEASE_TABLES", "RELEASE_VIEWS", "check_select",
           "check_served", "first_line", "is_release_view"]

BUDGET_STATUS_VIEW = "budget_status"
LATEST_RELEASE_VIEW = "latest_release"
RELEASE_CONTRASTS_VIEW = "release_contrasts"
#: The shared gold tables that hold only released (differentially private) outputs and the
#: ledger's accounting: the tables an analyst's query may read.
RELEASE_TABLES: frozenset[str] = frozenset(
    {"released_values", "released_estimates", "privacy_ledger", "released_counts"})
RELEASE_VIEWS: frozenset[str] = RELEASE_TABLES | {BUDGET_STATUS_VIEW, LATEST_RELEASE_VIEW,
                                                   RELEASE_CONTRASTS_VIEW}
"""The views served without the operator switch."""
OPERATOR_SWITCH = "--operator"
"""The command-line switch (``operator=True`` in Python) that opens raw and per-patient tables."""
_OPERATOR_OPENS = ("raw event tables (bronze), patients' transitions and rejected rows (silver), "
                   "per-patient trajectory_stats and pipeline_runs")


def is_release_view(name: str) -> bool:
    """True when ``name`` (any case) is a view served without the operator switch."""
    return name.lower() in RELEASE_VIEWS


def check_select(sql: str) -> None:
    """Refuse anything but exactly one read-only SELECT statement (before any table is opened).

    Raises:
        QueryError: empty SQL, a syntax error, more than one statement, or a statement that is
            not a SELECT (COPY, ATTACH, EXPORT, INSTALL, CREATE, SET, PRAGMA...).
    """
    import duckdb

    if not isinstance(sql, str) or not sql.strip():
        raise QueryError("The SQL query is empty; pass one statement, e.g. "
                         "'SELECT * FROM released_values'.")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"DuckDB could not parse the query: {first_line(exc)}") from None
    allowed = ("gpope query runs exactly one read-only SELECT over the lake's views (WITH ... "
               "SELECT, FROM ... and DESCRIBE forms included); files, COPY, ATTACH, EXPORT, "
               "INSTALL, SET and writes are not available")
    if len(statements) != 1:
        raise QueryError(f"{allowed}; got {len(statements)} statements. Run them one at a time.")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise QueryError(f"{allowed}; got a {kind.name} statement.")


def check_served(named: set[str], available: list[str], operator: bool) -> None:
    """Refuse a query naming operator-only tables (``named``: the lower-case identifiers of the
    SQL; ``available``: every view of the lake) unless ``operator``.

    Raises:
        QueryError: the message names the tables and the switch that opens them.
    """
    if operator:
        return
    from gpope.shell.lake.names import CREATORS

    known = {v.lower() for v in available} | set(CREATORS)
    private = sorted(n for n in named & known if not is_release_view(n))
    if private:
        raise QueryError(
            f"{', '.join(private)}: not a released view. gpope query serves the released views "
            f"({', '.join(sorted(RELEASE_VIEWS))}) to analysts; {OPERATOR_SWITCH} (operator=True) "
            f"also opens {_OPERATOR_OPENS}: patients' rows and noise-free numbers, operators only, "
            "not private."
        )


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its class name when it has none)."""
    text = str(exc).strip().splitlines()
    return text[0].rstrip(".") if text else type(exc).__name__

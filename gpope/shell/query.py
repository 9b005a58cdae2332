"""The analysts' query path: SQL over the lake's released tables, with DuckDB, without Spark or a JVM.

A sandbox (:mod:`gpope.shell.query_sandbox`): a query is exactly one read-only ``SELECT`` over the
registered views; once they are registered, DuckDB's external access is off and its configuration
locked. By default only the released views are served; the raw and per-patient tables need
``operator=True``.

Each Delta table of a path-based lake is a view named as its Unity Catalog table (``<table>``,
``<dataset>__<table>``, or ``<table>`` stacking every dataset's with a leading ``dataset``
column), so a query runs unchanged in Spark SQL on a cluster; derived views: ``budget_status``,
``latest_release`` and ``release_contrasts``. One query reads every table it opens as of one
instant (:func:`snapshot`), each at its pinned version (:mod:`gpope.shell.lake.manifest`);
``latest_release`` orders by commit, never by a host's clock.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError, QueryError
from gpope.shell.lake.local import latest_version, snapshot
from gpope.shell.query_sandbox import (
    BUDGET_STATUS_VIEW,
    LATEST_RELEASE_VIEW,
    OPERATOR_SWITCH,
    RELEASE_CONTRASTS_VIEW,
    RELEASE_TABLES,
    RELEASE_VIEWS,
    check_select,
    check_served,
    first_line,
)

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from gpope.config import GpopeConfig

__all__ = ["BUDGET_STATUS_VIEW", "LATEST_RELEASE_VIEW", "OPERATOR_SWITCH", "RELEASE_VIEWS",
           "LakeTable", "LakeViews", "QueryResult", "connect", "describe", "lake_views",
           "latest_version", "query", "snapshot", "view_names"]

_RELEASED_VALUES = "released_values"
#: latest_release's budget columns (from budget_status; NULL when the lake has no ledger).
_LATEST_BUDGET_COLUMNS = ("budget_epsilon", "spent_epsilon", "remaining_epsilon",
                          "remaining_delta", "runs_left")
_LATEST_RELEASE_SQL = """
SELECT v.dataset, v.spec_name, v.estimator, v.state, v.value, v.lower, v.upper, v.lower_bound,
       v.ci_level, v.epsilon, v.delta, v.private, v.created_at, v.run_id, v.spec_id, v.estimand,
       c.release_version, {budget}
FROM released_values v LEFT JOIN {commits} c ON c.run_id = v.run_id {join}
QUALIFY row_number() OVER (PARTITION BY v.dataset, v.spec_id, v.estimator, v.state
                           ORDER BY c.release_version DESC NULLS LAST, v.created_at DESC,
                                    v.run_id) = 1
"""
_RELEASE_CONTRASTS_SQL = """
SELECT a.dataset, a.state, a.run_id AS run_a, b.run_id AS run_b, a.spec_name AS spec_a,
       b.spec_name AS spec_b, a.estimator AS estimator_a, b.estimator AS estimator_b,
       a.epsilon AS epsilon_a, b.epsilon AS epsilon_b, a.estimand AS estimand_a,
       b.estimand AS estimand_b, a.value - b.value AS difference,
       a.lower - b.upper AS lower, a.upper - b.lower AS upper,
       greatest(0.0, a.ci_level + b.ci_level - 1.0) AS ci_level,
       CASE WHEN a.lower - b.upper > 0 THEN 'better' WHEN a.upper - b.lower < 0 THEN 'worse'
            ELSE 'cannot tell' END AS verdict
FROM released_values a JOIN released_values b
  ON a.dataset = b.dataset AND a.state = b.state AND a.run_id <> b.run_id
WHERE a.ci_level IS NOT NULL AND b.ci_level IS NOT NULL
"""
_RELEASE_CONTRASTS_COMMENTS = {
    "difference": "value of run_a minus value of run_b at this state / policy value row",
    "lower": "lower end of the difference's interval: run_a's lower minus run_b's upper",
    "upper": "upper end of the difference's interval: run_a's upper minus run_b's lower",
    "ci_level": ("level the difference's interval holds at whatever the runs share (union "
                 "bound): 1 - (1 - level_a) - (1 - level_b), 0.90 for two 95% intervals"),
    "verdict": "better (lower > 0), worse (upper < 0) or cannot tell (run_a against run_b)",
    **{f"estimand_{r}": f"what run_{r}'s row estimates (released_values.estimand)" for r in "ab"},
}
#: Arrow view behind latest_release's commit order: run_id -> released_values version.
_RELEASE_COMMITS = "__release_commits"
_RELEASE_VERSION_COMMENT = (
    "version of released_values that committed this release: commit order, which decides "
    "'latest' (created_at is the writer's clock and may be skewed)")
_PIPELINE_RUNS = "pipeline_runs"
_LEDGER = "privacy_ledger"
_LAYERS = ("bronze", "silver", "gold")
_SEPARATOR = "__"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DATASET_COMMENT = "dataset (cohort) the row belongs to (view {view} stacks every dataset's {table})"


@dataclass(frozen=True)
class LakeTable:
    """One Delta table found in the lake and the view it is queried by (``dataset`` None: a
    shared gold table)."""

    view: str
    layer: str
    table: str
    dataset: str | None
    path: str


@dataclass(frozen=True)
class QueryResult:
    """The answer of :func:`query`: an Arrow table plus where it came from."""

    table: pa.Table
    sql: str
    lake: str
    views: tuple[str, ...]
    seconds: float

    def to_pandas(self) -> Any:
        return self.table.to_pandas()

    def to_pylist(self) -> list[dict[str, Any]]:
        return self.table.to_pylist()


def _lake_root(lake: str | Path | GpopeConfig | None) -> tuple[Path, GpopeConfig]:
    """The local lake root and the configuration (defaults when only a path is given)."""
    from gpope.config import GpopeConfig, load_config
    from gpope.shell.lake.names import local_root

    if isinstance(lake, GpopeConfig):
        config = lake
    else:
        config = load_config(None, lake={"root": str(lake) if lake is not None else None})
    if config.lake.catalog is not None:
        raise ConfigError(
            f"gpope query reads path-based lakes; lake.catalog/lake.schema are set "
            f"({config.lake.catalog}.{config.lake.schema}). On a cluster, run the same SQL with "
            "Spark SQL in that schema: the table names are the same (dataset__table)."
        )
    root = local_root(config.lake.root)
    if root is None:
        raise ConfigError(
            f"gpope query reads a local lake directory; got lake root {config.lake.root!r}. On "
            "Databricks use the /dbfs/... path of the lake, or Spark SQL."
        )
    if not root.is_dir():
        raise ConfigError(
            f"The lake root {root} does not exist. Pass the lake the pipeline wrote with --lake "
            "(the default is ./lake in the current directory)."
        )
    return root, config


def _is_delta(path: Path) -> bool:
    return (path / "_delta_log").is_dir()


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(path) if e.is_dir())
    except FileNotFoundError:
        return []


def _discover(root: Path) -> list[LakeTable]:
    """The Delta tables under ``root`` (none opened), sorted by view: a shared gold table is
    viewed by its name, a per-dataset one as ``<dataset>__<table>``."""
    found: list[LakeTable] = []
    for layer in _LAYERS:
        for first in _subdirs(root / layer):
            if layer == "gold" and _is_delta(first):
                found.append(LakeTable(first.name, layer, first.name, None, str(first)))
                continue
            for table in _subdirs(first):
                if _is_delta(table):
                    view = f"{first.name}{_SEPARATOR}{table.name}"
                    found.append(LakeTable(view, layer, table.name, first.name, str(table)))
    return sorted(found, key=lambda t: t.view)


def _served(tables: Iterable[LakeTable], operator: bool) -> list[LakeTable]:
    """The tables a query may open: the release tables, and with ``operator`` every table."""
    return [t for t in tables if operator or t.view in RELEASE_TABLES]


def _check_case(tables: Iterable[LakeTable]) -> None:
    """Refuse to serve datasets whose names differ only in case: SQL names ignore case, so
    ``Base__observations`` and ``base__observations`` would be one view (and the stacked view
    would count one dataset twice)."""
    seen: dict[str, str] = {}
    for t in tables:
        if t.dataset is None:
            continue
        other = seen.setdefault(t.dataset.lower(), t.dataset)
        if other != t.dataset:
            raise QueryError(
                f"The lake holds datasets {other!r} and {t.dataset!r}, whose names differ only "
                "in case; SQL views ignore case, so their tables would be served as one. "
                f"Rename one of them (its folders <lake>/<layer>/{t.dataset}) or query the "
                "released views, which keep them apart."
            )


def view_names(tables: Iterable[LakeTable], *, operator: bool = True) -> list[str]:
    """The view names a lake with ``tables`` offers (per-table, stacked, budget_status and
    latest_release); without ``operator`` only the :data:`RELEASE_VIEWS` among them."""
    tables = _served(tables, operator)
    names = {t.view for t in tables}
    names.update(t.table for t in tables if t.dataset is not None)
    if any(t.view == _LEDGER for t in tables):
        names.add(BUDGET_STATUS_VIEW)
    if _RELEASED_VALUES in names:
        names.update((LATEST_RELEASE_VIEW, RELEASE_CONTRASTS_VIEW))
    return sorted(names)


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _open_dataset(
    table: LakeTable, committed: set[str], at: int
) -> tuple[Any, dict[str, str], set[str], dict[str, int]] | None:
    """The table as readers must see it in the snapshot where it is at version ``at``: its Arrow
    dataset at the pinned version (the latest commit up to ``at`` not tagged with an incomplete
    pipeline run, :mod:`gpope.shell.lake.manifest`), its column comments from the Delta schema,
    the incomplete runs whose rows stay hidden, and the version that committed each complete
    run's rows (commit order). None when only incomplete runs wrote the table."""
    from gpope.shell.lake.local import local_tables
    from gpope.shell.lake.manifest import pinned_version

    store = local_tables()
    history = [(e.version, e.run_id) for e in store.history(table.path, at)]
    version = pinned_version(history, committed)
    if version is None:
        return None
    hidden = {tag for v, tag in history if tag is not None and v <= version and tag not in committed}
    commits: dict[str, int] = {}
    for v, tag in history:
        if tag is not None and tag in committed and v <= version:
            commits[tag] = max(v, commits.get(tag, -1))
    comments = store.column_comments(table.path, version)
    return store.arrow_dataset(table.path, version), comments, hidden, commits


def _comment_columns(con: duckdb.DuckDBPyConnection, view: str, comments: dict[str, str]) -> None:
    for column, comment in comments.items():
        con.execute(
            f"COMMENT ON COLUMN {_quote(view)}.{_quote(column)} IS {_sql_string(comment)}"
        )


def _register(
    con: duckdb.DuckDBPyConnection, table: LakeTable, committed: set[str], at: int
) -> dict[str, str] | None:
    opened = _open_dataset(table, committed, at)
    if opened is None:
        return None
    dataset, comments, hidden, commits = opened
    if table.view == _RELEASED_VALUES:
        _register_commits(con, commits)
    arrow_name = f"__arrow_{table.view}"
    con.register(arrow_name, dataset)
    where = ""
    if hidden and "run_id" in dataset.schema.names:
        where = " WHERE run_id NOT IN (" + ", ".join(_sql_string(r) for r in sorted(hidden)) + ")"
    extra = (", CAST(NULL AS VARCHAR) AS estimand" if table.view == _RELEASED_VALUES  # older
             and "estimand" not in dataset.schema.names else "")  # tables: estimand null
    con.execute(f"CREATE OR REPLACE TEMP VIEW {_quote(table.view)} AS "
                f"SELECT *{extra} FROM {_quote(arrow_name)}{where}")
    _comment_columns(con, table.view, comments)
    return comments


def _register_stacked(
    con: duckdb.DuckDBPyConnection, name: str, members: list[LakeTable], comments: dict[str, str]
) -> None:
    parts = [
        f"SELECT {_sql_string(t.dataset or '')} AS dataset, * FROM {_quote(t.view)}"
        for t in members
    ]
    con.execute(f"CREATE OR REPLACE TEMP VIEW {_quote(name)} AS " + " UNION ALL BY NAME ".join(parts))
    _comment_columns(
        con, name, {"dataset": _DATASET_COMMENT.format(view=name, table=name), **comments}
    )


def _register_commits(con: duckdb.DuckDBPyConnection, commits: dict[str, int]) -> None:
    import pyarrow as pa

    con.register(_RELEASE_COMMITS, pa.table({
        "run_id": pa.array(list(commits), type=pa.string()),
        "release_version": pa.array(list(commits.values()), type=pa.int64()),
    }))


def _register_budget_status(
    con: duckdb.DuckDBPyConnection, config: GpopeConfig, ledger_path: str, at: int | None
) -> None:
    from gpope.shell.ledger_comments import BUDGET_STATUS_COMMENTS
    from gpope.shell.pipeline.ledger import budget_status_table
    from gpope.shell.pipeline.ledger_store import DeltaRsLedgerStore

    rows = budget_status_table(config, store=DeltaRsLedgerStore(ledger_path, version=at))
    con.register("__arrow_budget_status", rows)
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW {BUDGET_STATUS_VIEW} AS SELECT * FROM __arrow_budget_status"
    )
    _comment_columns(con, BUDGET_STATUS_VIEW, {k: v for k, v in BUDGET_STATUS_COMMENTS.items()
                                               if k in rows.column_names})


def _register_latest_release(con: duckdb.DuckDBPyConnection, *, with_budget: bool) -> None:
    if with_budget:
        budget = ", ".join(f"b.{c}" for c in _LATEST_BUDGET_COLUMNS)
        join = f"LEFT JOIN {BUDGET_STATUS_VIEW} b ON b.dataset = v.dataset"
    else:
        budget = ", ".join(f"CAST(NULL AS DOUBLE) AS {c}" for c in _LATEST_BUDGET_COLUMNS)
        join = ""
    con.execute(f"CREATE OR REPLACE TEMP VIEW {LATEST_RELEASE_VIEW} AS "
                + _LATEST_RELEASE_SQL.format(budget=budget, join=join, commits=_RELEASE_COMMITS))
    comments = dict(con.execute(
        "SELECT column_name, comment FROM duckdb_columns() WHERE table_name IN (?, ?) "
        "AND comment IS NOT NULL", [_RELEASED_VALUES, BUDGET_STATUS_VIEW]).fetchall())
    comments["value"] = ("the LATEST released value at this reference state for (dataset, spec, "
                         "estimator), latest by commit order (release_version); "
                         + comments.get("value", ""))
    comments["release_version"] = _RELEASE_VERSION_COMMENT
    columns = {r[0] for r in con.execute(f"DESCRIBE {LATEST_RELEASE_VIEW}").fetchall()}
    _comment_columns(con, LATEST_RELEASE_VIEW,
                     {k: v for k, v in comments.items() if k in columns and v})


def connect(
    lake: str | Path | GpopeConfig | None = None, *, views: Iterable[str] | None = None,
    operator: bool = False,
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB sandbox with the lake's tables as views (session time zone UTC).

    Guarantees: the connection serves only the registered views; external access (file reads
    and writes, ATTACH, INSTALL) is off and the configuration locked before it is returned.

    ``lake``: a root or a configuration (None: ``./lake``); ``views``: open only these
    (case-insensitive); ``operator``: also the raw and per-patient tables (not private).

    Raises:
        ConfigError: the lake root does not exist, or is not a local path-based lake.
        QueryError: two served datasets' names differ only in case.
    """
    import duckdb

    root, config = _lake_root(lake)
    discovered = _discover(root)
    manifest = next((t.path for t in discovered if t.view == _PIPELINE_RUNS), None)
    tables = _served(discovered, operator)
    wanted = None if views is None else {v.lower() for v in views}
    if wanted is not None and LATEST_RELEASE_VIEW in wanted:  # the views it is built from
        wanted |= {_RELEASED_VALUES, BUDGET_STATUS_VIEW}
    if wanted is not None and RELEASE_CONTRASTS_VIEW in wanted:
        wanted |= {_RELEASED_VALUES}
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    stacked: dict[str, list[LakeTable]] = {}
    for t in tables:
        if t.dataset is not None:
            stacked.setdefault(t.table, []).append(t)
    has_ledger = any(t.view == _LEDGER for t in tables)
    needed = [t for t in tables if wanted is None or t.view.lower() in wanted or (
        t.dataset is not None and t.table.lower() in wanted)]
    _check_case(needed)
    ledger_path = next((t.path for t in tables if t.view == _LEDGER), "")
    with_budget = has_ledger and (wanted is None or BUDGET_STATUS_VIEW in wanted)
    # one instant for every table the query reads, the manifest and the ledger included
    versions = snapshot([t.path for t in needed] + ([manifest] if manifest else [])
                        + ([ledger_path] if with_budget else []))
    committed = _committed(manifest, versions.get(manifest) if manifest else None)
    if any(t.view == _LEDGER for t in needed) and versions.get(ledger_path) is not None:
        from gpope.shell.pipeline.ledger_store import DeltaRsLedgerStore

        # the ledger's own audited read, before any view opens its log: a forged or damaged
        # ledger is one error naming it (budget_status reads the ledger again, after this)
        DeltaRsLedgerStore(ledger_path, version=versions[ledger_path]).rows()
    comments_of: dict[str, dict[str, str]] = {}
    for t in needed:
        at = versions[t.path]
        comments = None if at is None else _register(con, t, committed, at)
        if comments is not None:
            comments_of[t.view] = comments
    for name, members in stacked.items():
        visible = [t for t in members if t.view in comments_of]
        if visible and (wanted is None or name.lower() in wanted) and name not in {
            t.view for t in tables
        }:
            _register_stacked(con, name, visible, comments_of[visible[-1].view])
    if with_budget:
        _register_budget_status(con, config, ledger_path, versions[ledger_path])
    if _RELEASED_VALUES in comments_of and (wanted is None or LATEST_RELEASE_VIEW in wanted):
        _register_latest_release(con, with_budget=has_ledger)
    if _RELEASED_VALUES in comments_of and (wanted is None or RELEASE_CONTRASTS_VIEW in wanted):
        con.execute(f"CREATE OR REPLACE TEMP VIEW {RELEASE_CONTRASTS_VIEW} AS "
                    + _RELEASE_CONTRASTS_SQL)
        _comment_columns(con, RELEASE_CONTRASTS_VIEW, _RELEASE_CONTRASTS_COMMENTS)
    # the views are in place: from here on nothing but them can be read, nothing written
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _committed(manifest: str | None, at: int | None) -> set[str]:
    """Run ids with a complete manifest in ``pipeline_runs`` at version ``at``."""
    if manifest is None or at is None:
        return set()
    from gpope.shell.lake.local import local_tables

    return set(local_tables().read_arrow(manifest, at).column("run_id").to_pylist())


def query(sql: str, *, lake: str | Path | GpopeConfig | None = None,
          operator: bool = False) -> QueryResult:
    """Run ``sql`` (one DuckDB SELECT) over the views of ``lake`` and ``operator`` (see
    :func:`connect`); only the views it names are opened. Returns the rows as an Arrow table,
    with the SQL, the lake root and the views opened.

    Raises:
        ConfigError: the lake root does not exist or is not a local path-based lake.
        QueryError: the SQL is empty, not exactly one SELECT, names an operator-only table
            without ``operator``, or DuckDB refuses it (the message lists the lake's views).
    """
    import duckdb
    import pyarrow as pa

    check_select(sql)
    start = time.perf_counter()
    root, config = _lake_root(lake)
    tables = _discover(root)
    named = {m.group(0).lower() for m in _IDENTIFIER.finditer(sql)}
    check_served(named, view_names(tables), operator)
    available = view_names(tables, operator=operator)
    opened = [v for v in available if v.lower() in named]
    con = connect(config, views=opened, operator=operator)
    try:
        result = con.sql(sql)
        arrow = result.to_arrow_table() if result is not None else pa.table({})
    except duckdb.CatalogException as exc:
        raise QueryError(
            f"{first_line(exc)}. Views of the lake {root}: {', '.join(available) or '(none)'}. "
            f"{_missing_hint(named, available)}"
        ) from None
    except duckdb.PermissionException as exc:
        raise QueryError(f"{first_line(exc)}: gpope query reads only the lake's views, never "
                         "other files.") from None
    except duckdb.Error as exc:
        raise QueryError(f"DuckDB could not run the query: {first_line(exc)}") from None
    finally:
        con.close()
    return QueryResult(arrow, sql, str(root), tuple(opened), time.perf_counter() - start)


def describe(view: str, *, lake: str | Path | GpopeConfig | None = None,
             operator: bool = False) -> list[dict[str, Any]]:
    """The columns of ``view``: name, DuckDB type and comment (None when the table has none).

    Raises:
        QueryError: the lake has no such view (the message lists the views), or ``view`` is an
            operator-only table and ``operator`` is False.
    """
    root, config = _lake_root(lake)
    tables = _discover(root)
    check_served({view.lower()}, view_names(tables), operator)
    available = view_names(tables, operator=operator)
    match = [v for v in available if v.lower() == view.lower()]
    if not match:
        raise QueryError(
            f"The lake {root} has no view {view!r}. Views: {', '.join(available) or '(none)'}. "
            f"{_missing_hint({view.lower()}, available)}"
        )
    con = connect(config, views=match, operator=operator)
    try:
        rows = con.execute(
            "SELECT column_name, data_type, comment FROM duckdb_columns() "
            "WHERE lower(table_name) = lower(?) ORDER BY column_index",
            [match[0]],
        ).fetchall()
    finally:
        con.close()
    return [{"column": c, "type": t, "comment": comment} for c, t, comment in rows]


@dataclass(frozen=True)
class LakeViews:
    """What ``gpope query --tables`` lists: per view its layer, dataset, table and path (None:
    a derived view), sorted; ``hidden`` counts the tables left out without ``operator``."""

    lake: str
    views: tuple[dict[str, str | None], ...]
    hidden: int


def lake_views(lake: str | Path | GpopeConfig | None = None, *,
               operator: bool = False) -> LakeViews:
    """The views a query may name on ``lake`` (see :class:`LakeViews`)."""
    root, config = _lake_root(lake)
    found = _discover(root)
    tables = _served(found, operator)
    entries: list[dict[str, str | None]] = [{"view": t.view, "layer": t.layer, "dataset": t.dataset,
                                              "table": t.table, "path": t.path} for t in tables]
    for name in sorted({t.table for t in tables if t.dataset is not None}):
        entries.append({"view": name, "layer": next(t.layer for t in tables if t.table == name),
                        "dataset": "(all, column dataset)", "table": name, "path": None})
    names = view_names(tables, operator=operator)
    derived = {BUDGET_STATUS_VIEW: "privacy_ledger",
               LATEST_RELEASE_VIEW: "released_values + budget_status"}
    entries += [{"view": view, "layer": "gold", "dataset": "(all)", "table": table, "path": None}
                for view, table in derived.items() if view in names]
    return LakeViews(str(config.lake.root), tuple(sorted(entries, key=lambda e: str(e["view"]))),
                     len(found) - len(tables))


def _missing_hint(named: set[str], available: list[str]) -> str:
    """Which stage creates a known table the lake does not have yet."""
    from gpope.shell.lake.names import CREATORS

    known = {v.lower() for v in available}
    missing = sorted(n for n in named if n in CREATORS and n not in known)
    derived = {BUDGET_STATUS_VIEW: "privacy_ledger", LATEST_RELEASE_VIEW: _RELEASED_VALUES,
               RELEASE_CONTRASTS_VIEW: _RELEASED_VALUES}
    missing += [name for name in derived if name in named and name not in known]
    hints = []
    for name in missing:
        creator = CREATORS[derived.get(name, name)].format(dataset="NAME")
        hints.append(f"{name} does not exist yet: it is created by {creator}.")
    return " ".join(hints)

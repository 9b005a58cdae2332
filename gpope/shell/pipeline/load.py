"""Load existing files (Parquet or CSV) into a dataset's bronze tables: the own-data entry point.

:func:`run_load` reads one file (or folder, or glob) per bronze table, checks each against the
bronze contract (a missing column or an impossible type stops the load with one line) and
replaces the dataset's bronze tables with the rows as delivered, the three commits made visible
together by one ``pipeline_runs`` manifest. Rows are not parsed or filtered here: ``gpope
ingest`` quarantines what it cannot use, so rows in = rows used + rows rejected starts from the
delivered rows.

CSV is read as text (a patient id ``007`` stays ``007``); Parquet keeps its types
(:mod:`gpope.shell.pipeline.load_types`). A time without a time zone is a wall-clock time of
``time_zone`` (UTC when not given). A treatments file without ``propensity`` is loaded without
it: the bronze schema then records that propensities were not logged
(:mod:`gpope.shell.pipeline.propensities`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gpope.errors import ConfigError
from gpope.shell.pipeline.load_types import (
    NANOS_AS_LONG,
    ParquetTimes,
    check_time_zone,
    inspect_parquet,
    localize_text,
    set_nanos_as_long,
    times_as_instants,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from gpope.config import GpopeConfig

__all__ = ["BRONZE_COLUMNS", "BRONZE_TABLES", "ColumnMap", "FileFormat", "LoadReport",
           "check_files", "parse_column_map", "read_bronze_file", "run_load"]

BRONZE_TABLES: tuple[str, ...] = ("observations", "treatments", "outcomes")
#: The bronze contract's column names per table (the types are in :mod:`gpope.shell.schemas`,
#: which needs Spark; a test checks that both name the same columns).
BRONZE_COLUMNS: dict[str, tuple[str, ...]] = {
    "observations": ("patient_id", "time", "variable", "value"),
    "treatments": ("patient_id", "time", "action", "propensity"),
    "outcomes": ("patient_id", "time", "reward"),
}
#: Contract columns a file may leave out: loaded without them (an extract without logged
#: propensities).
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {"treatments": ("propensity",)}
FileFormat = Literal["auto", "parquet", "csv"]
#: Per bronze table, ``{bronze column: the file's column}`` for the columns named otherwise.
ColumnMap = dict[str, dict[str, str]]
ColumnsLike = str | Sequence[str] | Mapping[str, str] | None


def parse_column_map(columns: ColumnsLike) -> ColumnMap:
    """The per-table renames that ``columns`` asks for.

    ``columns`` is text ``BRONZE=SOURCE[,BRONZE=SOURCE...]`` (a list of such texts, or a mapping
    ``{BRONZE: SOURCE}``). ``BRONZE`` is a contract column (``patient_id``, ``time``,
    ``variable``, ``value``, ``action``, ``propensity``, ``reward``), applied to every table that
    has it, or ``TABLE.BRONZE`` (e.g. ``treatments.time``), applied to that table only and
    taking precedence over the unprefixed entry. A column not named is taken by its own name.

    Guarantees: every key of the result is a bronze table, every inner key one of its contract
    columns, and no two contract columns of a table read the same source column.

    Raises:
        ConfigError: an entry that breaks these rules.
    """
    if columns is None:
        return {}
    if isinstance(columns, Mapping):
        pairs = [(str(k).strip(), str(v).strip()) for k, v in columns.items()]
    else:
        texts = [columns] if isinstance(columns, str) else list(columns)
        pairs = []
        for entry in (e.strip() for text in texts for e in text.split(",")):
            if not entry:
                continue
            if "=" not in entry:
                raise ConfigError(f"--columns entry {entry!r} is not BRONZE=SOURCE (for example "
                                  "patient_id=mrn or treatments.time=ordered_at).")
            bronze, source = entry.split("=", 1)
            pairs.append((bronze.strip(), source.strip()))
    known = sorted({c for cols in BRONZE_COLUMNS.values() for c in cols})
    shared: dict[str, str] = {}
    scoped: ColumnMap = {}
    for bronze, source in pairs:
        table, _, name = bronze.rpartition(".")
        if not name or not source:
            raise ConfigError(f"--columns entry {bronze}={source} names no column on one side; "
                              "give BRONZE=SOURCE, for example patient_id=mrn.")
        if table and table not in BRONZE_COLUMNS:
            raise ConfigError(f"--columns entry {bronze}={source}: unknown table {table!r}; "
                              f"the bronze tables are {', '.join(BRONZE_TABLES)}.")
        allowed = BRONZE_COLUMNS[table] if table else known
        if name not in allowed:
            where = f"the {table} table" if table else "the bronze contract"
            raise ConfigError(f"--columns entry {bronze}={source}: {name!r} is not a column of "
                              f"{where} ({', '.join(allowed)}); the left side is the bronze "
                              "name, the right side your file's column.")
        target = scoped.setdefault(table, {}) if table else shared
        if name in target:
            raise ConfigError(f"--columns gives {bronze} twice ({target[name]!r} and {source!r}); "
                              "give it once.")
        target[name] = source
    result: ColumnMap = {}
    for table, contract in BRONZE_COLUMNS.items():
        own = {c: scoped.get(table, {}).get(c, shared.get(c, c)) for c in contract}
        sources = list(own.values())
        for source in own.values():
            if sources.count(source) > 1:
                both = [c for c, s in own.items() if s == source]
                raise ConfigError(f"--columns maps the {table} columns {both} all to {source!r}; "
                                  f"each needs its own column (use {table}.COLUMN=SOURCE).")
        renamed = {c: s for c, s in own.items() if s != c}
        if renamed:
            result[table] = renamed
    return result


def _mapping_text(renamed: Mapping[str, str]) -> str:
    return ", ".join(f"{c} <- {s}" for c, s in renamed.items()) or "none"


def _check_sources(table: str, where: str, found: Sequence[str],
                   renamed: Mapping[str, str]) -> None:
    """Refuse (SchemaError) a file whose columns cannot give ``table``'s contract under
    ``renamed``."""
    from gpope.errors import SchemaError

    absent_src = {c: s for c, s in renamed.items() if s not in found}
    if absent_src:
        first = next(iter(absent_src))
        raise SchemaError(
            f"The {table} file {where} has no column(s) {list(absent_src.values())} named in "
            f"--columns ({_mapping_text(renamed)}); found columns {list(found)}. Name "
            f"this file's column for {table} only (e.g. --columns {table}.{first}=YOUR_NAME), "
            "then load again.")
    clash = [c for c in renamed if c in found]
    if clash:
        raise SchemaError(
            f"The {table} file {where} has column(s) {clash} and --columns maps other columns "
            f"to those names ({_mapping_text(renamed)}); found columns {list(found)}. "
            f"Map them from their own column ({table}.COLUMN=COLUMN) or drop one, then load again.")
    absent = [c for c in BRONZE_COLUMNS[table] if c not in renamed and c not in found
              and c not in OPTIONAL_COLUMNS.get(table, ())]
    if absent:
        raise SchemaError(
            f"The {table} file {where} lacks the column(s) {absent} of the bronze contract "
            f"({', '.join(BRONZE_COLUMNS[table])}); found columns {list(found)}. Map your "
            f"names with --columns (e.g. --columns {table}.{absent[0]}=YOUR_NAME; "
            "docs/OWN_DATA.md, 'The bronze contract'), then load again.")


@dataclass(frozen=True)
class LoadReport:
    """What :func:`run_load` wrote: per table its file, rows (as delivered), Delta version,
    renamed columns (``{bronze column: file column}``) and the optional contract columns its
    file lacked (``filled``); ``time_zone`` of the times without one (None: UTC)."""

    dataset: str
    files: dict[str, str]
    rows: dict[str, int]
    versions: dict[str, int]
    columns: ColumnMap = field(default_factory=dict)
    time_zone: str | None = None
    filled: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``gpope load --json``); the row counts (noise-free counts of the
        private rows) under ``operator_only``, tagged ``diagnostic.private``."""
        from gpope.shell.operator import OPERATOR_ONLY, operator_only

        return {"dataset": self.dataset, "files": dict(self.files),
                "versions": dict(self.versions),
                "columns": {t: dict(m) for t, m in self.columns.items()},
                "time_zone": self.time_zone,
                "filled": {t: list(c) for t, c in self.filled.items()},
                OPERATOR_ONLY: operator_only({"rows": dict(self.rows)})}  # fmt: skip

    def summary(self) -> str:
        """Lines ending with the next command; row counts under the operator-only heading."""
        from gpope.shell.operator import HEADING

        lines = [f"load {self.dataset}: bronze tables replaced (rows as delivered)"]
        lines += [f"  {t:<13}renamed: {_mapping_text(m)}" for t, m in self.columns.items()]
        lines += [f"  {t:<13}{', '.join(c)}: not in the file, not logged (evaluate estimates it)"
                  for t, c in self.filled.items()]  # fmt: skip
        lines.append(f"  times without a time zone read as {self.time_zone or 'UTC'} wall-clock "
                     "times")
        lines.append(HEADING)
        lines += [f"  {t:<13}{self.rows[t]:>10} rows  <- {self.files[t]}" for t in self.rows]
        lines.append(f"next: gpope ingest --dataset {self.dataset} --conf YOUR_CONF "
                     "(with the dataset under 'datasets:')")  # fmt: skip
        return "\n".join(lines)


def _format_of(path: str, fmt: FileFormat) -> str:
    if fmt != "auto":
        return fmt
    probe = path
    if os.path.isdir(path):
        names = sorted(os.listdir(path))
        probe = next((n for n in names if n.endswith((".parquet", ".csv"))), path)
    if probe.endswith(".csv") or probe.endswith(".csv.gz"):
        return "csv"
    if probe.endswith(".parquet"):
        return "parquet"
    raise ConfigError(
        f"Cannot tell the format of {path!r} from its name; pass --format parquet or --format csv."
    )


def _resolve(path: str, table: str) -> str:
    """``path`` made absolute (local paths only); ConfigError when it matches no file."""
    if "://" in path:
        return path
    path = os.path.abspath(os.path.expanduser(path))
    if not _matches(path):
        raise ConfigError(f"The {table} file {path!r} does not exist (no file matches it).")
    return path


def _matches(path: str) -> list[str]:
    """The local files or folders ``path`` names: itself when it exists (whatever characters
    its name holds: ``?``, ``[``, ``{`` are literal then), else the matches of it as a glob."""
    return [path] if os.path.exists(path) else sorted(glob.glob(path))


def _spark_paths(path: str) -> list[str]:
    """What Spark reads for ``path``: each local match as a literal ``file:`` path (Hadoop would
    otherwise expand ``?``, ``*``, ``[...]`` and ``{a,b}`` in a folder's name); a URI as given."""
    if "://" in path:
        return [path]
    from gpope.shell.lake.names import spark_path

    return [spark_path(match) for match in _matches(path)]


def _data_files(path: str, kind: str) -> list[str]:
    """The local data files behind ``path`` (a file, a folder of files or a glob), in order."""
    suffix = ".csv" if kind == "csv" else ".parquet"
    found = []
    for match in _matches(path):
        if os.path.isfile(match):
            found.append(match)
            continue
        for root, dirs, names in os.walk(match):
            dirs.sort()
            found += [os.path.join(root, name) for name in sorted(names)
                      if name.endswith(suffix) and not name.startswith(("_", "."))]
    return found


def _columns(path: str, kind: str) -> list[str] | None:
    """The column names of the local file ``path`` (CSV: its header row), or None if unreadable
    here (then Spark reads it and reports)."""
    try:
        if kind == "csv":
            import csv
            import gzip

            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt", newline="", encoding="utf-8-sig") as fh:
                return next(csv.reader(fh), [])
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    except Exception:  # an unreadable file is reported by Spark, with its own error
        return None


def check_files(files: dict[str, str], *, fmt: FileFormat = "auto",
                columns: ColumnsLike = None, time_zone: str | None = None) -> dict[str, str]:
    """The three files' paths, resolved, after every check that needs no Spark.

    Guarantees: every table has a path matching a file of a known format; ``columns`` and
    ``time_zone`` are valid; where a local file's column names are readable (a Parquet footer,
    a CSV header row), every required contract column is among them under ``columns``, and the
    contract columns of local Parquet files have types load reads.

    Raises:
        ConfigError: a missing path or file, an unknown format, ``columns`` or ``time_zone``.
        SchemaError: a contract or mapped column is missing from a file, or of a type the
            contract cannot hold.
    """
    check_time_zone(time_zone)
    renames = parse_column_map(columns)
    missing = [t for t in BRONZE_TABLES if not files.get(t)]
    if missing:
        raise ConfigError(f"gpope load needs one file per bronze table; missing: {missing}.")
    resolved = {}
    for table in BRONZE_TABLES:
        path = resolved[table] = _resolve(files[table], table)
        kind = _format_of(path, fmt)
        local = [] if "://" in path else _data_files(path, kind)
        found = _columns(local[0], kind) if local else None
        if found is not None:
            _check_sources(table, local[0], found, renames.get(table, {}))
        if kind == "parquet" and local:
            inspect_parquet(table, local, renames.get(table, {}), BRONZE_COLUMNS[table])
    return resolved


def _read_parquet(spark: SparkSession, path: str, paths: list[str], table: str,
                  renamed: Mapping[str, str], time_zone: str | None
                  ) -> tuple[DataFrame, ParquetTimes]:
    """The Parquet files as Spark reads them, and which of their columns hold what times.

    Local files: their footers say (:func:`inspect_parquet`). A remote path is read again with
    ``TIMESTAMP(NANOS)`` columns as longs when Spark refuses them (then ``time_zone`` cannot be
    applied: ConfigError). Sets :data:`NANOS_AS_LONG` on the session when a column needs it.
    """
    if "://" not in path:
        times = inspect_parquet(table, _data_files(path, "parquet"), renamed,
                                BRONZE_COLUMNS[table])
        if times.nanos:
            where = f"The {table} file(s) {path} (column(s) {sorted(times.nanos)})"
            set_nanos_as_long(spark, "true", where=where)
        return spark.read.parquet(*paths), times
    previous = spark.conf.get(NANOS_AS_LONG, None)
    set_nanos_as_long(spark, "false")
    try:
        return spark.read.parquet(*paths), ParquetTimes()
    except Exception as exc:
        if "PARQUET_TYPE_ILLEGAL" not in str(exc) or "TIMESTAMP(NANOS" not in str(exc):
            raise
    finally:
        set_nanos_as_long(spark, previous)
    if time_zone is not None:
        raise ConfigError(
            f"The {table} files {path} hold nanosecond times, and whether they carry a time zone "
            "cannot be told for a remote path, so --time-zone cannot be applied: write the times "
            "with a time zone (pandas: df['time'].dt.tz_localize(ZONE)) or load a local copy.")
    set_nanos_as_long(spark, "true", where=f"The {table} file(s) {path}")
    df = spark.read.parquet(*paths)
    source = renamed.get("time", "time")
    longs = {f.name for f in df.schema.fields if f.dataType.simpleString() == "bigint"}
    return df, ParquetTimes(nanos=frozenset({source} & longs))


def read_bronze_file(spark: SparkSession, path: str, table: str, *,
                     fmt: FileFormat = "auto", columns: Mapping[str, str] | None = None,
                     time_zone: str | None = None) -> DataFrame:
    """The rows of ``path`` (a file, a folder of files or a glob) as a DataFrame, as delivered.

    CSV: header row, RFC 4180 quoting, every column text; with ``time_zone``, ``time`` texts
    without a UTC offset become their UTC instant. Parquet: its own types, every timestamp a UTC
    instant (nanoseconds floored to the microsecond, naive ones read in ``time_zone``, UTC when
    None). ``columns`` (one table's entry of :func:`parse_column_map`) renames those columns;
    every other column keeps its name and values. Nanosecond times set :data:`NANOS_AS_LONG` on
    the session, which must hold while the rows are read.

    Raises:
        ConfigError: nothing matches ``path``, its format is unknown, or ``time_zone`` is.
        SchemaError: a contract (or mapped) column is missing or has an impossible type.
    """
    from pyspark.sql import functions as F

    from gpope.shell.pipeline.ingest_contract import conform_bronze

    check_time_zone(time_zone)
    path = _resolve(path, table)  # a local path: where the user's working directory is
    kind = _format_of(path, fmt)
    paths = _spark_paths(path)
    renamed = dict(columns or {})
    if kind == "csv":
        df = (spark.read.option("header", True).option("inferSchema", False)
              .option("quote", '"').option("escape", '"').option("multiLine", True)
              .csv(paths))  # fmt: skip
        times = ParquetTimes()
    else:
        df, times = _read_parquet(spark, path, paths, table, renamed, time_zone)
    if renamed:
        _check_sources(table, path, df.columns, renamed)
    names = {s: c for c, s in renamed.items()}
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    time_source = renamed.get("time", "time")
    selected = []
    for c in df.columns:
        col = F.col(f"`{c}`")
        nanos = c in times.nanos and types[c] == "bigint"
        if nanos or types[c] in ("timestamp", "timestamp_ntz"):
            naive = c in times.naive or types[c] == "timestamp_ntz"
            col = times_as_instants(c, nanos=nanos, naive=naive, zone=time_zone)
        elif kind == "csv" and c == time_source and time_zone is not None:
            col = localize_text(col, time_zone)
        selected.append(col.alias(names.get(c, c)))
    df = df.select(*selected)
    conform_bronze(df, table, path)  # contract checked now: one clear line, nothing written
    return df


def run_load(
    spark: SparkSession,
    config: GpopeConfig,
    dataset: str,
    files: dict[str, str],
    *,
    fmt: FileFormat = "auto",
    columns: ColumnsLike = None,
    time_zone: str | None = None,
) -> LoadReport:
    """Replace ``dataset``'s bronze tables with the rows of ``files`` (one path per bronze
    table), atomically; errors as :func:`check_files` (nothing is written)."""
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import PipelineRuns, new_run_id

    paths = check_files(files, fmt=fmt, columns=columns, time_zone=time_zone)
    renames = parse_column_map(columns)
    refs = {t: TableRef("bronze", t, dataset) for t in BRONZE_TABLES}  # names checked
    target = Lake.from_settings(spark, config.lake)
    previous = spark.conf.get(NANOS_AS_LONG, None)
    run_id = new_run_id()
    versions, rows, filled = {}, {}, {}
    try:
        frames = {t: read_bronze_file(spark, paths[t], t, fmt=fmt, columns=renames.get(t),
                                      time_zone=time_zone) for t in BRONZE_TABLES}
        for t in BRONZE_TABLES:  # tagged commits: invisible until the manifest below
            # optional contract columns the file lacks: the table's schema records them missing
            lacked = tuple(c for c in OPTIONAL_COLUMNS.get(t, ()) if c not in frames[t].columns)
            if lacked:
                filled[t] = lacked
            df = frames[t].cache()
            try:
                rows[t] = df.count()
                versions[refs[t]] = target.write(df, refs[t], mode="overwrite", schema=df.schema,
                                                 run_id=run_id)  # fmt: skip
            finally:
                df.unpersist()
    finally:
        set_nanos_as_long(spark, previous)
    PipelineRuns(config.lake, spark=spark).commit(
        run_id=run_id, stage="load", dataset=dataset, tables=versions,
        details={"files": dict(files), "rows": rows, "columns": renames,
                 "time_zone": time_zone, "filled": {t: list(c) for t, c in filled.items()}},
    )  # fmt: skip
    return LoadReport(dataset=dataset, files={t: files[t] for t in BRONZE_TABLES}, rows=rows,
                      versions={t: versions[refs[t]] for t in BRONZE_TABLES}, columns=renames,
                      time_zone=time_zone, filled=filled)

"""Load existing files (Parquet or CSV) into a dataset's bronze tables: the own-data entry point.

:func:`run_load` reads one file (or folder, or glob) per bronze table, checks each against the
bronze contract (:func:`~gpope.shell.pipeline.ingest_contract.conform_bronze`: a missing column
or an impossible type stops the load with one line naming table, column and types) and replaces
``<lake>/bronze/<dataset>/{observations,treatments,outcomes}`` with the rows as delivered: the
three commits become visible together in one ``pipeline_runs`` manifest (stage ``load``), so a
load killed half-way leaves the previous tables. Rows are not parsed or filtered here: ``gpope
ingest`` parses string columns row by row and quarantines what it cannot use, with a reason, so
rows in = rows used + rows rejected starts from exactly the delivered rows.

Types: CSV columns are read as text (no type inference: a patient id ``007`` stays ``007``);
Parquet keeps its types. A time without a time zone (CSV text without an offset, a Parquet
``timestamp`` not adjusted to UTC) is read as UTC; a time with an offset is converted to UTC.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from gpope.config import GpopeConfig

__all__ = ["BRONZE_TABLES", "FileFormat", "LoadReport", "read_bronze_file", "run_load"]

BRONZE_TABLES: tuple[str, ...] = ("observations", "treatments", "outcomes")
FileFormat = Literal["auto", "parquet", "csv"]


@dataclass(frozen=True)
class LoadReport:
    """What :func:`run_load` wrote.

    Attributes:
        dataset: the dataset name.
        files: the path given per table.
        rows: rows written per bronze table (= rows delivered).
        versions: the Delta version of each bronze table after the load.
    """

    dataset: str
    files: dict[str, str]
    rows: dict[str, int]
    versions: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``gpope load --json``)."""
        return {"dataset": self.dataset, "files": dict(self.files), "rows": dict(self.rows),
                "versions": dict(self.versions)}  # fmt: skip

    def summary(self) -> str:
        """A few human-readable lines ending with the next command."""
        lines = [f"load {self.dataset}: bronze tables replaced (rows as delivered)"]
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


def read_bronze_file(spark: SparkSession, path: str, table: str, *,
                     fmt: FileFormat = "auto") -> DataFrame:
    """The rows of ``path`` (a file, a folder of files or a glob) as a DataFrame, as delivered.

    CSV: header row, every column text. Parquet: its own types, with time-zone-less timestamps
    read as UTC (``timestamp_ntz`` -> ``timestamp`` in the UTC session).

    Raises:
        ConfigError: nothing matches ``path``, or its format cannot be told.
        SchemaError: a bronze contract column is missing or has an impossible type.
    """
    from pyspark.sql import functions as F

    from gpope.shell.pipeline.ingest_contract import conform_bronze

    if "://" not in path:  # a local path: resolved here, where the user's working directory is
        path = os.path.abspath(os.path.expanduser(path))
        if not glob.glob(path):
            raise ConfigError(f"The {table} file {path!r} does not exist (no file matches it).")
    kind = _format_of(path, fmt)
    if kind == "csv":
        df = spark.read.option("header", True).option("inferSchema", False).csv(path)
    else:
        df = spark.read.parquet(path)
    naive = [f.name for f in df.schema.fields if f.dataType.simpleString() == "timestamp_ntz"]
    if naive:
        df = df.select(*[F.col(f"`{c}`").cast("timestamp").alias(c) if c in naive
                         else F.col(f"`{c}`") for c in df.columns])  # fmt: skip
    conform_bronze(df, table, path)  # contract checked now: one clear line, nothing written
    return df


def run_load(
    spark: SparkSession,
    config: GpopeConfig,
    dataset: str,
    files: dict[str, str],
    *,
    fmt: FileFormat = "auto",
) -> LoadReport:
    """Replace ``dataset``'s bronze tables with the rows of ``files``, atomically.

    Args:
        spark: the session.
        config: configuration (lake location).
        dataset: the dataset name (``<lake>/bronze/<dataset>/<table>``).
        files: ``{"observations": path, "treatments": path, "outcomes": path}``.
        fmt: ``auto`` (from the file names), ``parquet`` or ``csv``.

    Returns:
        A :class:`LoadReport` with the rows written per table.

    Raises:
        ConfigError: a table's file is missing from ``files`` or does not exist.
        SchemaError: a file breaks the bronze contract (nothing is written).
    """
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import PipelineRuns, new_run_id

    missing = [t for t in BRONZE_TABLES if not files.get(t)]
    if missing:
        raise ConfigError(f"gpope load needs one file per bronze table; missing: {missing}.")
    refs = {t: TableRef("bronze", t, dataset) for t in BRONZE_TABLES}  # names checked
    target = Lake.from_settings(spark, config.lake)
    frames = {t: read_bronze_file(spark, files[t], t, fmt=fmt) for t in BRONZE_TABLES}
    run_id = new_run_id()
    versions, rows = {}, {}
    for t in BRONZE_TABLES:  # tagged commits: invisible until the manifest below
        df = frames[t].cache()
        try:
            rows[t] = df.count()
            versions[refs[t]] = target.write(df, refs[t], mode="overwrite", schema=df.schema,
                                             run_id=run_id)  # fmt: skip
        finally:
            df.unpersist()
    PipelineRuns(config.lake, spark=spark).commit(
        run_id=run_id, stage="load", dataset=dataset, tables=versions,
        details={"files": dict(files), "rows": rows},
    )  # fmt: skip
    return LoadReport(dataset=dataset, files={t: files[t] for t in BRONZE_TABLES}, rows=rows,
                      versions={t: versions[refs[t]] for t in BRONZE_TABLES})

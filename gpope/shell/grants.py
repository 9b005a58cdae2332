"""Unity Catalog grants: the analysts' group reads the released tables and nothing else.

The catalog's form of ``gpope query``'s operator switch: ``USE SCHEMA`` on the gpope schema and
``SELECT`` on :data:`ANALYST_TABLES`, never on the raw, silver or per-patient tables. The bundle
runs :func:`run_grants` as the ``gpope_grants`` job and after the scheduled pipelines.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpope.errors import ConfigError
from gpope.shell.lake.names import TableRef, check_name, uc_table_name
from gpope.shell.query_sandbox import RELEASE_TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig

__all__ = ["ANALYST_TABLES", "check_grants", "grant_statements", "run_grants"]

ANALYST_TABLES: tuple[str, ...] = tuple(sorted(RELEASE_TABLES))
"""The shared gold tables an analysts' group may read: the tables ``gpope query`` serves without
its operator switch (differentially private releases and the ledger's accounting; no patient's
row, no noise-free statistic)."""

_PRINCIPAL = re.compile(r"[^`\x00-\x1f]{1,255}")


def grant_statements(catalog: str, schema: str, group: str) -> list[str]:
    """The SQL that gives ``group`` read access to the release tables of ``catalog.schema``.

    Guarantees: one ``GRANT USE SCHEMA`` on the schema, then one ``GRANT SELECT`` per table of
    :data:`ANALYST_TABLES`; no other table, and no privilege beyond reading, is granted.

    Raises:
        ConfigError: an invalid catalog or schema name, or a group name holding a backtick or a
            control character.
    """
    check_name("catalog", catalog)
    check_name("schema", schema)
    if not _PRINCIPAL.fullmatch(group):
        raise ConfigError(
            f"The analysts' group must be 1 to 255 characters without backticks or control "
            f"characters. Got {group!r}."
        )
    principal = f"`{group}`"
    return [f"GRANT USE SCHEMA ON SCHEMA `{catalog}`.`{schema}` TO {principal}"] + [
        f"GRANT SELECT ON TABLE {uc_table_name(catalog, schema, TableRef.shared(t), quoted=True)}"
        f" TO {principal}"
        for t in ANALYST_TABLES
    ]


def check_grants(config: GpopeConfig, group: str) -> list[str]:
    """The grant statements for ``config``'s Unity Catalog lake (checked without Spark).

    Raises:
        ConfigError: the lake is path-based (grants are Unity Catalog's; a local lake is
            protected by ``gpope query``'s operator switch and the file system's permissions),
            or a name is invalid (see :func:`grant_statements`).
    """
    catalog, schema = config.lake.catalog, config.lake.schema
    if catalog is None or schema is None:
        raise ConfigError(
            "Grants apply to a Unity Catalog lake (--catalog and --schema). On a path-based lake "
            "analysts use `gpope query`, which serves only the released views without --operator; "
            "protect the lake directory with the file system's permissions."
        )
    return grant_statements(catalog, schema, group)


def run_grants(spark: SparkSession, config: GpopeConfig, group: str) -> str:
    """Run :func:`check_grants`' statements for the release tables that exist; returns a summary.

    Raises:
        ConfigError: as :func:`check_grants`.
    """
    statements = check_grants(config, group)
    where = f"{config.lake.catalog}.{config.lake.schema}"
    spark.sql(statements[0])
    granted, missing = [], []
    for table, sql in zip(ANALYST_TABLES, statements[1:], strict=True):
        if spark.catalog.tableExists(f"{where}.{table}"):
            spark.sql(sql)
            granted.append(table)
        else:
            missing.append(table)
    line = (f"granted {group!r} USE SCHEMA on {where} and SELECT on "
            f"{', '.join(granted) or 'no table'}")
    if missing:
        line += f"; not created yet (the next run grants them): {', '.join(missing)}"
    return line

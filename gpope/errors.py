"""The one exception tree of gpope.

Every error a user can trigger derives from :class:`GpopeError`, so callers (the CLI, jobs,
notebooks) can catch one type and print its message. Messages say what was wrong, which
constraint applies, what was given, and what to do.
"""

from __future__ import annotations

__all__ = ["AccountingError", "AuditError", "BudgetExceededError", "CommitError", "ConfigError",
           "CorruptTableError", "DataError", "EnvironmentSetupError", "GpopeError", "QueryError",
           "SchemaError", "StaleStatisticsError", "TableNotFoundError"]


class GpopeError(Exception):
    """Root of every error raised on purpose by gpope."""


class ConfigError(GpopeError, ValueError):
    """A configuration value or argument is missing, of the wrong type or out of range."""


class SchemaError(GpopeError):
    """A table or array does not have the columns, types or shapes of its contract."""


class DataError(GpopeError, ValueError):
    """Input data violate an assumption (non-finite values, empty trajectories, ...)."""


class StaleStatisticsError(DataError):
    """A spec's trajectory_stats were computed from older silver data than the latest ingest."""


class AccountingError(GpopeError):
    """A privacy-accounting request cannot be answered (unsupported combination, no solution)."""


class BudgetExceededError(GpopeError):
    """A run would take a dataset past its privacy budget; nothing was released."""


class TableNotFoundError(GpopeError):
    """A Delta table that should exist does not; usually an earlier stage has not run."""


class CommitError(GpopeError):
    """A write to a Delta table could not be committed atomically."""


class CorruptTableError(GpopeError):
    """A Delta table's log is damaged (e.g. a truncated commit file); the message names the table."""


class QueryError(GpopeError, ValueError):
    """An analyst's SQL query over the lake's views cannot be run (syntax, unknown view...)."""


class EnvironmentSetupError(GpopeError):
    """The runtime (Java, Spark) could not be set up; the message says how to fix it."""


class AuditError(GpopeError):
    """A privacy audit could not test what it claims to test (e.g. its release path diverged)."""

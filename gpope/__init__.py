"""gpope: differentially private off-policy evaluation (GPOPE) as a data-platform product.

The pure numerical core lives in :mod:`gpope.core` (numpy, scipy, dp-accounting only); the Spark,
Delta and MLflow shell in :mod:`gpope.shell`. See README.md and docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from gpope.errors import (
    AccountingError,
    BudgetExceededError,
    CommitError,
    ConfigError,
    DataError,
    EnvironmentSetupError,
    GpopeError,
    SchemaError,
    TableNotFoundError,
)

__version__ = "0.1.0"

__all__ = [
    "AccountingError",
    "BudgetExceededError",
    "CommitError",
    "ConfigError",
    "DataError",
    "EnvironmentSetupError",
    "GpopeError",
    "SchemaError",
    "TableNotFoundError",
    "__version__",
]

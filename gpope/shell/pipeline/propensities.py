"""Which route a dataset's evaluation takes when its extract logged no behaviour probabilities.

The rule is public: the bronze ``treatments`` table has a ``propensity`` column or not (its
schema). Logged: the value route, as always. Not logged: ``gpope stats`` stores the state-action
statistics (:func:`gpope.core.state_action.state_action_spec`) and ``gpope evaluate`` evaluates
that spec (on a tabular map the tuning-free default first releases the behaviour policy,
:mod:`gpope.core.behaviour_estimate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = ["logged_propensities", "statistics_spec"]


def logged_propensities(spark: SparkSession, config: GpopeConfig, dataset: str) -> bool:
    """Whether the dataset's bronze treatments table has a ``propensity`` column (its schema
    only; a dataset without bronze tables, e.g. removed after ingest, counts as logged)."""
    from gpope.errors import TableNotFoundError
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import read_pinned
    from gpope.shell.pipeline.ingest_contract import propensities_logged

    try:
        raw, _ = read_pinned(Lake.from_settings(spark, config.lake),
                             TableRef("bronze", "treatments", dataset))
    except TableNotFoundError:
        return True
    return propensities_logged(raw.columns)


def statistics_spec(spark: SparkSession, config: GpopeConfig, dataset: str,
                    spec: EvaluationSpec) -> EvaluationSpec:
    """The spec whose statistics the dataset has: ``spec`` when propensities are logged, its
    state-action spec when not."""
    from gpope.core.state_action import state_action_spec

    return spec if logged_propensities(spark, config, dataset) else state_action_spec(spec)

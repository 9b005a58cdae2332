"""The released number of patients m~ of a dataset's statistics version: released once, reused.

:func:`public_count` returns the m~ of (dataset, statistics version) from ``released_counts``; when
there is none it releases one (:func:`gpope.core.mechanisms.count.release_count`) through the
privacy ledger like a run (reserved under add/remove-one adjacency against the dataset's budget,
appended, marked ``released``). Later runs on the same version read it back as post-processing:
no further charge. A count drawn from a fixed seed is NOT private and never reused by a private
run. Two runs racing on a version may both release one (both charged); readers take the first
committed private row.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpope.core.mechanisms.count import NoisyCount

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig

__all__ = ["COUNT_LABEL", "TABLE", "public_count", "read_count", "read_counts"]

TABLE = "released_counts"
#: The ledger label of a count's reservation.
COUNT_LABEL = "released number of patients m~ (discrete Gaussian, add/remove sensitivity 1)"


def _table(config: GpopeConfig, spark: SparkSession | None) -> tuple[Any, str]:
    """(the table store, the table's location): delta-rs on a local lake, else Spark's layer."""
    from gpope.shell.lake.local import local_store
    from gpope.shell.lake.names import TableRef, table_path

    local = local_store(config.lake)
    if local is not None:
        return local, table_path(config.lake.root, TableRef.shared(TABLE))
    from gpope.shell.lake.layer import Lake

    if spark is None:
        from gpope.shell.spark import get_spark

        spark = get_spark(config.spark)
    lake = Lake.from_settings(spark, config.lake)
    return lake.store, lake.location(TableRef.shared(TABLE))


def read_counts(config: GpopeConfig, *, dataset: str,
                spark: SparkSession | None = None) -> list[dict[str, Any]]:
    """Every released count of ``dataset`` (released numbers: public), oldest first: the
    ``released_counts`` rows without the dataset column."""
    tables, location = _table(config, spark)
    if not tables.exists(location):
        return []
    rows = [{k: v for k, v in r.items() if k != "dataset"}
            for r in tables.read_arrow(location).to_pylist() if r["dataset"] == dataset]
    return sorted(rows, key=lambda r: (r["created_at"], r["run_id"]))


def read_count(config: GpopeConfig, *, dataset: str, stats_version: int,
               spark: SparkSession | None = None) -> NoisyCount | None:
    """The first committed private count of (``dataset``, ``stats_version``), or None."""
    rows = [r for r in read_counts(config, dataset=dataset, spark=spark)
            if int(r["stats_version"]) == int(stats_version) and r["private"]]
    if not rows:
        return None
    first = rows[0]
    return NoisyCount(m_noisy=int(first["m_noisy"]), sigma=float(first["noise_std"]),
                      epsilon=float(first["epsilon"]), delta=float(first["delta"]))


def public_count(config: GpopeConfig, *, dataset: str, stats_version: int, m: int,
                 seed: int | None = None, spark: SparkSession | None = None) -> NoisyCount:
    """The m~ of (``dataset``, ``stats_version``): the stored one, else a new release charged
    to the dataset's budget (module docstring). ``m`` is the exact count (private: it is read
    only when a count is released).

    Raises:
        BudgetExceededError: the dataset's budget cannot pay for the count (nothing written).
        CommitError: the table or the ledger could not be written (the reservation is marked
            failed and stays counted).
    """
    import numpy as np

    from gpope.core.accounting.composition import mechanism_to_json
    from gpope.core.mechanisms.count import count_event, count_sigma, release_count
    from gpope.shell.pipeline.ledger import Charge, PrivacyLedger
    from gpope.shell.schemas import TABLE_SCHEMAS

    found = read_count(config, dataset=dataset, stats_version=stats_version, spark=spark)
    if found is not None:
        return found
    p = config.privacy
    sigma = count_sigma(p.count_epsilon, p.count_delta)
    ledger = PrivacyLedger(spark, config)
    run_id = uuid.uuid4().hex
    # charged under add/remove-one; replacing a patient leaves m as it is, so the same charge
    # bounds it under replace-one too and it composes with the dataset's runs of either relation
    mechanism = mechanism_to_json(count_event(sigma), "add_or_remove_one",
                                  f"{COUNT_LABEL} of statistics version {stats_version}",
                                  every_relation=True)
    ledger.reserve(Charge(dataset=dataset, run_id=run_id, epsilon=p.count_epsilon,
                          delta=p.count_delta, accountant="rdp", mechanism=mechanism,
                          note=None if seed is None else "drawn from a fixed seed: NOT private"))
    try:
        count = release_count(m, epsilon=p.count_epsilon, delta=p.count_delta,
                              rng=None if seed is None else np.random.default_rng(seed))
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        row = {"dataset": dataset, "stats_version": int(stats_version),
               "m_noisy": count.m_noisy, "noise_std": count.sigma, "epsilon": count.epsilon,
               "delta": count.delta, "private": count.private, "run_id": run_id,
               "created_at": datetime.now(UTC)}
        schema = to_arrow_schema(TABLE_SCHEMAS[TABLE])
        tables, location = _table(config, spark)
        tables.append_arrow(location, pa.Table.from_pylist([row], schema=schema),
                            create_schema=TABLE_SCHEMAS[TABLE],
                            description="released numbers of patients m~ (gpope)",
                            table_name="the released counts")
    except BaseException:
        ledger.mark(dataset, run_id, "failed")
        raise
    ledger.mark(dataset, run_id, "released")
    return count

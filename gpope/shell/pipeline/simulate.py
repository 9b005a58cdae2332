"""Stage 1 of the pipeline: a synthetic cohort from a simulator, written as bronze event tables.

:func:`run_simulate` generates ``patients`` episodes of a registered domain
(:mod:`gpope.core.envs.registry`) under its behaviour policy, records them as EHR-style event
tables (:func:`gpope.core.envs.ehr.episodes_to_event_tables`) and replaces the dataset's bronze
``observations``, ``treatments`` and ``outcomes``, made visible together by one manifest commit.
The cohort is generated and staged part by part (:data:`PATIENTS_PER_PART` patients), so the
driver's memory stays bounded whatever the cohort size.

Randomness: one ``SeedSequence(seed)`` (OS entropy when ``seed`` is None) spawns one stream for
the episodes and one for the recording, so the episodes of a seed do not depend on the recording
options.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.config import DatasetSettings, GpopeConfig
from gpope.core.envs.cohort import (
    behaviour_policy,
    check_domain,
    generate_episodes,
)
from gpope.core.envs.registry import domain_names, get_domain
from gpope.core.validation import check_int, check_number

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa
    from pyspark.sql import SparkSession

    from gpope.core.policies import Policy
    from gpope.core.trajectories.transitions import Transitions

__all__ = ["DOMAINS", "SimulateOptions", "SimulateReport", "dataset_settings_for_domain",
           "iter_simulated_tables", "run_simulate", "tables_to_arrow"]

DOMAINS: tuple[str, ...] = domain_names()
BRONZE_TABLES: tuple[str, ...] = ("observations", "treatments", "outcomes")


@dataclass(frozen=True)
class SimulateOptions:
    """How a cohort is simulated and recorded (all public).

    Attributes:
        n_steps: episode cap (decisions per patient at most); None: the domain's default
            (chain 1000, mountain car 200, HIV 200).
        jitter: timing jitter as a fraction of the decision interval, in [0, 0.5).
        stagger_days: patient start offsets ~ U[0, stagger_days), >= 0.
        missing_prob: probability of dropping each observation row, in [0, 1).
        noise: standard deviation of Gaussian noise added to recorded observations, >= 0.
        start_time: first decision time (ISO timestamp, UTC).
        batch_size: patients simulated per batch (the progress bar advances per batch), >= 1.
    """

    n_steps: int | None = None
    jitter: float = 0.0
    stagger_days: float = 0.0
    missing_prob: float = 0.0
    noise: float = 0.0
    start_time: str = "2024-01-01T00:00:00"
    batch_size: int = 1000

    def __post_init__(self) -> None:
        owner = "SimulateOptions"
        check_int(owner, "n_steps", self.n_steps, ge=1, allow_none=True)
        check_number(owner, "jitter", self.jitter, ge=0.0, lt=0.5)
        check_number(owner, "stagger_days", self.stagger_days, ge=0.0)
        check_number(owner, "missing_prob", self.missing_prob, ge=0.0, lt=1.0)
        check_number(owner, "noise", self.noise, ge=0.0)
        check_int(owner, "batch_size", self.batch_size, ge=1)


@dataclass(frozen=True)
class SimulateReport:
    """What :func:`run_simulate` wrote.

    Attributes:
        dataset, domain, patients, seed: the request (seed None: OS entropy, not reproducible).
        rows: bronze rows written per table.
        n_transitions: decision steps simulated (= treatment rows).
        options: the recording options used.
    """

    dataset: str
    domain: str
    patients: int
    seed: int | None
    rows: dict[str, int]
    n_transitions: int
    options: SimulateOptions

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        rows = ", ".join(f"{t} {n}" for t, n in self.rows.items())
        return (
            f"simulate {self.dataset}: {self.patients} {self.domain} patients, "
            f"{self.n_transitions} decisions; bronze rows: {rows}"
        )


def dataset_settings_for_domain(domain: str, *, max_length: int | None = None) -> DatasetSettings:
    """Ingest settings that read a cohort of ``domain`` written by :func:`run_simulate`: the
    domain's variables in state order (ingested states equal the simulator's), its actions, its
    terminal variable, no defaults, and ``max_length`` (default: the episode cap, so no simulated
    episode is cut).

    Raises:
        ConfigError: unknown domain.
    """
    domain = check_domain(domain)
    spec = get_domain(domain).event_spec
    return DatasetSettings(
        variables=spec.variables,
        actions=spec.actions,
        max_length=max_length if max_length is not None else get_domain(domain).max_steps,
        terminal_variable=spec.terminal_variable,
        domain=domain,
    )


#: Patients converted to event tables and staged together (whole generator batches, at least
#: one): bounds the driver's memory whatever the cohort size; the output does not depend on it.
PATIENTS_PER_PART = 20_000


def iter_simulated_tables(
    domain: str,
    patients: int,
    seed: int | None,
    options: SimulateOptions | None = None,
    *,
    policy: Policy | None = None,
    progress: bool = False,
) -> Iterator[tuple[Transitions, dict[str, dict[str, np.ndarray]]]]:
    """The cohort part by part: ``(episodes, bronze event tables)`` of consecutive patients.

    Part i holds the patients after those of parts 0..i-1 (patient ``P{j:06d}`` is the j-th
    episode of the cohort); the episodes come from one stream, the recording (jitter, missingness,
    noise) from another, both drawn part after part, so the cohort depends only on the seed and
    ``options.batch_size``.
    """
    from tqdm.auto import tqdm

    from gpope.core.envs import ehr

    domain = check_domain(domain)
    m = check_int("simulate", "patients", patients, ge=1)
    options = options or SimulateOptions()
    if policy is None:
        policy = behaviour_policy(domain)
    episode_seq, record_seq = np.random.SeedSequence(seed).spawn(2)
    episode_rng, record_rng = np.random.default_rng(episode_seq), np.random.default_rng(record_seq)
    spec = get_domain(domain).event_spec
    part = options.batch_size * max(1, PATIENTS_PER_PART // options.batch_size)
    with tqdm(total=m, desc=f"simulate {domain}", unit="patient", disable=not progress) as bar:
        for first in range(0, m, part):
            n = min(part, m - first)
            transitions = generate_episodes(
                domain, n, episode_rng, policy=policy, n_steps=options.n_steps,
                batch_size=options.batch_size,
            )  # fmt: skip
            tables = ehr.episodes_to_event_tables(
                transitions,
                spec,
                record_rng,
                start_time=options.start_time,
                jitter=options.jitter,
                stagger_days=options.stagger_days,
                missing_prob=options.missing_prob,
                noise=options.noise,
                first_patient=first,
            )
            bar.update(n)
            yield transitions, tables


def tables_to_arrow(tables: dict[str, dict[str, np.ndarray]]) -> dict[str, pa.Table]:
    """Columnar bronze tables (numpy) as Arrow tables with the bronze contracts' columns.

    ``time`` (``datetime64[us]``, UTC wall clock) becomes ``timestamp[us, UTC]``.
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from gpope.shell.schemas import TABLE_SCHEMAS

    out = {}
    for name, columns in tables.items():
        schema = to_arrow_schema(TABLE_SCHEMAS[name])
        out[name] = pa.Table.from_arrays(
            [pa.array(columns[f.name]).cast(f.type) for f in schema], schema=schema
        )
    return out


def write_simulation_record(
    spark: SparkSession, config: GpopeConfig, dataset: str, *, domain: str, patients: int,
    max_length: int, run_id: str | None = None,
) -> int:
    """Replace ``bronze/<dataset>/simulation`` with one row: domain, patients, episode cap
    (``gpope ingest`` without ``--domain`` reads it); never the seed."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from gpope.shell import lake

    row = {"domain": [domain], "patients": [int(patients)], "max_length": [int(max_length)],
           "created_at": [datetime.now(UTC)]}  # fmt: skip
    target = lake.Lake.from_settings(spark, config.lake)
    writer = target.arrow_writer(lake.TableRef("bronze", "simulation", dataset), mode="overwrite",
                                 run_id=run_id)  # tagged: part of the simulate manifest
    with writer:
        writer.write(pa.table(row))
        return writer.commit()


def read_simulation_record(config: GpopeConfig, dataset: str) -> dict[str, object] | None:
    """The simulation row of ``dataset`` (domain, patients, max_length), or None when the dataset
    was not written by ``gpope simulate`` (or the lake is not a local path: read without Spark)."""
    from gpope.shell.lake.manifest import read_pinned_arrow
    from gpope.shell.lake.names import TableRef, local_root

    if config.lake.catalog is not None or local_root(str(config.lake.root)) is None:
        return None
    # the last complete simulate run's record, never a half-written one
    table = read_pinned_arrow(config.lake, TableRef("bronze", "simulation", dataset))
    rows = table.to_pylist() if table is not None else []
    return rows[-1] if rows else None


def run_simulate(
    spark: SparkSession,
    config: GpopeConfig,
    dataset: str,
    *,
    domain: str,
    patients: int,
    seed: int | None = None,
    options: SimulateOptions | None = None,
    policy: Policy | None = None,
    progress: bool = False,
) -> SimulateReport:
    """Simulate a cohort and replace ``dataset``'s bronze tables with it, atomically.

    The three tables become visible together, in one ``pipeline_runs`` manifest commit: a run
    killed between them leaves the previous cohort. The dataset name and the lake are checked
    before anything is simulated; ``seed`` None draws from OS entropy; ``policy`` overrides the
    domain's behaviour policy.

    Raises:
        ConfigError: bad domain, patients or options.
        CommitError: a table could not be written (nothing half-written stays visible).
    """
    from gpope.shell import faults
    from gpope.shell.lake import Lake, TableRef
    from gpope.shell.lake.manifest import PipelineRuns, new_run_id

    domain = check_domain(domain)
    options = options or SimulateOptions()
    refs = {name: TableRef("bronze", name, dataset) for name in BRONZE_TABLES}  # names checked
    target = Lake.from_settings(spark, config.lake)  # lake path checked before simulating
    check_int("simulate", "patients", patients, ge=1)
    run_id = new_run_id()
    # each commit is tagged: invisible until the manifest below
    writers = {
        name: target.arrow_writer(refs[name], mode="overwrite", run_id=run_id)
        for name in BRONZE_TABLES
    }
    n_transitions = 0
    versions = {}
    try:
        for transitions, tables in iter_simulated_tables(
            domain, patients, seed, options, policy=policy, progress=progress
        ):
            n_transitions += transitions.n_transitions
            for name, table in tables_to_arrow(tables).items():
                writers[name].write(table)
        for name in BRONZE_TABLES:
            versions[refs[name]] = writers[name].commit()
            faults.point(f"simulate:{name}")
    except BaseException:
        for writer in writers.values():
            if writer.version is None:
                writer.abort()
        raise
    record = TableRef("bronze", "simulation", dataset)
    versions[record] = write_simulation_record(
        spark, config, dataset, domain=domain, patients=patients,
        max_length=options.n_steps or get_domain(domain).max_steps, run_id=run_id,
    )  # fmt: skip
    rows = {name: writers[name].rows for name in BRONZE_TABLES}
    PipelineRuns(config.lake, spark=spark).commit(
        run_id=run_id, stage="simulate", dataset=dataset, tables=versions,
        details={"domain": domain, "patients": patients, "rows": rows},
    )  # fmt: skip
    from gpope.shell.pipeline.ledger import PrivacyLedger

    PrivacyLedger(spark, config).record_origin(dataset, "simulate")  # synthetic: seeds allowed
    return SimulateReport(dataset=dataset, domain=domain, patients=patients, seed=seed, rows=rows,
                          n_transitions=n_transitions, options=options)

"""The Python API of the gpope pipeline, for notebooks, jobs and the CLI.

Every stage function takes a :class:`~pyspark.sql.SparkSession` (``spark`` in a notebook;
:func:`get_spark` locally) and returns a frozen report with ``summary()`` and ``to_dict()``; the
``check_*`` functions, :func:`privacy_ledger`, :func:`maintain` and :func:`track` need no session
on a local lake. The CLI and the ``jobs/`` entry points call these same functions.

A notebook session on Databricks (tables in Unity Catalog ``<catalog>.<schema>``)::

    from gpope import api

    config = api.load_config(catalog="main", schema="gpope")
    api.simulate(spark, "cohort1", domain="hiv", patients=2000, config=config)   # or your tables
    print(api.ingest(spark, "cohort1", domain="hiv", config=config).summary())
    api.stats(spark, "cohort1", "conf/specs/hiv_demo.yaml", config=config)
    api.set_budget(spark, "cohort1", epsilon=3.0, delta=1e-5, config=config)
    report = api.evaluate(spark, "cohort1", "conf/specs/hiv_demo.yaml",
                          epsilon=1.0, delta=1e-5, config=config)
    report.reference_values  # released value estimates at the spec's reference states

``config`` is a :class:`~gpope.config.GpopeConfig`, a path to a YAML configuration, or None (the
packaged defaults: a lake under ``./lake``). ``spec`` is an
:class:`~gpope.core.spec.EvaluationSpec` or a path to a spec YAML file. Errors are
:class:`~gpope.errors.GpopeError` subclasses whose message says what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpope.config import GpopeConfig
from gpope.core.spec import EvaluationSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.core.audit.gpope import AuditResult
    from gpope.core.evaluation.settings import SettingsLayer
    from gpope.shell.compare import RunComparison
    from gpope.shell.evaluate.report import EvaluationReport
    from gpope.shell.experiments import make_settings as experiment_settings
    from gpope.shell.experiments import run_experiment as experiment
    from gpope.shell.experiments import run_tuning as tune_experiment
    from gpope.shell.interrupts import command_stopped, start_command
    from gpope.shell.lake.maintain import MaintenanceReport
    from gpope.shell.pipeline.after_release import show_release
    from gpope.shell.pipeline.demo import DemoOptions, DemoReport
    from gpope.shell.pipeline.ingest import IngestReport
    from gpope.shell.pipeline.ledger import BudgetStatus, PrivacyLedger
    from gpope.shell.pipeline.load import BRONZE_COLUMNS
    from gpope.shell.pipeline.simulate import SimulateOptions, SimulateReport
    from gpope.shell.pipeline.simulate_files import write_cohort_files
    from gpope.shell.pipeline.stats import StatsReport
    from gpope.shell.pipeline.track import TrackReport
    from gpope.shell.pipeline.tune_spec import tune_spec
    from gpope.shell.query import LakeViews, QueryResult

__all__ = ["BRONZE_COLUMNS", "DemoOptions", "SimulateOptions", "bronze_tables", "budget_status",
           "check_demo", "check_evaluation", "check_load", "check_stage", "command_stopped",
           "compare_runs", "demo", "describe_view", "evaluate", "evaluate_options", "experiment",
           "experiment_settings", "get_spark", "ingest", "lake_views", "load", "load_config",
           "load_spec", "maintain", "pipeline_audit", "privacy_ledger", "query", "released_counts",
           "set_budget", "show_release", "simulate", "start_command", "stats", "track",
           "tune_experiment", "tune_spec", "write_cohort_files"]

#: Names re-exported from the shell as they are (``module`` or ``module:attribute``), imported
#: when first used so that ``import gpope.api`` loads no Spark and no pipeline module.
_REEXPORTS = {
    "BRONZE_COLUMNS": "gpope.shell.pipeline.load",
    "DemoOptions": "gpope.shell.pipeline.demo",
    "SimulateOptions": "gpope.shell.pipeline.simulate",
    "command_stopped": "gpope.shell.interrupts",
    "experiment": "gpope.shell.experiments:run_experiment",
    "experiment_settings": "gpope.shell.experiments:make_settings",
    "show_release": "gpope.shell.pipeline.after_release",
    "start_command": "gpope.shell.interrupts",
    "tune_experiment": "gpope.shell.experiments:run_tuning",
    "tune_spec": "gpope.shell.pipeline.tune_spec",
    "write_cohort_files": "gpope.shell.pipeline.simulate_files",
}


def __getattr__(name: str) -> Any:
    if name in _REEXPORTS:
        import importlib

        module, _, attribute = _REEXPORTS[name].partition(":")
        return getattr(importlib.import_module(module), attribute or name)
    raise AttributeError(f"module 'gpope.api' has no attribute {name!r}")

ConfigLike = GpopeConfig | str | Path | None
SpecLike = EvaluationSpec | str | Path


def load_config(
    path: str | Path | None = None,
    *,
    lake: str | None = None,
    catalog: str | None = None,
    schema: str | None = None,
    remote: str | None = None,
) -> GpopeConfig:
    """The configuration: ``path`` (YAML; relative paths are also looked up in the
    bundle/repository root; None: packaged defaults) with the overrides: ``lake`` root, or Unity
    Catalog ``catalog``/``schema``, ``remote`` a Spark Connect URL for :func:`get_spark`.

    Raises:
        ConfigError: the file is missing or a value is invalid.
    """
    from gpope.config import load_config as _load
    from gpope.shell.pipeline.jobargs import resolve_path

    return _load(
        resolve_path(path) if path is not None else None,
        lake={"root": lake, "catalog": catalog, "schema": schema},
        spark={"remote": remote},
    )


def _config(config: ConfigLike) -> GpopeConfig:
    return config if isinstance(config, GpopeConfig) else load_config(config)


def load_spec(spec: SpecLike) -> EvaluationSpec:
    """An :class:`EvaluationSpec` from itself or from a spec YAML path."""
    if isinstance(spec, EvaluationSpec):
        return spec
    from gpope.shell.pipeline.jobargs import load_spec as _load_spec

    return _load_spec(spec)


def _spec_text(spec: SpecLike) -> str | None:
    if isinstance(spec, EvaluationSpec):
        return None
    from gpope.shell.pipeline.jobargs import resolve_path

    return resolve_path(spec).read_text()


def get_spark(config: ConfigLike = None, *, remote: str | None = None) -> SparkSession:
    """The active session, else Spark Connect (``remote``/``spark.remote``/``$SPARK_REMOTE``),
    else a local Spark (see :func:`gpope.shell.spark.get_spark`)."""
    from gpope.shell.spark import get_spark as _get_spark

    return _get_spark(_config(config).spark, remote=remote)


def bronze_tables(spark: SparkSession, dataset: str, *, config: ConfigLike = None) -> dict[str, bool]:
    """Which of the dataset's bronze tables (observations, treatments, outcomes) exist."""
    from gpope.shell.lake import Lake, TableRef

    lake = Lake.from_settings(spark, _config(config).lake)
    return {
        table: lake.exists(TableRef("bronze", table, dataset))
        for table in ("observations", "treatments", "outcomes")
    }


def simulate(
    spark: SparkSession,
    dataset: str,
    *,
    domain: str = "hiv",
    patients: int = 2000,
    seed: int | None = None,
    options: SimulateOptions | None = None,
    config: ConfigLike = None,
    progress: bool = False,
) -> SimulateReport:
    """Simulate a cohort of ``domain`` and replace the bronze tables of ``dataset`` with it."""
    from gpope.shell.pipeline.simulate import run_simulate
    from gpope.shell.preflight import check_dataset_unique

    cfg = _config(config)
    check_dataset_unique(cfg, dataset)
    return run_simulate(
        spark, cfg, dataset, domain=domain, patients=patients, seed=seed,
        options=options, progress=progress,
    )


def load(
    spark: SparkSession, dataset: str, files: Mapping[str, str], *, fmt: str = "auto",
    columns: Any = None, config: ConfigLike = None, time_zone: str | None = None,
) -> Any:
    """Your own files (Parquet/CSV) -> the dataset's bronze tables, replaced atomically.

    ``files`` maps ``observations``, ``treatments`` and ``outcomes`` to a file, folder or glob;
    ``columns`` maps your column names to the bronze ones, as ``gpope load --columns`` does
    (``"patient_id=mrn,treatments.time=ordered_at"`` or ``{"patient_id": "mrn", ...}``);
    ``time_zone`` (an IANA name) is the zone of times written without one (UTC when None);
    returns a :class:`~gpope.shell.pipeline.load.LoadReport` (docs/OWN_DATA.md).
    """
    from gpope.shell.pipeline.load import run_load
    from gpope.shell.preflight import check_dataset_unique

    cfg = _config(config)
    check_dataset_unique(cfg, dataset)
    return run_load(spark, cfg, dataset, dict(files), fmt=fmt,  # type: ignore[arg-type]
                    columns=columns, time_zone=time_zone)


def ingest(
    spark: SparkSession, dataset: str, *, domain: str | None = None, config: ConfigLike = None
) -> IngestReport:
    """Bronze -> silver: replace the dataset's ``transitions`` and ``rejected_events``.

    The dataset's variables, actions and max_length come from ``datasets:`` of the configuration,
    or from ``domain`` for a simulated cohort. Counts balance: rows in = used + rejected.
    """
    from gpope.shell.pipeline.ingest import resolve_dataset_settings, run_ingest
    from gpope.shell.preflight import check_dataset_unique

    cfg = _config(config)
    check_dataset_unique(cfg, dataset)
    settings = resolve_dataset_settings(cfg, dataset, domain=domain)
    return run_ingest(spark, cfg, dataset, settings=settings)


def stats(
    spark: SparkSession, dataset: str, spec: SpecLike, *, config: ConfigLike = None
) -> StatsReport:
    """Silver -> gold: replace the spec's partition of the dataset's ``trajectory_stats``."""
    from gpope.shell.pipeline.stats import run_stats

    return run_stats(spark, _config(config), dataset=dataset, spec=load_spec(spec))


def evaluate_options(
    config: ConfigLike = None,
    *,
    epsilon: float,
    delta: float,
    seed: int | None = None,
    solver: Mapping[str, Any] | None = None,
) -> SettingsLayer:
    """The caller's settings of a private run: ``solver`` (names of
    :class:`~gpope.core.evaluation.settings.RunSettings`; None values are not set), then the
    spend and seed, over the spec's ``evaluation:`` block and the configuration's. Each value
    and its combination with the configuration is checked.

    Raises:
        ConfigError: an unknown setting, a value outside its constraint, or an invalid
            combination.
    """
    from gpope.core.evaluation.settings import SettingsLayer, merged_view

    layer = SettingsLayer({**dict(solver or {}), "epsilon": epsilon, "delta": delta,
                           "seed": seed})
    merged_view(_config(config).evaluation, layer)
    return layer


def check_evaluation(spec: SpecLike, options: SettingsLayer, *, dataset: str | None = None,
                     config: ConfigLike = None) -> EvaluationSpec:
    """Check a run before Spark starts (everything that needs no data): its settings against the
    spec and the configuration, and with ``dataset`` the lake's inputs (a valid name, the
    statistics of the spec on a local lake); returns the loaded spec.

    Raises:
        ConfigError: an invalid spec, setting, combination or dataset name.
        TableNotFoundError: an input table is missing (the message names the command).
    """
    from gpope.shell.evaluate.inputs import check_request

    cfg, loaded = _config(config), load_spec(spec)
    check_request(cfg, loaded, options)
    if dataset is not None:
        from gpope.shell.preflight import check_stage

        check_stage(cfg, "evaluate", dataset, loaded)
    return loaded


def evaluate(
    spark: SparkSession,
    dataset: str,
    spec: SpecLike,
    *,
    epsilon: float,
    delta: float,
    seed: int | None = None,
    solver: Mapping[str, Any] | None = None,
    options: SettingsLayer | None = None,
    config: ConfigLike = None,
    tracking_uri: str | None = None,
) -> EvaluationReport:
    """A differentially private evaluation of the spec's target policy on ``dataset``.

    Reserves (epsilon, delta) in the dataset's privacy ledger before anything is drawn, releases
    theta and the values at the spec's reference states to ``released_estimates`` /
    ``released_values``, logs an MLflow run. ``seed`` makes the run reproducible and marks it NOT
    private. ``options`` (from :func:`evaluate_options`) replaces epsilon/delta/seed/solver.

    Raises:
        BudgetExceededError: the run would take the dataset past its budget (nothing written).
    """
    from gpope.errors import StaleStatisticsError
    from gpope.shell.evaluate.run import run_evaluate
    from gpope.shell.pipeline.stats_source import SPEC_PLACEHOLDER

    cfg = _config(config)
    if options is None:
        options = evaluate_options(cfg, epsilon=epsilon, delta=delta, seed=seed, solver=solver)
    try:
        return run_evaluate(
            spark, cfg, dataset=dataset, spec=load_spec(spec), options=options,
            tracking_uri=tracking_uri, spec_text=_spec_text(spec),
        )
    except StaleStatisticsError as exc:  # name the spec file the caller gave
        if isinstance(spec, EvaluationSpec):
            raise
        raise StaleStatisticsError(str(exc).replace(SPEC_PLACEHOLDER, str(spec))) from None


def budget_status(spark: SparkSession, dataset: str, *, config: ConfigLike = None) -> BudgetStatus:
    """The dataset's privacy budget, spent and remaining (from the ledger)."""
    from gpope.shell.pipeline.ledger import PrivacyLedger

    return PrivacyLedger(spark, _config(config)).status(dataset)


def set_budget(
    spark: SparkSession, dataset: str, *, epsilon: float, delta: float, config: ConfigLike = None
) -> BudgetStatus:
    """Set the dataset's total privacy budget (runs are refused past it)."""
    from gpope.shell.pipeline.ledger import PrivacyLedger

    return PrivacyLedger(spark, _config(config)).set_budget(dataset, epsilon=epsilon, delta=delta)


def check_demo(options: DemoOptions, *, config: ConfigLike = None) -> None:
    """Check the demo's settings, the lake root and the dataset name before Spark starts
    (ConfigError)."""
    from gpope.shell.lake.names import check_name
    from gpope.shell.pipeline.demo import check_demo as _check
    from gpope.shell.preflight import check_lake

    cfg = _config(config)
    _check(cfg, options)
    check_lake(cfg)
    if options.dataset is not None:
        check_name("dataset", options.dataset)


def demo(
    spark: SparkSession,
    *,
    options: DemoOptions | None = None,
    config: ConfigLike = None,
    tracking_uri: str | None = None,
) -> DemoReport:
    """The end-to-end demo: simulated HIV cohort -> ingest -> stats -> private evaluation."""
    from gpope.shell.pipeline.demo import DemoOptions, run_demo

    return run_demo(
        spark, _config(config), options=options or DemoOptions(progress=False),
        tracking_uri=tracking_uri,
    )


def check_stage(
    stage: Literal["simulate", "ingest", "stats", "evaluate"],
    dataset: str,
    *,
    spec: SpecLike | None = None,
    domain: str | None = None,
    config: ConfigLike = None,
) -> EvaluationSpec | None:
    """Check a stage on ``dataset`` before Spark starts (:func:`gpope.shell.preflight.check_stage`;
    for ``ingest`` also the dataset's settings); returns the loaded spec (None without one).

    Raises:
        ConfigError: an invalid dataset name, lake root, spec or dataset settings.
        TableNotFoundError: an input table is missing (the message names the command).
    """
    from gpope.shell.preflight import check_stage as _check

    cfg = _config(config)
    loaded = load_spec(spec) if spec is not None else None
    if stage == "ingest":
        from gpope.shell.pipeline.ingest import resolve_dataset_settings

        resolve_dataset_settings(cfg, dataset, domain=domain)
    _check(cfg, stage, dataset, loaded)
    return loaded


def check_load(dataset: str, files: Mapping[str, str], *, fmt: str = "auto", columns: Any = None,
               time_zone: str | None = None, config: ConfigLike = None) -> None:
    """Check a :func:`load` before Spark starts (:func:`gpope.shell.preflight.check_load`)."""
    from gpope.shell.preflight import check_load as _check

    _check(_config(config), dataset, dict(files), fmt=fmt, columns=columns, time_zone=time_zone)


def privacy_ledger(config: ConfigLike = None, *, spark: SparkSession | None = None) -> PrivacyLedger:
    """The lake's privacy ledger; a local lake needs no ``spark``, a Unity Catalog lake does."""
    from gpope.shell.pipeline.ledger import PrivacyLedger

    return PrivacyLedger(spark, _config(config))


def released_counts(dataset: str, *, config: ConfigLike = None,
                    spark: SparkSession | None = None) -> list[dict[str, Any]]:
    """The released numbers of patients m~ of ``dataset`` (one per statistics version, each
    charged once in the ledger), oldest first."""
    from gpope.shell.pipeline.released_count import read_counts

    return read_counts(_config(config), dataset=dataset, spark=spark)


def maintain(*, retention_hours: float | None = None, dataset: str | None = None,
             dry_run: bool = False, config: ConfigLike = None) -> MaintenanceReport:
    """Compact and vacuum the lake's Delta tables (all, or ``dataset``'s and the shared ones);
    ``retention_hours`` None: ``lake.retention_hours`` of the configuration; ``dry_run`` lists
    what would change."""
    from gpope.shell.lake.maintain import maintain_lake

    cfg = _config(config)
    hours = cfg.lake.retention_hours if retention_hours is None else retention_hours
    return maintain_lake(cfg.lake, retention_hours=hours, dataset=dataset, dry_run=dry_run)


def track(run_id: str, *, force: bool = False, config: ConfigLike = None,
          tracking_uri: str | None = None) -> TrackReport:
    """Log the committed release ``run_id`` to MLflow from the lake's released tables
    (idempotent unless ``force``; only released numbers), within the configuration's HTTP
    limits."""
    from gpope.shell.pipeline.track import relog_release
    from gpope.shell.tracking import http_limits

    cfg = _config(config)
    with http_limits(cfg.tracking):
        return relog_release(cfg, run_id, tracking_uri=tracking_uri, force=force)


def pipeline_audit(
    *, delta: float, seed: int = 0, runs: int | None = None, epsilon: float | None = None,
    iterations: int | None = None, include_broken: bool = False, config: ConfigLike = None,
) -> list[tuple[str, AuditResult]]:
    """Audit the real evaluate path end to end (local Spark, a temporary lake, two neighbouring
    one-patient datasets; :mod:`gpope.shell.pipeline.audit`): ``[("real", result)]``, with
    ``include_broken`` also the unclipped solver (``"no-clip"``). Unset settings take the
    audit's presets."""
    from gpope.shell.pipeline.audit import PipelineAuditConfig, run_pipeline_audit

    kw = {k: v for k, v in (("runs", runs), ("epsilon", epsilon), ("iterations", iterations))
          if v is not None}
    variants: dict[str, dict[str, object] | None] = {"real": None}
    if include_broken:
        variants["no-clip"] = {"clip": False}
    spark = get_spark(config)
    return run_pipeline_audit(spark, PipelineAuditConfig(delta=delta, seed=seed, **kw),
                              variants=variants)


def query(sql: str, *, config: ConfigLike = None, operator: bool = False) -> QueryResult:
    """One read-only SELECT over the local lake's views, with DuckDB, no Spark; ``operator``
    also serves the raw and per-patient tables (not private)."""
    from gpope.shell.query import query as _query

    return _query(sql, lake=_config(config), operator=operator)


def describe_view(view: str, *, config: ConfigLike = None,
                  operator: bool = False) -> list[dict[str, Any]]:
    """The columns of a query view: name, type and comment."""
    from gpope.shell.query import describe

    return describe(view, lake=_config(config), operator=operator)


def lake_views(*, config: ConfigLike = None, operator: bool = False) -> LakeViews:
    """The views :func:`query` serves on the local lake (all tables with ``operator``)."""
    from gpope.shell.query import lake_views as _views

    return _views(_config(config), operator=operator)


def compare_runs(dataset: str, run_a: str, run_b: str, *, config: ConfigLike = None,
                 track: bool = False, tracking_uri: str | None = None) -> RunComparison:
    """Run A minus run B on ``dataset`` per quantity both released with an interval, from the
    released numbers only (no budget); ``track`` also logs it to MLflow. Raises ConfigError when
    a run released nothing on the dataset."""
    from gpope.shell.compare import compare_runs as _compare
    from gpope.shell.compare import track_comparison

    cfg = _config(config)
    comparison = _compare(cfg, dataset, run_a, run_b)
    return track_comparison(comparison, cfg, tracking_uri) if track else comparison

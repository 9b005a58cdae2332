"""The public inputs of one private evaluation and its release plan, before anything is written.

:func:`prepare_run` reads only what the design treats as public: m (the released count m~ of the
pinned statistics version, or the exact count that replace-one makes public), the episode cap
``gpope simulate`` recorded, and the public clip bound of the noisy-statistics release (a
quantile on the spec's simulator). From those it resolves the settings and makes the
:class:`~gpope.core.evaluation.plan.ReleasePlan`. Nothing here reads a private row, and every
refusal reads public inputs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpope.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import GpopeConfig
    from gpope.core.evaluation.plan import ReleasePlan
    from gpope.core.evaluation.settings import RunSettings, SettingsLayer
    from gpope.core.mechanisms.count import NoisyCount
    from gpope.core.spec import EvaluationSpec

__all__ = ["PreparedRun", "check_count", "check_request", "check_seed_allowed", "prepare_run"]


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    """A run ready to reserve: its public inputs, resolved settings and release plan. ``m`` is
    what every released number uses (m~, or the exact m under replace-one); ``rows``, the exact
    number of trajectories, only checks and indexes the rows, never released nor logged."""

    m: int
    rows: int
    stats_version: int
    settings: RunSettings
    provenance: dict[str, Any]
    recorded_max_length: int | None
    plan: ReleasePlan

    @property
    def seeded(self) -> bool:
        """A fixed seed was given: the run is reproducible and NOT private."""
        return self.settings.seed is not None


def check_request(config: GpopeConfig, spec: EvaluationSpec, flags: SettingsLayer) -> None:
    """The checks that need no Spark and no m (ConfigError): the configuration with the caller's
    settings over it, and the spec's block."""
    from gpope.core.estimators import claiming, get
    from gpope.core.evaluation.settings import SettingsLayer, merged_view

    view = merged_view(config.evaluation, flags)
    # the estimator the run takes, as resolve_settings decides it
    claimed = claiming(spec.evaluation is not None, dict.fromkeys(flags.values, "options"))
    get(claimed or view.estimator).check(spec, view)
    block = spec.evaluation
    if flags.get("accountant") is None and block is not None and block.get("accountant"):
        # the block's accountant as the caller's layer: the combination the run would resolve
        merged_view(config.evaluation, SettingsLayer(
            {**flags.values, "accountant": block.get("accountant")}))


def check_seed_allowed(config: GpopeConfig, dataset: str) -> None:
    """A fixed seed makes noise reproducible: ConfigError unless ``gpope simulate`` produced the
    dataset."""
    from gpope.shell.pipeline.ledger import PrivacyLedger

    if PrivacyLedger(None, config).origin(dataset) == "simulate":
        return
    raise ConfigError(
        f"--seed makes the noise and the sample plan reproducible, so the output of dataset "
        f"{dataset!r} (not produced by `gpope simulate`) would not be private. Drop --seed, or "
        "pass --allow-not-private to accept a release marked NOT private."
    )


def _simulated_max_length(config: GpopeConfig, dataset: str) -> int | None:
    """The episode cap recorded by ``gpope simulate`` for ``dataset`` (public), or None."""
    from gpope.shell.pipeline.simulate import read_simulation_record

    try:
        record = read_simulation_record(config, dataset)
    except Exception:  # the record is a convenience: never fail a run over it
        record = None
    return int(record["max_length"]) if record and record.get("max_length") is not None else None


def _sparse_bound(config: GpopeConfig, dataset: str, spec: EvaluationSpec,
                  recorded: int | None) -> int | None:
    """The public bound on one trajectory's sparse statistics (bytes) of a one-hot spec, from the
    dataset's public episode cap; None for a dense map or without a known cap."""
    from gpope.core.evaluation.loading import max_active, pair_support, sparse_row_bytes

    p = max_active(spec.feature_map)
    configured = config.datasets.get(dataset)
    cap = configured.max_length if configured is not None and configured.variables else recorded
    if p is None or cap is None:
        return None
    return sparse_row_bytes(spec.n_features, active=p, max_length=int(cap),
                            pairs=pair_support(spec.feature_map))


def private_clip_quantile(settings: RunSettings, source: str | None) -> float:
    """The quantile an ssp run without a public clip releases privately: ``ssp_clip_quantile``
    when chosen, else the tuning-free default's (a private quantile is read from noisy counts,
    in which the few rows above the conf's public-cohort quantile drown at small m)."""
    if source in ("options", "spec"):
        return float(settings.ssp_clip_quantile)
    return float(settings.untuned.clip_quantile)


def statistics_clip(spec: EvaluationSpec, settings: RunSettings, *, private_fallback: bool,
                    source: str | None, quantile_source: str | None = None
                    ) -> tuple[float | None, str | None]:
    """The clip bound of the noisy-statistics release and where it comes from (one line): the
    setting, else a public quantile on the spec's simulator; without one None (and the words
    for an estimator that releases its clip privately, ``private_fallback``)."""
    if settings.ssp_clip is not None:
        return float(settings.ssp_clip), ("--ssp-clip" if source == "options"
                                          else "evaluation.ssp_clip")
    q = settings.ssp_clip_quantile
    if spec.domain is None or settings.public_trajectories <= 0:
        if not private_fallback:
            return None, None  # no public data for a clip bound: no statistics release
        return None, (f"private {private_clip_quantile(settings, quantile_source):g} quantile of "
                      "the trajectories' statistics norms (spec has no public simulator; charged "
                      "to this run's epsilon)")
    from gpope.shell.pipeline.ssp import public_clip

    clip = public_clip(spec, n_trajectories=settings.public_trajectories, quantile=q,
                       max_length=settings.public_max_length)
    return clip, f"public {q:g} quantile on a simulated cohort of the spec's domain"


def check_count(count: NoisyCount) -> int:
    """The released count as the run's public m; ConfigError when m~ < 2."""
    if count.m_noisy < 2:
        raise ConfigError(
            f"The released number of patients of this statistics version is {count.m_noisy} "
            f"(noise std {count.sigma:.3g}): too few to evaluate. For a dataset this small raise "
            "privacy.count_epsilon in the configuration (and re-run `gpope stats` for a new count), "
            "or evaluate a larger dataset.")
    return int(count.m_noisy)


def prepare_run(spark: SparkSession, config: GpopeConfig, *, dataset: str, spec: EvaluationSpec,
                flags: SettingsLayer) -> PreparedRun:
    """The public inputs, the resolved settings and the release plan of a run; nothing is
    written on a refusal (invalid settings, no or stale statistics)."""
    from gpope.core.evaluation import plan_loading, plan_release
    from gpope.core.evaluation.loading import is_one_hot
    from gpope.core.evaluation.plan import run_relation
    from gpope.core.evaluation.settings import (
        check_delta_against_m,
        merged_view,
        resolve_settings,
    )
    from gpope.shell.pipeline.released_count import public_count
    from gpope.shell.pipeline.stats import statistics_version, trajectory_count
    from gpope.shell.pipeline.stats_source import check_fresh

    check_request(config, spec, flags)
    if flags.get("seed") is not None and not flags.get("allow_not_private", False):
        check_seed_allowed(config, dataset)
    # m and the statistics come from one pinned version of trajectory_stats: a concurrent
    # `gpope stats` cannot make the count and the rows disagree
    version = statistics_version(spark, config, dataset=dataset)
    rows = trajectory_count(spark, config, dataset=dataset, spec=spec, version=version)
    # statistics older than the latest ingest: refused, or (allowed) recorded in the run
    stale = check_fresh(spark, config, dataset=dataset, spec=spec, stats_version=version,
                        allow=bool(flags.get("allow_stale_stats", False)))
    # the public m: the version's released count (charged once per version, then reused)
    count = public_count(config, dataset=dataset, stats_version=version, m=rows,
                         seed=flags.get("seed"), spark=spark)
    m = max(count.m_noisy, 2)  # what the settings resolve at; the run's m is decided below
    # the public cohort (SSP clip, residual bound, public MSPBE) has the episode cap the
    # simulated dataset recorded: a clip from 200-decision HIV episodes is about 5x too large
    # for the demo's 40-decision ones and buried every feature of the noisy statistics
    recorded = _simulated_max_length(config, dataset)
    # dense rows in memory when they fit in_memory_limit_mb, else a one-hot map's nonzero
    # entries when their public bound fits, else streamed: from m, n and the episode cap only
    view = merged_view(config.evaluation, flags)
    layout = plan_loading(m=m, n=spec.n_features, path=view.path,
                          limit_mb=view.in_memory_limit_mb,
                          one_hot=is_one_hot(spec.feature_map),
                          sparse_bytes=_sparse_bound(config, dataset, spec, recorded))
    settings, provenance = resolve_settings(config.evaluation, spec, flags, m=m,
                                            recorded_max_length=recorded, layout=layout)
    if stale is not None:
        provenance["stale_stats"] = stale
    from gpope.core.estimators import get
    from gpope.core.state_action import behaviour_rules

    estimator = get(settings.estimator)
    behaviour = behaviour_rules(spec, settings)  # no propensities: estimated by the default
    q_source = provenance["source"].get("ssp_clip_quantile")
    clip, clip_from = (None, None) if not estimator.public_clip else statistics_clip(
        spec, settings, private_fallback=estimator.private_clip_fallback,
        source=provenance["source"].get("ssp_clip"), quantile_source=q_source)
    if clip_from is not None:
        provenance["ssp_clip_from"] = clip_from
    count_sigma = count.sigma
    if run_relation(settings) == "replace_one":  # uniform sampling: its accountant's 1/m is exact
        m, count_sigma = rows, 0.0
    else:
        m = check_count(count)
    check_delta_against_m(float(flags.get("delta")), m)
    plan = plan_release(
        settings, m=m, spec=spec, layout=layout, statistics_clip=clip,
        groups_explicit=provenance["source"].get("interval_groups") == "options",
        private_tuning=settings.private_tuning
        if settings.tune == "private" else None, untuned=settings.untuned,
        private_clip_quantile=private_clip_quantile(settings, q_source)
        if estimator.private_clip_fallback and clip is None else None, behaviour=behaviour,
        count_sigma=count_sigma)
    if plan.interval_note:
        provenance["interval_note"] = plan.interval_note
    return PreparedRun(m=m, rows=rows, stats_version=version, settings=settings,
                       provenance=provenance,
                       recorded_max_length=recorded, plan=plan)

"""End-to-end privacy audit of the release path (``gpope audit --pipeline``).

What runs for real (a temporary lake, the caller's local SparkSession):

1. Two neighbouring one-patient datasets (replace-one adjacency; m = 1 so the accountant is
   nearly tight, :mod:`gpope.core.audit.gpope`): the canary walks the 40-state chain through
   states 5-8 (D0) or 25-28 (D1). ``gpope stats`` (:func:`run_stats`) computes their statistics.
2. One seeded :func:`run_evaluate` per dataset (pinned read, calibration, ledger, release tables,
   MLflow).
3. The releases: the statistics are read back by ``run_evaluate``'s own functions and the solver
   runs ``runs`` times per dataset; the audit refuses unless one seeded run of this path
   reproduces step 2's released theta EXACTLY.
4. A black-box statistic on the released theta only: a Gaussian log-likelihood ratio fitted on
   the first halves, the Clopper-Pearson bound on epsilon from the second halves
   (:func:`gpope.core.audit.gpope.certify`).

Not covered: the ledger/MLflow writes per release (post-processing of the same theta),
bronze/ingest, the streamed sampling path and Poisson sampling.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpope.core.audit.gpope import AuditClaim, AuditResult
from gpope.core.validation import check_int, check_number
from gpope.errors import AuditError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CANARY_SPEC", "PipelineAuditConfig", "run_pipeline_audit"]

#: The public spec of the audit (the shipped chain spec without its tuned block).
CANARY_SPEC: dict[str, Any] = {
    "name": "audit_chain",
    "domain": "chain",
    "gamma": 0.99,
    "normalization": "transition",
    "length_scale": 4,
    "feature_map": {"kind": "tabular", "n_states": 40},
    "importance_weight_bound": 1.0,
    "reward_bounds": [0.0, 1.0],
    "target_policy": {"kind": "uniform", "n_actions": 1},
    "reference_states": {"s5": [5], "s25": [25]},
}
_CANARY_STATES = {"audit_d0": 5, "audit_d1": 25}


@dataclass(frozen=True, kw_only=True)
class PipelineAuditConfig(AuditClaim):
    """Public settings of the pipeline audit: ``runs`` releases per dataset (half fit the
    statistic, half test), the (epsilon, delta) claim of each, the solver's settings, the level
    ``alpha`` of each one-sided Clopper-Pearson bound and the audit's seed."""

    runs: int = 20_000
    iterations: int = 4
    clip: float = 1e-3
    step_size: float = 10.0
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        o = "PipelineAuditConfig"
        check_int(o, "iterations", self.iterations, ge=1)
        check_number(o, "clip", self.clip, gt=0.0)
        check_number(o, "step_size", self.step_size, gt=0.0)


def _canary_transitions(first_state: int) -> Any:
    from gpope.core.trajectories.transitions import Transitions

    steps = 4
    s = np.arange(first_state, first_state + steps, dtype=np.float64)[:, None]
    return Transitions(
        traj_index=np.zeros(steps, dtype=np.int64), t=np.arange(steps, dtype=np.int64),
        state=s, action=np.zeros(steps, dtype=np.int64), reward=np.ones(steps),
        next_state=s + 1.0, terminal=np.zeros(steps, dtype=bool),
        truncated=np.arange(steps) == steps - 1, behavior_prob=np.ones(steps), n_trajectories=1,
    )


def _options(cfg: PipelineAuditConfig, seed: int) -> Any:
    from gpope.core.evaluation.settings import SettingsLayer

    return SettingsLayer.of(
        epsilon=cfg.epsilon, delta=cfg.delta, iterations=cfg.iterations, sampling="uniform",
        accountant="auto", clip=cfg.clip, step_size=cfg.step_size, step_schedule="constant",
        averaging="none", statistics_share=0.0, policy_value_share=0.0, public_trajectories=0,
        seed=seed,
        allow_not_private=True, path="memory",
    )


def _gaussian_ratio_statistic(x0: np.ndarray, x1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Log-likelihood ratio of two Gaussians fitted on the first halves, for every release.

    A black-box Neyman-Pearson approximation: each world's released theta is modelled as
    N(mean, cov) with the moments of its first half; the statistic (and, in ``certify``, the
    threshold) are fixed on the first halves, so the bound from the second halves stays valid.
    """

    def fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        half = x[: len(x) // 2]
        mean = half.mean(0)
        cov = np.atleast_2d(np.cov(half, rowvar=False))
        cov = cov + 1e-9 * max(float(np.trace(cov)) / len(cov), 1e-300) * np.eye(len(cov))
        inv = np.linalg.inv(cov)
        return mean, inv, float(np.linalg.slogdet(cov)[1])

    def loglik(x: np.ndarray, model: tuple[np.ndarray, np.ndarray, float]) -> np.ndarray:
        mean, inv, logdet = model
        d = x - mean
        return -0.5 * (np.einsum("ri,ij,rj->r", d, inv, d) + logdet)

    m0, m1 = fit(x0), fit(x1)
    return loglik(x0, m1) - loglik(x0, m0), loglik(x1, m1) - loglik(x1, m0)


def run_pipeline_audit(
    spark: SparkSession,
    cfg: PipelineAuditConfig,
    *,
    variants: dict[str, dict[str, Any] | None] | None = None,
    root: str | Path | None = None,
) -> list[tuple[str, AuditResult]]:
    """Audit the release path end to end (module docstring): ``(variant, AuditResult)`` per
    solver override of ``variants`` (None: the real mechanism, the default).

    Raises:
        AuditError: the bulk releases do not reproduce ``run_evaluate``'s release.
    """
    if root is None:
        with tempfile.TemporaryDirectory(prefix="gpope-audit-") as tmp:
            return run_pipeline_audit(spark, cfg, variants=variants, root=tmp)
    from gpope.config import load_config
    from gpope.core.evaluation.settings import resolve_settings
    from gpope.core.gpope.solver import run_gpope_trials
    from gpope.core.spec import EvaluationSpec
    from gpope.shell import lake
    from gpope.shell.evaluate.execute import solver_config
    from gpope.shell.evaluate.run import run_evaluate
    from gpope.shell.pipeline.ledger import PrivacyLedger
    from gpope.shell.pipeline.sampled import load_statistics
    from gpope.shell.pipeline.stats import (
        read_statistics,
        run_stats,
        statistics_version,
        transitions_to_arrow,
    )
    from gpope.shell.schemas import TRANSITIONS

    variants = variants or {"real": None}
    base = Path(root)
    config = load_config(None, lake={"root": str(base / "lake")})
    spec = EvaluationSpec.from_mapping(CANARY_SPEC, where="gpope.shell.pipeline.audit")
    uri = f"sqlite:///{base / 'mlflow.db'}"
    ledger = PrivacyLedger(None, config)
    worlds: dict[str, tuple[Any, Any]] = {}
    for k, (dataset, first) in enumerate(_CANARY_STATES.items()):
        df = spark.createDataFrame(transitions_to_arrow(_canary_transitions(first)),
                                   schema=TRANSITIONS)
        lake.write_table(df, config.lake, "silver", dataset, "transitions", mode="overwrite")
        run_stats(spark, config, dataset=dataset, spec=spec)
        ledger.set_budget(dataset, epsilon=1e6, delta=0.5)
        seed = cfg.seed * 1000 + k
        options = _options(cfg, seed)
        report = run_evaluate(spark, config, dataset=dataset, spec=spec, options=options,
                              tracking_uri=uri)
        version = statistics_version(spark, config, dataset=dataset)
        stats = load_statistics(
            read_statistics(spark, config, dataset=dataset, spec_id=spec.spec_id,
                            version=version),
            spec.n_features, normalization=spec.normalization)
        resolved, _ = resolve_settings(config.evaluation, spec, options, m=stats.m)
        solver = solver_config(
            resolved, sigma=report.sigma, batch_rate=resolved.batch_rate,
            trace_every=resolved.trace_every or max(1, resolved.iterations // 20),
            delta=resolved.delta)
        again = run_gpope_trials(stats, solver, seed, 1).theta[0]
        if not np.array_equal(again, report.theta):
            raise AuditError(
                f"the audit's release path does not reproduce run_evaluate's release for "
                f"{dataset} (max difference {np.max(np.abs(again - report.theta)):.3g}); "
                "the audit would not test the pipeline, so it stops.")
        worlds[dataset] = (stats, solver)
    out = []
    gen = np.random.default_rng(cfg.seed)
    for name, override in variants.items():
        t_start = time.perf_counter()
        g0, g1 = gen.spawn(2)
        with np.errstate(all="ignore"):
            r0 = run_gpope_trials(*worlds["audit_d0"], g0, cfg.runs, _mechanism_override=override)
            r1 = run_gpope_trials(*worlds["audit_d1"], g1, cfg.runs, _mechanism_override=override)
        t0, t1 = _gaussian_ratio_statistic(r0.theta, r1.theta)
        out.append((name, cfg.verdict(t0, t1, started=t_start, sigma=float(r0.sigma),
                                      accountant=str(r0.accountant), override=override,
                                      sampling="pipeline")))
    return out


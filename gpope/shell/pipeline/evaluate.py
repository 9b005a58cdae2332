"""Stage 4 of the pipeline: a differentially private evaluation of one spec on one dataset.

Order of operations (docs/ARCHITECTURE.md sections 3-4):

a. **Public inputs only.** m (the number of trajectories with statistics for the spec) is read
   from the gold table: it is public by definition (docs/ARCHITECTURE.md 4). Everything else (iterations,
   clip, step sizes, sampling, batch rate, epsilon, delta) comes from the command line and the
   configuration. The Poisson rate defaults to q = 1/m. sigma is calibrated by the accountant for
   (epsilon, delta, m, N, sampling). Nothing else is computed from the private tables.
   Refused before anything is read: the ``paper`` accountant (not a valid bound) unless
   ``allow_invalid_accounting``; a ``seed`` on a dataset not produced by ``gpope simulate``
   unless ``allow_not_private``; ``delta >= 1/m`` (a warning above ``1/(10 m)``).
b. **Reserve** the run's spend and its dp-accounting event in the privacy ledger (runs composed
   tightly by an RDP filter); a run that would exceed the dataset's budget stops with
   BudgetExceededError having written nothing (:mod:`gpope.shell.pipeline.ledger`). Stale
   reservations of killed runs are settled first. A ``paper`` run is charged a rigorous RDP bound
   of its mechanism and recorded as not a valid bound.
c. **Sample plan** on the driver from OS entropy, or from ``seed`` (then the run is marked NOT
   private in released_estimates and MLflow; the seed itself is never persisted). The plan is
   never logged or written.
d. **Statistics in sampled order**: in memory (all m rows) when their dense size, or else their
   nonzero entries (sparse layout, e.g. tabular specs), fit ``evaluation.in_memory_limit_mb``;
   otherwise fetched block by block through a Spark join of the plan with the statistics table
   (:mod:`gpope.shell.pipeline.sampled`).
e. **Solve**: in memory, the core's :func:`~gpope.core.gpope.run_gpope`; streamed, the driver loop
   :func:`~gpope.shell.pipeline.driver.run_gpope_streamed`, which consumes the same random streams
   and gives the same theta.
f. **Release** one row of released_estimates (theta and values at the spec's reference states) in
   one atomic append, then mark the reservation released. If anything fails after the
   reservation, the reservation is marked ``failed`` and stays counted (noise may have been drawn
   and the data touched: privacy spent is spent); no partial release is written.
g. **MLflow**: one run with params, metrics (spent epsilon/delta; MSPBE per traced step and final
   only on PUBLIC evaluation data, i.e. a fresh cohort from the simulator of a simulated dataset),
   artifacts (theta JSON, value plot, resolved config and spec) and, only when asked, private
   diagnostics (MSPBE and LSTD on the private statistics) tagged ``diagnostic.private=true``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gpope.config import EvaluationSettings, GpopeConfig
    from gpope.core.gpope import GPOPEResult
    from gpope.core.spec import EvaluationSpec

__all__ = [
    "INVALID_ACCOUNTING_REFUSAL",
    "UNBOUNDED_NOTE",
    "EvaluateOptions",
    "EvaluationReport",
    "InterruptedAfterRelease",
    "format_span",
    "privacy_label",
    "run_evaluate",
]

#: The one message that refuses the ``paper`` accountant for a release.
INVALID_ACCOUNTING_REFUSAL = (
    "The 'paper' accountant is not a valid privacy bound (the paper's formula drops terms: at its "
    "settings the true epsilon is several times larger), so it cannot certify a private release. "
    "Use --accountant auto (or rdp/pld), or pass --allow-invalid-accounting to run it anyway: "
    "the run is then NOT private everywhere, labelled 'not a valid bound', and the ledger charges "
    "a rigorous RDP bound of its mechanism."
)

#: Label of a release whose accountant is not a valid bound.
NOT_A_VALID_BOUND = "NOT PRIVATE: accountant 'paper' is not a valid bound"


def privacy_label(*, private: bool, accountant: str, seeded: bool) -> str:
    """The one-line privacy label of a release (used in output, MLflow and tables)."""
    if accountant == "paper":
        return NOT_A_VALID_BOUND
    if seeded:
        return "NOT PRIVATE: fixed seed"
    return "PRIVATE" if private else "NOT PRIVATE"


class InterruptedAfterRelease(KeyboardInterrupt):
    """Ctrl-C after the release was committed: what was released (do not re-run and pay twice)."""

    def __init__(self, message: str, run_id: str, summary: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.summary = summary

Path_ = Literal["auto", "memory", "stream"]


@dataclass(frozen=True, kw_only=True)
class EvaluateOptions:
    """Public settings of one private evaluation.

    Solver settings left None are filled by :meth:`resolve` (called by :func:`run_evaluate` once
    the public m is known) from the spec's ``evaluation:`` block (publicly tuned, ``gpope tune
    --spec``), then the configuration's ``evaluation:`` section: command line > spec > conf (the
    layers and the budget rule: :mod:`gpope.core.operating`).

    Attributes:
        epsilon, delta: the privacy spend of the run (reserved in the ledger).
        passes, iterations, batch_rate, batch_size: the compute budget (trajectories touched / m,
            noisy steps N, Poisson rate q or expected batch q m).
        clip, step_size, step_schedule, step_offset, step_offset_fraction, averaging,
        tail_fraction, sampling, accountant, trace_every: solver settings.
        seed: None (OS entropy: private) or an int (reproducible, NOT private).
        in_memory_limit_mb: statistics larger than this are streamed from Spark (None: conf).
        path: "auto" (by size), "memory" or "stream" (forced; tests and benchmarks).
        private_diagnostics: also log MSPBE/LSTD of the private statistics, tagged private.
        public_trajectories: size of the fresh public cohort simulated for MSPBE (specs with a
            ``domain`` only; 0 disables).
        public_max_length: episode length of that cohort (None: the simulator's default).
        rows_per_fetch: sampled rows per Spark fetch on the streamed path.
        estimator: "gpope" (default) or "ssp" (one-shot LSTD on noisy sufficient statistics).
        ssp_clip: public L2 bound of one trajectory's [A_i, b_i, C_i] (None: the
            ``ssp_clip_quantile`` of the norms on the public cohort of ``public_trajectories``
            trajectories from the spec's simulator, the one the public MSPBE uses; specs without a
            domain must give it).
        moments_share: share of the noisy-statistics release's budget (zCDP, 1/sigma^2) spent on
            the second release of the residual second moments that the intervals need.
        statistics_share: gpope runs: share of (epsilon, delta) spent on the noisy-statistics
            release (private MSPBE, intervals); 0 disables it. ssp runs spend all on it.
        ci_level: level of the two-sided intervals and of the one-sided lower bound.
        interval_groups: gpope runs: 0 (the interval is the hull of the noisy-statistics
            release's SSP interval and the GPOPE value), or K >= 2: split the patients into K
            disjoint groups by a public hash of the patient id, run GPOPE once per group with the
            run's settings, release the mean of the K group estimates and the Student-t interval
            of their spread (:func:`gpope.core.intervals.group_interval`). Same privacy cost as
            one run under add/remove adjacency (parallel composition); Poisson sampling only.
        tune: "none" (clip and step size as given) or "private" (chosen on the private data by
            :mod:`gpope.core.private_tuning` inside the GPOPE part of the budget; see
            :mod:`gpope.shell.pipeline.private_tune`).
        secure_noise: OS-CSPRNG discrete Gaussian noise on the public grid ``noise_grid`` for
            the solver and the noisy-statistics release, released iterates rounded to the grid
            (:mod:`gpope.core.secure_noise`); refuses a seed; in-memory path only.
        noise_grid: the public grid (None: clip * 2^-20).
        allow_invalid_accounting: run with the ``paper`` accountant anyway; the release is then
            NOT private everywhere and labelled "not a valid bound".
        allow_not_private: accept ``seed`` on a dataset not produced by ``gpope simulate``; the
            release is NOT private.
    """

    epsilon: float
    delta: float
    passes: float | None = None
    iterations: int | None = None
    batch_rate: float | None = None
    batch_size: float | None = None
    clip: float | None = None
    step_size: float | None = None
    step_schedule: Literal["constant", "inverse"] | None = None
    step_offset: float | None = None
    step_offset_fraction: float | None = None
    averaging: Literal["none", "uniform", "tail"] | None = None
    tail_fraction: float | None = None
    sampling: Literal["uniform", "poisson"] | None = None
    accountant: Literal["auto", "paper", "rdp", "pld"] | None = None
    trace_every: int | None = None
    seed: int | None = None
    in_memory_limit_mb: int | None = None
    path: Path_ = "auto"
    private_diagnostics: bool = False
    public_trajectories: int = 100  # = public.PUBLIC_TRAJECTORIES (the demo uses the same cohort)
    public_max_length: int | None = None
    rows_per_fetch: int = 4096
    estimator: Literal["gpope", "ssp"] = "gpope"
    ssp_clip: float | None = None
    ssp_clip_quantile: float = 0.99
    moments_share: float = 0.1
    statistics_share: float = 0.1
    ci_level: float = 0.95
    interval_groups: int = 0
    tune: Literal["none", "private"] = "none"
    secure_noise: bool = False
    noise_grid: float | None = None

    allow_invalid_accounting: bool = False
    allow_not_private: bool = False

    def __post_init__(self) -> None:
        from gpope.core.operating import SOLVER_KEYS, EvaluationBlock

        o = "EvaluateOptions"
        if self.secure_noise:
            from gpope.core.secure_noise import check_no_seed

            check_no_seed(self.seed, "gpope evaluate --secure-noise")
            if self.tune != "none":
                raise ConfigError(
                    "The 'secure_noise' option of EvaluateOptions does not support "
                    f"tune={self.tune!r} yet; run with tune='none'."
                )
            if self.path == "stream":
                raise ConfigError(
                    "The 'secure_noise' option of EvaluateOptions runs on the in-memory path "
                    "only; got path='stream'. Use path 'auto' or 'memory'."
                )
        check_number(o, "noise_grid", self.noise_grid, gt=0.0, allow_none=True)
        check_choice(o, "tune", self.tune, ("none", "private"))
        if self.accountant == "paper" and not self.allow_invalid_accounting:
            raise ConfigError(INVALID_ACCOUNTING_REFUSAL)
        check_choice(o, "estimator", self.estimator, ("gpope", "ssp"))
        check_number(o, "ssp_clip", self.ssp_clip, gt=0.0, allow_none=True)
        check_number(o, "ssp_clip_quantile", self.ssp_clip_quantile, gt=0.0, le=1.0)
        check_number(o, "moments_share", self.moments_share, gt=0.0, lt=1.0)
        check_number(o, "statistics_share", self.statistics_share, ge=0.0, lt=1.0)
        check_number(o, "ci_level", self.ci_level, gt=0.0, lt=1.0)
        from gpope.core.intervals import check_interval_groups

        check_interval_groups(o, self.interval_groups)
        check_number(o, "epsilon", self.epsilon, gt=0.0)
        check_number(o, "delta", self.delta, gt=0.0, lt=1.0)
        check_int(o, "iterations", self.iterations, ge=1, allow_none=True)
        check_number(o, "clip", self.clip, gt=0.0, allow_none=True)
        check_choice(o, "path", self.path, ("auto", "memory", "stream"))
        check_int(o, "in_memory_limit_mb", self.in_memory_limit_mb, ge=1, allow_none=True)
        check_int(o, "public_trajectories", self.public_trajectories, ge=0)
        check_int(o, "rows_per_fetch", self.rows_per_fetch, ge=1)
        check_int(o, "seed", self.seed, ge=0, allow_none=True)
        check_int(o, "trace_every", self.trace_every, ge=1, allow_none=True)
        given = {k: getattr(self, k) for k in SOLVER_KEYS if getattr(self, k) is not None}
        try:  # the same checks as a spec's block (ranges, choices)...
            EvaluationBlock(**{k: v for k, v in given.items()
                               if k not in ("passes", "iterations", "batch_rate", "batch_size",
                                            "step_offset", "step_offset_fraction")})
        except ConfigError as exc:
            raise ConfigError(str(exc).replace("evaluation", o, 1)) from exc

    @classmethod
    def from_settings(cls, settings: EvaluationSettings | None = None, **overrides: Any
                      ) -> EvaluateOptions:
        """Options from the configuration's ``evaluation:`` section, then ``overrides`` (None
        values are ignored).

        The SOLVER settings of ``settings`` (:data:`gpope.core.operating.SOLVER_KEYS`) are NOT
        copied: :meth:`resolve` applies them as the lowest layer, below the spec's
        ``evaluation:`` block. Its other settings (estimator, intervals, memory...) are copied.
        """
        from gpope.core.operating import SOLVER_KEYS

        base: dict[str, Any] = {}
        if settings is not None:
            base = {f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)
                    if hasattr(settings, f.name) and f.name not in SOLVER_KEYS}
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    @property
    def resolved(self) -> bool:
        """True once :meth:`resolve` filled every solver setting."""
        return self.iterations is not None and self.clip is not None and self.sampling is not None

    def resolve(self, *, m: int, spec: EvaluationSpec, settings: EvaluationSettings
                ) -> tuple[EvaluateOptions, dict[str, Any]]:
        """Concrete options for m trajectories: every solver setting set, N and q computed.

        Returns:
            (options with iterations N, batch_rate q (None for uniform), absolute step_offset,
            passes = touched / m, batch_size = q m; provenance: ``source`` of each setting
            ("options", "spec", "conf"), the tuned point used, the spec's tuning record).
        """
        from gpope.core.operating import (
            SOLVER_KEYS,
            merge_layers,
            resolve_budget,
            resolve_step_offset,
        )

        mine = {k: getattr(self, k) for k in SOLVER_KEYS}
        block, point = ({}, None)
        if spec.evaluation is not None:
            block, point = spec.evaluation.select(m, self.epsilon)
        conf = settings.solver_settings()
        merged = merge_layers(mine, block, conf)
        source = {}
        for k in merged:
            source[k] = ("options" if mine.get(k) is not None
                         else "spec" if block.get(k) is not None else "conf")
        sampling = merged.get("sampling", "poisson")
        N, q = resolve_budget(m=m, sampling=sampling, passes=merged.get("passes"),
                              batch_size=merged.get("batch_size"),
                              iterations=merged.get("iterations"),
                              batch_rate=merged.get("batch_rate"))
        offset = resolve_step_offset(iterations=N, step_offset=merged.get("step_offset"),
                                     step_offset_fraction=merged.get("step_offset_fraction"))
        touched = N * q * m if q is not None else float(N)
        out = dataclasses.replace(
            self,
            sampling=sampling,
            accountant=merged.get("accountant", "auto"),
            iterations=N,
            batch_rate=q,
            passes=touched / m,
            batch_size=None if q is None else q * m,
            clip=float(merged["clip"]),
            step_size=float(merged["step_size"]),
            step_schedule=merged.get("step_schedule", "constant"),
            step_offset=offset,
            step_offset_fraction=None,
            averaging=merged.get("averaging", "tail"),
            tail_fraction=float(merged.get("tail_fraction", 0.5)),
            trace_every=self.trace_every if self.trace_every is not None else settings.trace_every,
            in_memory_limit_mb=(self.in_memory_limit_mb if self.in_memory_limit_mb is not None
                                else settings.in_memory_limit_mb),
        )
        info = {
            "source": source,
            "tuned_point": None if point is None else point.to_dict(),
            "spec_has_evaluation_block": spec.evaluation is not None,
            "tuning": None if spec.evaluation is None else dict(spec.evaluation.tuning),
            "touched_trajectories": touched,
        }
        return out, info


@dataclass(frozen=True)
class EvaluationReport:
    """What one evaluation released and spent (all of it public or released)."""

    run_id: str
    mlflow_run_id: str | None
    dataset: str
    spec_id: str
    spec_name: str
    policy: str
    epsilon: float
    delta: float
    spent_epsilon: float | None
    accountant: str
    sigma: float
    m: int
    n: int
    iterations: int
    sampling: str
    batch_rate: float | None
    private: bool
    path: str
    theta: np.ndarray
    reference_values: dict[str, float]
    public_mspbe: float | None
    remaining_epsilon: float
    remaining_delta: float
    public_relative_mspbe: float | None = None
    tables: dict[str, str] = field(default_factory=dict)
    private_diagnostics: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    estimator: str = "gpope"
    intervals: dict[str, Any] | None = None
    theta_interval: dict[str, Any] | None = None
    private_mspbe: float | None = None
    private_relative_mspbe: float | None = None
    private_relative_mspbe_interval: list[float] | None = None  # the guard's 90% bootstrap [lo, hi]
    statistics_epsilon: float = 0.0
    statistics_sigma: float | None = None
    ssp_clip: float | None = None
    tuning: dict[str, Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    no_better_than_zero: bool = False
    utility_guard: str = "unknown"
    warnings: list[str] = field(default_factory=list)
    label: str = "PRIVATE"
    no_further_run: bool = False
    remaining_line: str = ""

    def to_dict(self, *, include_private: bool = False) -> dict[str, Any]:
        """Plain form for ``--json``. Private diagnostics (noise-free values of the private data)
        are left out unless ``include_private``; then they sit under ``private_diagnostics``,
        tagged ``diagnostic.private=true``."""
        d = dataclasses.asdict(self)
        d["theta"] = [float(v) for v in self.theta]
        if include_private and self.private_diagnostics:
            d["private_diagnostics"] = {"diagnostic.private": True, **self.private_diagnostics}
        else:
            d.pop("private_diagnostics", None)
        return d

    def interval_arrays(self) -> dict[str, np.ndarray] | None:
        """The value intervals as arrays (value, lower, upper, lower_bound; parallel to
        ``reference_values``) for plots, or None when the run has none."""
        if not self.intervals:
            return None
        return {k: np.asarray(self.intervals[k], dtype=np.float64)
                for k in ("value", "lower", "upper", "lower_bound")}

    def summary(self) -> str:
        """Human-readable lines."""
        lines = [
            f"released run {self.run_id} ({self.label}) "
            f"dataset {self.dataset}, spec {self.spec_name} ({self.spec_id})",
            f"  epsilon {self.epsilon:g} (accountant {self.accountant} "
            f"{'claims, NOT a valid bound:' if self.accountant == 'paper' else 'certifies'} "
            f"{self.spent_epsilon if self.spent_epsilon is not None else float('nan'):.4g}), "
            f"delta {self.delta:g}; sigma {self.sigma:.4g}, m {self.m}, N {self.iterations}, "
            f"sampling {self.sampling}, statistics {self.path}",
            "  " + (self.remaining_line or f"remaining budget: epsilon "
                    f"{self.remaining_epsilon:.6g}, delta {self.remaining_delta:.3g}"),
        ]
        st = self.settings
        if st:
            lines.append(
                f"  operating point: {st.get('passes', float('nan')):.3g} passes "
                f"({st.get('touched_trajectories', float('nan')):.3g} trajectories touched), "
                f"q {st.get('batch_rate') if st.get('batch_rate') is not None else 'n/a'}, "
                f"clip {st.get('clip')}, step {st.get('step_size')} ({st.get('step_schedule')}), "
                f"averaging {st.get('averaging')}; from {st.get('origin')}"
            )
        lines.extend(f"  {w}" for w in self.warnings)
        lines.append(f"  estimator {self.estimator}"
                     + (f"; noisy statistics: epsilon {self.statistics_epsilon:.4g}, sigma "
                        f"{self.statistics_sigma:.4g}, clip {self.ssp_clip:.4g}"
                        if self.statistics_sigma is not None else "; no noisy-statistics release"))
        if self.tuning is not None:
            t = self.tuning
            lines.append(
                f"  tuned privately (inside epsilon): clip {t['clip']:.4g}, step size "
                f"{t['step_size']:.4g} (best of {t['runs']} runs by private MSPBE; private "
                f"relative MSPBE {t['relative_mspbe_private']:.3g})")
        iv = self.intervals
        for i, (name, value) in enumerate(self.reference_values.items()):
            if iv:
                if math.isfinite(iv["lower"][i]) and math.isfinite(iv["upper"][i]):
                    lines.append(
                        f"  V({name}) = {value:.6g}   {100 * iv['level']:g}% interval "
                        f"[{iv['lower'][i]:.4g}, {iv['upper'][i]:.4g}], at least {iv['lower_bound'][i]:.4g}")
                else:
                    lines.append(f"  V({name}) = {value:.6g}   {100 * iv['level']:g}% interval "
                                 f"{format_span(iv['lower'][i], iv['upper'][i])}")
            else:
                lines.append(f"  V({name}) = {value:.6g}")
        if iv and not all(math.isfinite(v) for v in [*iv["lower"], *iv["upper"]]):
            lines.append(f"  {UNBOUNDED_NOTE}")
        if self.public_mspbe is not None:
            rel = ("" if self.public_relative_mspbe is None
                   else f" (relative to theta = 0: {self.public_relative_mspbe:.4g})")
            lines.append(f"  MSPBE on public simulated data: {self.public_mspbe:.4g}{rel}")
        if self.private_relative_mspbe is not None:
            lines.append(f"  private MSPBE (noisy statistics): {self.private_mspbe:.4g}, relative "
                         f"{self.private_relative_mspbe:.4g}")
        if self.mlflow_run_id:
            lines.append(f"  MLflow run {self.mlflow_run_id}")
        return "\n".join(lines)


#: Printed under intervals that are unbounded (gpope.core.intervals.depends_on).
UNBOUNDED_NOTE = ("unbounded: the noisy statistics leave a feature this value depends on below the "
                  "noise (no finite interval is valid); more patients or a larger "
                  "--statistics-share (gpope runs) give a finite one")


def format_span(lower: float, upper: float) -> str:
    """``[lower, upper]``, or ``unbounded`` / a one-sided form when an end is infinite."""
    if math.isfinite(lower) and math.isfinite(upper):
        return f"[{lower:.4g}, {upper:.4g}]"
    if not math.isfinite(lower) and not math.isfinite(upper):
        return "unbounded"
    return f"[{lower:.4g}, {upper:.4g}]"


def policy_label(spec: EvaluationSpec) -> str:
    """Short public label of the target policy for released_estimates."""
    from gpope.core.spec import canonical_json

    if spec.policy_name:
        return spec.policy_name
    d = spec.target_policy.to_dict()
    text = canonical_json(d)
    if len(text) <= 80:
        return text
    import hashlib

    return f"{d.get('kind', 'policy')}:{hashlib.sha256(text.encode()).hexdigest()[:10]}"


def _solver_config(options: EvaluateOptions, *, sigma: float, batch_rate: float | None,
                   trace_every: int | None, delta: float | None = None) -> Any:
    from gpope.core.gpope import GPOPEConfig

    return GPOPEConfig(
        iterations=options.iterations,
        step_size=options.step_size,
        clip=options.clip,
        noise_multiplier=sigma,
        delta=options.delta if delta is None else delta,
        accountant=options.accountant,
        sampling=options.sampling,
        batch_rate=batch_rate,
        step_schedule=options.step_schedule,
        step_offset=options.step_offset,
        averaging=options.averaging,
        tail_fraction=options.tail_fraction,
        trace_every=trace_every,
        secure_noise=options.secure_noise,
        noise_grid=options.noise_grid,
    )


def run_evaluate(
    spark: SparkSession,
    config: GpopeConfig,
    *,
    dataset: str,
    spec: EvaluationSpec,
    options: EvaluateOptions,
    tracking_uri: str | None = None,
    spec_text: str | None = None,
    truth: Mapping[str, float] | None = None,
) -> EvaluationReport:
    """One private evaluation: ledger, released_estimates, MLflow (see the module docstring).

    Args:
        spark: the session.
        config: the configuration (lake, tracking, privacy defaults).
        dataset: the dataset evaluated.
        spec: the evaluation spec (its statistics must exist: ``gpope stats``).
        options: public settings of the run.
        tracking_uri: MLflow URI (None: by the precedence of :mod:`gpope.shell.tracking`).
        spec_text: the spec file's text, logged as an artifact when given.
        truth: true values at the reference states from the public simulator (simulated data
            only), shown beside the released values in MLflow.

    Raises:
        BudgetExceededError: the reservation would exceed the dataset's budget (nothing written).
        DataError: no statistics for the spec.
        ConfigError, AccountingError: invalid public settings (before anything is written).
    """
    from gpope.core.accounting import (
        calibrate_sigma,
        epsilon_spent,
        gpope_dp_event,
        resolve_accountant,
    )
    from gpope.core.ssp import ssp_epsilon, ssp_release_event, ssp_sigma
    from gpope.shell.pipeline.ledger import PrivacyLedger
    from gpope.shell.pipeline.release import release_row, value_rows, write_release
    from gpope.shell.pipeline.stats import (
        read_statistics,
        statistics_version,
        trajectory_count,
    )

    start = time.perf_counter()
    # (a) public inputs and calibration: nothing written yet.
    if options.accountant == "paper" and not options.allow_invalid_accounting:
        raise ConfigError(INVALID_ACCOUNTING_REFUSAL)  # options built by hand without the check
    seeded = options.seed is not None
    if seeded and not options.allow_not_private:
        _check_seed_allowed(config, dataset)
    # m and the statistics come from one pinned version of trajectory_stats (issue 12.7): a
    # concurrent `gpope stats` cannot make the count and the rows disagree.
    stats_version = statistics_version(spark, config, dataset=dataset)
    m = trajectory_count(spark, config, dataset=dataset, spec=spec, version=stats_version)
    check_delta_against_m(options.delta, m)
    n = spec.n_features
    # command line > the spec's evaluation: block (tuned on public data) > conf evaluation:
    options, settings_info = options.resolve(m=m, spec=spec, settings=config.evaluation)
    # read once: it sets the public cohort's episode cap and the outside-tuned-range check below
    recorded_max_length = _simulated_max_length(config, dataset)
    if options.public_max_length is None:
        # the public cohort (SSP clip, residual bound, public MSPBE) has the episode cap the
        # simulated dataset recorded: a clip from 200-decision HIV episodes is about 5x too large
        # for the demo's 40-decision ones and buried every feature of the noisy statistics
        options = dataclasses.replace(options, public_max_length=recorded_max_length)
    q = options.batch_rate
    ssp_run = options.estimator == "ssp"
    ssp_clip = _ssp_clip(spec, options, required=ssp_run)
    share = 1.0 if ssp_run else (options.statistics_share if ssp_clip is not None else 0.0)
    stats_eps, stats_delta = options.epsilon * share, options.delta * share
    gpope_eps, gpope_delta = options.epsilon - stats_eps, options.delta - stats_delta
    accountant = resolve_accountant(options.accountant, "poisson" if ssp_run else options.sampling)
    from gpope.core.accounting.composition import relation_of_sampling

    # the run's adjacency: replace-one for uniform sampling (sensitivity 2h / 2 clip), else
    # add/remove; the statistics release is calibrated, reported and charged under it
    relation = "add_or_remove_one" if ssp_run else relation_of_sampling(options.sampling)
    sigma_s = spent_s = None
    if share > 0:
        # the one-shot release is accounted rigorously even when the GPOPE part uses 'paper'
        stats_acc = "auto" if options.accountant == "paper" else options.accountant
        sigma_s = ssp_sigma(m=m, epsilon=stats_eps, delta=stats_delta, accountant=stats_acc,
                            relation=relation)
        spent_s = ssp_epsilon(m=m, sigma=sigma_s, delta=stats_delta, accountant=stats_acc,
                              relation=relation)
    from gpope.shell.pipeline.sampled import plan_loading

    stats_df = read_statistics(
        spark, config, dataset=dataset, spec_id=spec.spec_id, version=stats_version
    )
    # dense or sparse rows in memory when they fit evaluation.in_memory_limit_mb, else streamed
    layout = plan_loading(stats_df, m=m, n=n, path=options.path,
                          limit_mb=options.in_memory_limit_mb)
    in_memory = layout != "stream"
    tuning = None  # (plan, settings) of --tune private
    if ssp_run and options.tune == "private":
        raise ConfigError(
            "--tune private tunes GPOPE's clip bound and step size; --estimator ssp has none to "
            "tune. Drop one of them."
        )
    groups = None  # --interval-groups K: the group (0..K-1) of each traj_index, public hash
    if options.interval_groups and not ssp_run:
        _check_interval_groups(options, layout=layout)
        groups = _patient_groups(spark, config, dataset=dataset, m=m, groups=options.interval_groups)
    if ssp_run:
        sigma, spent, solver = float(sigma_s), float(spent_s), None
        event = ssp_release_event(sigma_s, options.moments_share)
        mechanism = f"ssp(clip={ssp_clip:g}, moments_share={options.moments_share:g}): {event!r}"
    elif options.tune == "private":
        # the GPOPE part of the budget covers the tuning's releases and its K runs (one
        # composed event, :mod:`gpope.core.private_tuning`)
        from gpope.shell.pipeline.private_tune import plan_tuned_run

        tuning = plan_tuned_run(
            config.evaluation.private_tuning, m=m, iterations=options.iterations, batch_rate=q,
            epsilon=gpope_eps, delta=gpope_delta, sampling=options.sampling,
            accountant=accountant, in_memory=in_memory)
        accountant = tuning[0].accountant
        sigma = float(tuning[0].gpope_sigma)
        spent = float(tuning[0].epsilon_spent) + (spent_s or 0.0)
        trace_every = options.trace_every or max(1, options.iterations // 20)
        solver = _solver_config(options, sigma=sigma, batch_rate=q, trace_every=trace_every,
                                delta=gpope_delta)
        event = tuning[0].dp_event
        mechanism = f"gpope-tuned(private, {tuning[0].candidates} runs): {event!r}"
    else:
        common = dict(m=m, iterations=options.iterations, delta=gpope_delta,
                      accountant=options.accountant, sampling=options.sampling, batch_rate=q)
        sigma = float(calibrate_sigma(epsilon=gpope_eps, **common))
        spent = float(epsilon_spent(sigma=sigma, **common)) + (spent_s or 0.0)
        trace_every = options.trace_every or max(1, options.iterations // 20)
        solver = _solver_config(options, sigma=sigma, batch_rate=q, trace_every=trace_every,
                                delta=gpope_delta)
        event = gpope_dp_event(m=m, iterations=options.iterations, sigma=sigma,
                               sampling=options.sampling, batch_rate=q)
        # --interval-groups: K runs on disjoint groups cost one run (parallel composition,
        # add/remove adjacency; gpope.core.intervals.group_interval): the same event
        split = f", interval_groups={options.interval_groups}" if groups is not None else ""
        mechanism = f"gpope(clip={options.clip:g}{split}): {event!r}"
    if not ssp_run and sigma_s is not None:
        import dp_accounting

        head = mechanism.split(":", 1)[0]
        event = dp_accounting.ComposedDpEvent(
            [event, ssp_release_event(sigma_s, options.moments_share, relation)])
        mechanism = (f"{head} + noisy statistics(clip={ssp_clip:g}, "
                     f"moments_share={options.moments_share:g}; basic composition of "
                     f"({gpope_eps:g}, {gpope_delta:g}) and ({stats_eps:g}, {stats_delta:g})): "
                     f"{event!r}")
    valid_bound = accountant != "paper"
    charged = options.epsilon
    if not valid_bound:  # charge what the mechanism really costs (a rigorous RDP bound)
        charged = max(options.epsilon, float(epsilon_spent(
            sigma=sigma, **{**common, "accountant": "rdp"})) + (spent_s or 0.0))

    # (b) reserve.
    from gpope.shell import faults

    ledger = PrivacyLedger(spark, config)
    run_id = uuid.uuid4().hex
    ledger.reserve(
        dataset, run_id=run_id, epsilon=options.epsilon, delta=options.delta,
        accountant=accountant, event=event, relation=relation,
        label=mechanism.split(": ")[0], charged_epsilon=charged, valid_bound=valid_bound,
        note=None if valid_bound else "accountant 'paper' is not a valid bound "
        "(--allow-invalid-accounting): released NOT private; charged at rigorous RDP epsilon "
        f"{charged:.6g}",
    )
    faults.point("evaluate.after_reserve")
    released = False
    try:
        # (c)-(e) noisy statistics (Spark aggregate + one Gaussian draw), then the estimator.
        noisy = moments = None
        tuned = None
        if sigma_s is not None:
            noisy, moments = _noisy_statistics(stats_df, options, spec, n=n, m=m,
                                               sigma=float(sigma_s), clip=float(ssp_clip))
        private_pop = None
        group_thetas = None
        if ssp_run:
            result = _ssp_result(noisy, options, spec, accountant=accountant, spent=spent)
            if options.private_diagnostics:
                private_pop = _spark_population(stats_df, n, m)
        elif groups is not None:
            result, group_thetas, private_pop = _solve_groups(
                spark, stats_df, spec, solver, options, groups=groups, n=n, spent=spent)
        else:
            result, private_pop, tuned = _solve(
                spark, stats_df, spec, solver, options, m=m, n=n, sigma=sigma, spent=spent,
                accountant=accountant, in_memory=in_memory, layout=layout, tuning=tuning)
            if tuned is not None:  # the chosen (DP) settings are what this run used
                options = dataclasses.replace(options, clip=tuned.config.clip,
                                              step_size=tuned.config.step_size)
        if not valid_bound:
            result = dataclasses.replace(result, private=False, privacy_note=NOT_A_VALID_BOUND)
        label = privacy_label(private=result.private, accountant=accountant, seeded=seeded)
        released_theta = result.theta_avg if result.theta_avg is not None else result.theta
        values = spec.reference_values(released_theta)
        intervals, theta_iv, priv_mspbe = _intervals(noisy, moments, spec, released_theta, values,
                                                     options=options, ssp_run=ssp_run,
                                                     group_thetas=group_thetas)
        if priv_mspbe is None and tuned is not None:
            # no separate release: the tuning's noisy statistics give it (post-processing)
            from gpope.core.ssp import private_mspbe

            priv_mspbe = private_mspbe(released_theta, tuned.noisy)
        # (f) release, then mark released.
        created = datetime.now(UTC).replace(tzinfo=None)
        row = release_row(
            run_id=run_id, dataset=dataset, spec=spec, policy=policy_label(spec),
            epsilon=options.epsilon, delta=options.delta, accountant=accountant,
            created_at=created, theta=released_theta, values=values, private=result.private,
            estimator=options.estimator,
        )
        write_release(spark, config, row, value_rows(row, spec_name=spec.name, interval=intervals))
        released = True
        faults.point("evaluate.after_release")
        ledger.mark(dataset, run_id, "released")
    except KeyboardInterrupt as exc:
        if not released:
            ledger.mark(dataset, run_id, "failed")
            raise
        ledger.mark(dataset, run_id, "released")
        summary = "; ".join(f"V({k}) = {float(v):.6g}"
                            for k, v in zip(spec.reference_names, values, strict=True))
        raise InterruptedAfterRelease(
            f"interrupted AFTER the release: run {run_id} of dataset {dataset} was released "
            f"({label}; epsilon {options.epsilon:g}, delta {options.delta:g} charged) and "
            f"recorded in the ledger; MLflow logging was skipped. Do not re-run it (that would "
            f"spend the budget again); read it from released_estimates (run_id {run_id}).",
            run_id, summary,
        ) from exc
    except BaseException:
        if not released:
            ledger.mark(dataset, run_id, "failed")
        raise
    budget = ledger.status(dataset)

    tuning_summary = None
    if tuned is not None:
        from gpope.shell.pipeline.private_tune import tuning_summary as summarize_tuning

        tuning_summary = summarize_tuning(tuned)

    # (g) MLflow (after the release: tracking problems never undo a release).
    from gpope.shell.pipeline.evaluate_mlflow import log_evaluation
    from gpope.shell.tracking import resolve_tracking_uri

    record = _record(
        spark, config, run_id=run_id, dataset=dataset, spec=spec, options=options, result=result,
        released_theta=released_theta, values=values, m=m, sigma=sigma, spent=spent,
        accountant=accountant, batch_rate=q, path="memory" if in_memory else "stream",
        spec_text=spec_text, private_population=private_pop if options.private_diagnostics
        else None, truth=truth, intervals=intervals, private_mspbe=priv_mspbe,
        ssp={"statistics_sigma": sigma_s, "ssp_clip": ssp_clip, "statistics_epsilon": stats_eps,
             "statistics_delta": stats_delta, "moments_share": options.moments_share}
        if sigma_s is not None else None, tuning=tuning_summary,
    )
    # the loud guard: public (fresh simulated cohort) and private (noisy statistics) diagnostics
    from gpope.core.guard import GUARD_TAG, private_relative_mspbe, utility_guard

    public_rel = None
    if record.public_cohort is not None:
        from gpope.core.metrics import relative_mspbe

        try:
            public_rel = float(relative_mspbe(released_theta, *record.public_cohort.population))
        except Exception:  # a degenerate public cohort (MSPBE(0) = 0): no public verdict
            public_rel = None
    # the private one is noisy: it counts only through its bootstrap interval (gpope.core.guard)
    guard_noisy = noisy if noisy is not None else getattr(tuned, "noisy", None)
    private_diag = None
    if priv_mspbe is not None and guard_noisy is not None and n <= _GUARD_MAX_FEATURES:
        # each draw costs an n x n eigendecomposition: fewer draws for wide feature maps
        private_diag = private_relative_mspbe(released_theta, guard_noisy,
                                              np.random.default_rng(options.seed),
                                              draws=200 if n <= 128 else 40)
    guard = utility_guard({"public": public_rel, "private": private_diag})
    record = dataclasses.replace(record, tags={**dict(record.tags), GUARD_TAG: guard.verdict})
    outside = _outside_tuned(spec, m=m, epsilon=options.epsilon, max_length=recorded_max_length)
    if spec.evaluation is not None and spec.evaluation.tuned:
        record = dataclasses.replace(record, tags={**dict(record.tags),
                                                   OUTSIDE_TUNED_TAG: str(bool(outside)).lower()})
    try:
        tracking = log_evaluation(
            record, tracking_uri=resolve_tracking_uri(tracking_uri, config.tracking.uri,
                                                      config.lake.root),
            experiment=config.tracking.experiment,
        )
    except KeyboardInterrupt as exc:
        raise InterruptedAfterRelease(
            f"interrupted AFTER the release: run {run_id} of dataset {dataset} was released "
            f"({label}) and recorded in the ledger; MLflow logging was cut short. Do not re-run "
            f"it; read it from released_estimates (run_id {run_id}).", run_id, "",
        ) from exc
    from gpope.shell import lake

    warnings = [guard.message] if guard.message else []
    if outside:
        warnings.append(outside)
    if not settings_info["spec_has_evaluation_block"]:
        warnings.append(
            f"NOTE: spec {spec.name!r} has no evaluation: block, so the generic conf settings "
            "were used; tune it on public data with `gpope tune --spec FILE`."
        )
    settings = {
        "passes": options.passes, "iterations": options.iterations, "batch_rate": q,
        "batch_size": options.batch_size, "clip": options.clip, "step_size": options.step_size,
        "step_schedule": options.step_schedule, "step_offset": options.step_offset,
        "averaging": options.averaging, "tail_fraction": options.tail_fraction,
        "sampling": options.sampling, "accountant": accountant,
        "touched_trajectories": settings_info["touched_trajectories"],
        "source": settings_info["source"], "tuned_point": settings_info["tuned_point"],
        "tuning": settings_info["tuning"],
        "origin": ("spec evaluation: block" if settings_info["spec_has_evaluation_block"]
                   else "conf evaluation: (generic)")
        + (" + command line" if "options" in settings_info["source"].values() else ""),
    }

    return EvaluationReport(
        run_id=run_id,
        mlflow_run_id=tracking.mlflow_run_id,
        dataset=dataset,
        spec_id=spec.spec_id,
        spec_name=spec.name,
        policy=policy_label(spec),
        epsilon=options.epsilon,
        delta=options.delta,
        spent_epsilon=spent if math.isfinite(spent) else None,
        accountant=accountant,
        sigma=sigma,
        m=m,
        n=n,
        iterations=options.iterations,
        sampling=options.sampling,
        batch_rate=q,
        private=bool(result.private),
        path="memory" if in_memory else "stream",
        theta=np.asarray(released_theta, dtype=np.float64),
        reference_values={k: float(v) for k, v in zip(spec.reference_names, values, strict=True)},
        public_mspbe=tracking.public_mspbe,
        public_relative_mspbe=tracking.public_relative_mspbe,
        remaining_epsilon=budget.remaining_epsilon,
        remaining_delta=budget.remaining_delta,
        tables={
            "trajectory_stats": str(lake.table_location(config.lake, "gold", dataset, "trajectory_stats")),
            "released_estimates": str(lake.shared_table_location(config.lake, "released_estimates")),
            "released_values": str(lake.shared_table_location(config.lake, "released_values")),
            "privacy_ledger": ledger.location,
        },
        private_diagnostics=tracking.private_diagnostics,
        seconds=time.perf_counter() - start,
        estimator=options.estimator,
        intervals=intervals.to_dict() if intervals is not None else None,
        theta_interval=theta_iv.to_dict() if theta_iv is not None else None,
        private_mspbe=priv_mspbe[0] if priv_mspbe else None,
        private_relative_mspbe=priv_mspbe[1] if priv_mspbe else None,
        statistics_epsilon=float(stats_eps),
        statistics_sigma=None if sigma_s is None else float(sigma_s),
        ssp_clip=ssp_clip,
        tuning=tuning_summary,
        settings=settings,
        no_better_than_zero=guard.no_better_than_zero,
        utility_guard=guard.verdict,
        private_relative_mspbe_interval=None if private_diag is None
        else [private_diag.lower, private_diag.upper],
        warnings=warnings,
        label=label,
        no_further_run=budget.no_further_run,
        remaining_line=budget.remaining_line(),
    )


def check_delta_against_m(delta: float, m: int) -> None:
    """Refuse ``delta >= 1/m`` and warn above ``1/(10 m)`` (m is public by the design).

    A delta of 1/m allows a mechanism that publishes one random patient's record outright.

    Raises:
        ConfigError: ``delta >= 1/m``.
    """
    import warnings

    if delta >= 1.0 / m:
        raise ConfigError(
            f"delta must be below 1/m = {1.0 / m:.3g} for m = {m} trajectories (a delta of 1/m "
            f"permits releasing one patient's record in the clear). Got delta {delta:g}; use "
            f"delta <= {0.1 / m:.3g} (1/(10 m)) or smaller."
        )
    if delta > 0.1 / m:
        warnings.warn(
            f"delta {delta:g} is above 1/(10 m) = {0.1 / m:.3g} for m = {m} trajectories; a delta "
            "well below 1/m (e.g. 1/m^1.1 or 1e-6) is recommended.",
            UserWarning, stacklevel=2,
        )


def _check_seed_allowed(config: GpopeConfig, dataset: str) -> None:
    """A fixed seed makes noise and plan reproducible: only on a simulated dataset, or with
    ``allow_not_private``."""
    from gpope.shell.pipeline.ledger import PrivacyLedger

    if PrivacyLedger(None, config).origin(dataset) == "simulate":
        return
    raise ConfigError(
        f"--seed makes the noise and the sample plan reproducible, so the output of dataset "
        f"{dataset!r} (not produced by `gpope simulate`) would not be private. Drop --seed, or "
        "pass --allow-not-private to accept a release marked NOT private."
    )


#: MLflow tag: "true" when the run's (m, epsilon, episode cap) lie outside what the spec's
#: evaluation: block was tuned for (issue 15 section 4).
OUTSIDE_TUNED_TAG = "gpope.outside_tuned_range"


def _outside_tuned(spec: EvaluationSpec, *, m: int, epsilon: float,
                   max_length: int | None) -> str | None:
    """The warning when this run lies outside what the spec was tuned for (public inputs only:
    m, epsilon and, for a simulated dataset, its recorded episode cap ``max_length``)."""
    if spec.evaluation is None:
        return None
    return spec.evaluation.outside_tuned(m, epsilon, max_length=max_length)


def _simulated_max_length(config: GpopeConfig, dataset: str) -> int | None:
    """The episode cap recorded by ``gpope simulate`` for ``dataset`` (public), or None."""
    from gpope.shell.pipeline.simulate import read_simulation_record

    try:
        record = read_simulation_record(config, dataset)
    except Exception:  # the record is a convenience: never fail a run over it
        record = None
    return int(record["max_length"]) if record and record.get("max_length") is not None else None


def _ssp_clip(spec: EvaluationSpec, options: EvaluateOptions, *, required: bool) -> float | None:
    """The public clip bound of the noisy-statistics release: the option, else a public quantile
    on the spec's simulator; None (no release) for a gpope run whose spec has no simulator."""
    if options.ssp_clip is not None:
        return float(options.ssp_clip)
    if not required and (spec.domain is None or options.public_trajectories <= 0):
        return None  # no public data for a clip bound: this gpope run has no statistics release
    from gpope.shell.pipeline.ssp import public_clip

    return public_clip(spec, n_trajectories=options.public_trajectories,
                       quantile=options.ssp_clip_quantile, max_length=options.public_max_length)


def _noise_generators(seed: int | None) -> tuple[np.random.Generator, np.random.Generator]:
    """(noise generator, bootstrap generator): OS entropy, or derived from ``seed`` (NOT private)
    through streams independent of the solver's."""
    ss = np.random.SeedSequence() if seed is None else np.random.SeedSequence([int(seed), 0x55_53_50])
    noise, boot = ss.spawn(2)
    return np.random.default_rng(noise), np.random.default_rng(boot)


def _noisy_statistics(stats_df: Any, options: EvaluateOptions, spec: EvaluationSpec, *, n: int,
                      m: int, sigma: float, clip: float) -> tuple[Any, Any]:
    """The noisy-statistics release and its moments release (:mod:`gpope.core.ssp`): a Spark
    aggregate of the clipped sums plus Gaussian noise at ``sigma / sqrt(1 - moments_share)``;
    then, at the resulting (public) unregularised SSP estimate, a Spark aggregate of the clipped
    residual second moments plus noise at ``sigma / sqrt(moments_share)``. Together: exactly the
    Gaussian mechanism at ``sigma`` (:func:`gpope.core.ssp.ssp_release_event`)."""
    from gpope.core.intervals import ssp_values
    from gpope.core.ssp import release_moments, release_noisy_statistics, split_sigma
    from gpope.shell.pipeline.ssp import public_residual_bound, spark_group_sums, spark_moment_sum

    rng, _ = _noise_generators(options.seed)
    s1, s2 = split_sigma(sigma, options.moments_share)
    sums = spark_group_sums(stats_df, n=n, clip=clip, expected_rows=m)
    if options.secure_noise:
        noisy = _secure_noisy_statistics(sums, options, n=n, m=m, sigma=s1, clip=clip)
    else:
        noisy = release_noisy_statistics(sums, n=n, m=m, sigma=s1, clip=clip, rng=rng)
    theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
    bound = public_residual_bound(spec, theta, clip=clip, n_trajectories=options.public_trajectories,
                                  quantile=options.ssp_clip_quantile,
                                  max_length=options.public_max_length)
    msum = spark_moment_sum(stats_df, n=n, clip=clip, theta=theta, bound=bound, expected_rows=m)
    if options.secure_noise:
        from gpope.core.secure_noise import round_to_grid, rounding_inflation, secure_gaussian_noise
        from gpope.core.ssp import NoisyMoments, moments_matrix

        scale = bound * bound
        grid = options.noise_grid if options.noise_grid is not None else scale * 2.0**-20
        msum = round_to_grid(msum, grid)
        std = s2 * scale * rounding_inflation(scale, grid, msum.shape[0])
        msum = msum + secure_gaussian_noise(msum.shape, std, grid)
        return noisy, NoisyMoments(matrix=moments_matrix(msum, n), theta=theta,
                                   sigma=float(std / scale), bound=float(bound))
    return noisy, release_moments(msum, n=n, theta=theta, sigma=s2, bound=bound, rng=rng)


def _secure_noisy_statistics(sums: np.ndarray, options: EvaluateOptions, *, n: int, m: int,
                             sigma: float, clip: float) -> Any:
    """The noisy-statistics release with secure noise: the sums rounded to the public
    grid, plus OS-CSPRNG discrete Gaussian noise (std raised to cover the rounding)."""
    from gpope.core.secure_noise import round_to_grid, rounding_inflation, secure_gaussian_noise
    from gpope.core.ssp import NoisyStatistics

    grid = options.noise_grid if options.noise_grid is not None else clip * 2.0**-20
    sums = round_to_grid(np.asarray(sums, dtype=np.float64), grid)
    std = sigma * clip * rounding_inflation(clip, grid, sums.shape[1])
    noisy = sums + secure_gaussian_noise(sums.shape, std, grid) if sigma > 0 else sums
    return NoisyStatistics(sums=noisy, n=int(n), m=int(m), sigma=float(sigma), clip=float(clip))


def _ssp_result(noisy: Any, options: EvaluateOptions, spec: EvaluationSpec, *, accountant: str,
                spent: float) -> GPOPEResult:
    """The SSP estimate in the solver's result record (no iterates, no trace): the plain
    (unregularised) LSTD solve of the noisy sums on the supported features."""
    from gpope.core.gpope import GPOPEResult
    from gpope.core.intervals import ssp_values

    theta, _ = ssp_values(noisy, lambda th: th, regularize=False)
    private = options.seed is None
    return GPOPEResult(
        theta=theta, w=np.zeros_like(theta), theta_avg=None, sigma=noisy.sigma, epsilon=spent,
        delta=options.delta, accountant=accountant, sampling="poisson", iterations=1,
        clip=noisy.clip, private=private,
        privacy_note=("one Gaussian release of jointly clipped sufficient statistics and one of "
                      "residual second moments, noise from OS entropy" if private
                      else "fixed seed: reproducible, NOT private"),
    )


def _intervals(noisy: Any, moments: Any, spec: EvaluationSpec, theta: np.ndarray,
               values: np.ndarray, *, options: EvaluateOptions, ssp_run: bool,
               group_thetas: np.ndarray | None = None,
               ) -> tuple[Any, Any, tuple[float, float] | None]:
    """(value Interval, theta Interval, (private MSPBE, relative)) from the noisy releases; Nones
    without them. SSP: parametric bootstrap (:func:`gpope.core.intervals.bootstrap_interval`);
    GPOPE: the SSP interval anchored at GPOPE's estimate, or with ``group_thetas`` (K, n)
    (``--interval-groups``) the Student-t interval of the K disjoint-group estimates
    (:func:`gpope.core.intervals.group_interval`)."""
    from gpope.core.intervals import (
        anchored_interval,
        bootstrap_interval,
        group_interval,
        split_interval,
    )
    from gpope.core.ssp import private_mspbe

    if group_thetas is not None:  # --interval-groups: the spread of the K disjoint-group runs
        iv = group_interval(np.array([spec.reference_values(th) for th in group_thetas]),
                            level=options.ci_level)
        tiv = group_interval(group_thetas, level=options.ci_level)
        return iv, tiv, None if noisy is None else private_mspbe(theta, noisy)
    if noisy is None:
        return None, None, None

    k = len(values)
    _, boot = _noise_generators(options.seed)
    _, both = bootstrap_interval(
        noisy, moments, lambda th: np.concatenate([spec.reference_values(th), th]),
        rng=boot, level=options.ci_level, regularize=False)
    iv, tiv = split_interval(both, k)
    if not ssp_run:
        iv, tiv = anchored_interval(values, iv), anchored_interval(theta, tiv)
    return iv, tiv, private_mspbe(theta, noisy)


#: Above this many features the guard skips the private diagnostic's bootstrap (its cost grows as
#: n^3 per draw) and decides on the public diagnostic alone.
_GUARD_MAX_FEATURES = 512

#: EvaluateOptions fields logged under the name of their CLI flag (``--step-size`` -> step_size).
_FLAG_PARAMS = ("epsilon", "delta", "passes", "iterations", "clip", "step_size", "step_schedule",
                "step_offset", "averaging", "tail_fraction", "sampling", "trace_every")


def _record(
    spark: SparkSession, config: GpopeConfig, *, run_id: str, dataset: str, spec: EvaluationSpec,
    options: EvaluateOptions, result: GPOPEResult, released_theta: np.ndarray,
    values: np.ndarray, m: int, sigma: float, spent: float, accountant: str,
    batch_rate: float | None, path: str, spec_text: str | None,
    private_population: tuple[np.ndarray, np.ndarray, np.ndarray] | None,
    truth: Mapping[str, float] | None, intervals: Any, private_mspbe: tuple[float, float] | None,
    ssp: Mapping[str, Any] | None, tuning: Mapping[str, Any] | None = None,
) -> Any:
    """The record MLflow tracking reads (public settings, released outputs, lineage)."""
    from gpope.config import to_mapping
    from gpope.shell import lake
    from gpope.shell.pipeline.evaluation_record import (
        EvaluationRecord,
        Interval,
        StatisticsInput,
    )
    from gpope.shell.pipeline.public import public_cohort

    params: dict[str, Any] = {k: getattr(options, k) for k in _FLAG_PARAMS}
    params.update(batch_rate=batch_rate, statistics_path=path,
                  private_diagnostics=options.private_diagnostics,
                  statistics_share=0.0 if ssp is None else options.statistics_share,
                  interval_groups=0 if options.estimator == "ssp" else options.interval_groups)
    params.update(ssp or {})
    if intervals is not None:
        params["ci_level"] = float(intervals.level)
    metrics = {}
    if private_mspbe is not None:  # post-processing of the run's noisy-statistics release
        metrics = {"mspbe_private": float(private_mspbe[0]),
                   "relative_mspbe_private": float(private_mspbe[1])}
    table = lake.Lake.from_settings(spark, config.lake)
    ref = lake.TableRef("gold", "trajectory_stats", dataset)
    try:
        version: int | None = table.version(ref)
    except Exception:  # lineage is best effort: never fail a committed release over it
        version = None
    statistics = StatisticsInput(table=str(ref), location=table.location(ref), version=version,
                                 spec_id=spec.spec_id, by_name=table.by_name)
    return EvaluationRecord(
        run_id=run_id, dataset=dataset, spec=spec, estimator=options.estimator, params=params,
        epsilon=options.epsilon, delta=options.delta, epsilon_certified=spent,
        accountant=accountant, sigma=sigma, m=m, private=bool(result.private),
        seeded=options.seed is not None, privacy_note=result.privacy_note,
        theta=np.asarray(released_theta, dtype=np.float64),
        values=np.asarray(values, dtype=np.float64),
        theta_final=np.asarray(result.theta, dtype=np.float64),
        trace_steps=result.trace_steps, trace_theta=result.trace_theta,
        statistics=statistics,
        public_cohort=public_cohort(spec, n_trajectories=options.public_trajectories,
                                    max_length=options.public_max_length),
        truth=dict(truth) if truth else None,
        intervals=None if intervals is None else {
            name: Interval(float(intervals.lower[i]), float(intervals.upper[i]),
                           float(intervals.lower_bound[i]))
            for i, name in enumerate(spec.reference_names)
        },
        ci_level=None if intervals is None else float(intervals.level),
        private_population=private_population, spec_text=spec_text,
        config=to_mapping(config), metrics=metrics,
        tuning=None if tuning is None else dict(tuning),
    )


def _solve(
    spark: SparkSession,
    stats_df: Any,
    spec: EvaluationSpec,
    solver: Any,
    options: EvaluateOptions,
    *,
    m: int,
    n: int,
    sigma: float,
    spent: float,
    accountant: str,
    in_memory: bool,
    layout: str = "dense",
    tuning: tuple[Any, Any] | None = None,
) -> tuple[GPOPEResult, tuple[np.ndarray, np.ndarray, np.ndarray] | None, Any]:
    """Run the solver on the statistics; also return the private population (A, b, C) if asked
    for diagnostics (computed here, never released), and the private tuning's result (None
    without ``--tune private``)."""
    from gpope.core.gpope import run_gpope
    from gpope.shell.pipeline.driver import run_gpope_streamed
    from gpope.shell.pipeline.sampled import load_statistics, spark_fetcher

    rng = options.seed  # None: OS entropy inside the solver (private); int: reproducible
    if tuning is not None:  # planned only with in-memory statistics (plan_tuned_run)
        from gpope.core.private_tuning import tune_privately

        stats = load_statistics(stats_df, n, normalization=spec.normalization, layout=layout)
        tuned = tune_privately(stats, solver, tuning[0], tuning[1], rng)
        pop = stats.population() if options.private_diagnostics else None
        return tuned.result, pop, tuned
    if options.secure_noise and not in_memory:
        raise ConfigError(
            f"--secure-noise runs on the in-memory path only, but the sampled statistics exceed "
            f"in_memory_limit_mb={options.in_memory_limit_mb}; raise it (conf evaluation."
            "in_memory_limit_mb) or run without secure noise."
        )
    if in_memory:
        stats = load_statistics(stats_df, n, normalization=spec.normalization, layout=layout)
        result = run_gpope(stats, solver, rng)
        pop = stats.population() if options.private_diagnostics else None
        return result, pop, None
    fetch = spark_fetcher(spark, stats_df, n, normalization=spec.normalization)
    result = run_gpope_streamed(
        fetch, solver, rng, m=m, n=n, sigma=sigma, epsilon=spent, accountant=accountant,
        max_rows_per_fetch=options.rows_per_fetch,
    )
    pop = _spark_population(stats_df, n, m) if options.private_diagnostics else None
    return result, pop, None


def _check_interval_groups(options: EvaluateOptions, *, layout: str) -> None:
    """Refuse ``--interval-groups`` where its privacy argument or its path does not hold."""
    k = options.interval_groups
    if options.sampling != "poisson":
        raise ConfigError(
            f"--interval-groups {k} needs --sampling poisson: its K runs on disjoint patient "
            "groups cost one run only under add/remove-one adjacency (parallel composition); with "
            f"sampling {options.sampling!r} (replace-one adjacency) a replaced patient may move "
            "between two groups and the K runs would cost two runs. Use --sampling poisson or "
            "--interval-groups 0."
        )
    if options.tune != "none":
        raise ConfigError(
            f"--interval-groups {k} does not combine with --tune {options.tune} (the tuning's "
            "releases are made on the whole data set); use one of them."
        )
    if layout == "stream":
        raise ConfigError(
            f"--interval-groups {k} loads each group's statistics into driver memory, but they "
            f"exceed in_memory_limit_mb={options.in_memory_limit_mb}; raise it (conf "
            "evaluation.in_memory_limit_mb) or run with --interval-groups 0."
        )


def _patient_groups(spark: SparkSession, config: GpopeConfig, *, dataset: str, m: int,
                    groups: int) -> np.ndarray:
    """(m,) group 0..groups-1 of each traj_index, from the public hash of its patient id
    (:func:`gpope.core.intervals.interval_groups`; the silver transitions hold the mapping)."""
    from gpope.core.intervals import interval_groups
    from gpope.shell import lake
    from gpope.shell.lake.manifest import read_pinned

    target = lake.Lake.from_settings(spark, config.lake)
    transitions, _ = read_pinned(target, lake.TableRef("silver", "transitions", dataset))
    table = transitions.select("traj_index", "patient_id").distinct().toArrow()
    index = table.column("traj_index").to_numpy().astype(np.int64)
    if table.num_rows != m or not np.array_equal(np.sort(index), np.arange(m)):
        raise DataError(
            f"--interval-groups: the transitions of {dataset!r} hold {table.num_rows} "
            f"(traj_index, patient_id) pairs, the statistics {m} trajectories 0..{m - 1}; the "
            "statistics are older than the transitions. Re-run `gpope stats`, then evaluate again."
        )
    out = np.empty(m, dtype=np.int64)
    out[index] = interval_groups(table.column("patient_id").to_pylist(), groups)
    return out


def _solve_groups(spark: SparkSession, stats_df: Any, spec: EvaluationSpec, solver: Any,
                  options: EvaluateOptions, *, groups: np.ndarray, n: int, spent: float,
                  ) -> tuple[GPOPEResult, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """``--interval-groups K``: GPOPE once per disjoint group with the run's settings (its
    Poisson rate applies to the group, each step normalised by the public expected group size
    q m / K, not the group's actual size); returns (the result with theta, w, the averaged iterate
    and the trace = the means over the groups, (K, n) group estimates, private population)."""
    from gpope.core.gpope import run_gpope
    from gpope.shell.pipeline.sampled import spark_fetcher

    fetch = spark_fetcher(spark, stats_df, n, normalization=spec.normalization)
    # every group normalises by the PUBLIC expected group size m / K, never by its actual size
    # (only m is public: the K group sizes would otherwise be released through the iterates)
    k = options.interval_groups  # every group, the last included: an empty one is an error
    solver = dataclasses.replace(solver, normalizing_size=len(groups) / k)
    # one Generator for all groups: each run spawns its own child streams (seeded: reproducible)
    rng = None if options.seed is None else np.random.default_rng(options.seed)
    results = []
    for g in range(k):
        ids = np.flatnonzero(groups == g)
        if len(ids) == 0:
            raise DataError(
                f"--interval-groups {options.interval_groups}: group {g} has no patients; use "
                "fewer groups for this data set."
            )
        results.append(run_gpope(fetch(ids), solver, rng))
    released = np.array([r.theta_avg if r.theta_avg is not None else r.theta for r in results])

    def mean(name: str) -> np.ndarray | None:
        parts = [getattr(r, name) for r in results]
        return None if parts[0] is None else np.mean(parts, axis=0)

    first = results[0]
    result = dataclasses.replace(
        first, theta=mean("theta"), w=mean("w"), theta_avg=mean("theta_avg"), epsilon=spent,
        trace_theta=mean("trace_theta"), trace_w=mean("trace_w"),
        private=all(r.private for r in results),
        privacy_note=f"{first.privacy_note}; mean of {len(results)} runs on disjoint patient "
        "groups (one run's cost: parallel composition)")
    pop = None
    if options.private_diagnostics:
        pop = _spark_population(stats_df, n, len(groups))
    return result, released, pop


def _spark_population(stats_df: Any, n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Means of A, b, C over trajectories, aggregated in Spark (private; diagnostics only)."""
    from pyspark.sql import functions as F

    out = []
    for name, width in (("A", n * n), ("b", n), ("C", n * n)):
        sums = (
            stats_df.select(F.posexplode(name).alias("i", "v"))
            .groupBy("i")
            .agg(F.sum("v").alias("s"))
            .toArrow()
        )
        vec = np.zeros(width)
        vec[sums.column("i").to_numpy()] = sums.column("s").to_numpy()
        out.append(vec / m)
    return out[0].reshape(n, n), out[1], out[2].reshape(n, n)

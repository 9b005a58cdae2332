"""The public settings of one private evaluation and their resolution (stage a of
:mod:`gpope.shell.pipeline.evaluate`).

:class:`EvaluateOptions` holds what the command line, the configuration and the spec's tuned
``evaluation:`` block say; :meth:`EvaluateOptions.resolve` fills every solver setting once the
public m is known (command line > spec > conf). The checks here read public inputs only: the
``paper`` accountant's refusal, ``delta`` against 1/m, and a fixed seed only on a simulated dataset.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError

if TYPE_CHECKING:
    from gpope.config import EvaluationSettings, GpopeConfig
    from gpope.core.spec import EvaluationSpec

__all__ = [
    "INVALID_ACCOUNTING_REFUSAL",
    "EvaluateOptions",
    "check_delta_against_m",
    "check_seed_allowed",
]

#: The one message that refuses the ``paper`` accountant for a release.
INVALID_ACCOUNTING_REFUSAL = (
    "The 'paper' accountant is not a valid privacy bound (the paper's formula drops terms: at its "
    "settings the true epsilon is several times larger), so it cannot certify a private release. "
    "Use --accountant auto (or rdp/pld), or pass --allow-invalid-accounting to run it anyway: "
    "the run is then NOT private everywhere, labelled 'not a valid bound', and the ledger charges "
    "a rigorous RDP bound of its mechanism."
)

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
        ssp_clip_quantile: that quantile (None: the spec's ``evaluation:`` block, then the
            configuration; filled by :meth:`resolve`).
        moments_share: share of the noisy-statistics release's budget (zCDP, 1/sigma^2) spent on
            the second release of the residual second moments that the intervals need.
        statistics_share: gpope runs: share of (epsilon, delta) spent on the noisy-statistics
            release (private MSPBE, intervals); 0 disables it. ssp runs spend all on it.
        policy_value_share: share of (epsilon, delta) spent on the policy value release
            (J(target), J(behaviour), their contrast; :mod:`gpope.core.policy_value_release`);
            0 disables it. Runs built from the configuration (:meth:`from_settings`: the CLI,
            ``gpope.api``) take ``evaluation.policy_value_share`` (0.3 by default).
        ci_level: level of the two-sided intervals and of the one-sided lower bound.
        ssp_identification: the identification test of the SSP-type intervals (an ssp run's,
            and the statistics-share interval a gpope run's hull rests on): unbounded where the
            noisy statistics cannot exclude a singular summed A
            (:func:`gpope.core.intervals.separated_from_singular`); False: the bootstrap
            interval whatever A (no guarantee there). Default: the configuration's.
        interval_groups: gpope runs: 0 (the interval is the hull of the noisy-statistics
            release's SSP interval and the GPOPE value), or K >= 2: split the patients into K
            disjoint groups by a public hash of the patient id, run GPOPE once per group with the
            run's settings, release the mean of the K group estimates and the Student-t interval
            of their spread (:func:`gpope.core.intervals.group_interval`). Same privacy cost as
            one run under add/remove adjacency (parallel composition); Poisson sampling only.
            None: the rule of the spec's ``evaluation:`` block, else of the configuration (K
            where the public m and m epsilon meet the layer's ``interval_groups_min_patients`` and
            ``interval_groups_min_m_epsilon``, and the run is compatible: Poisson sampling, no
            private tuning, statistics in memory; else 0), filled by :meth:`resolve`. An
            explicit K is used as given (and refused where it does not hold).
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
    ssp_clip_quantile: float | None = None
    moments_share: float = 0.1
    statistics_share: float = 0.1
    policy_value_share: float = 0.0
    ci_level: float = 0.95
    ssp_identification: bool = True
    interval_groups: int | None = None
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
        check_number(o, "ssp_clip_quantile", self.ssp_clip_quantile, gt=0.0, le=1.0,
                     allow_none=True)
        check_number(o, "moments_share", self.moments_share, gt=0.0, lt=1.0)
        check_number(o, "statistics_share", self.statistics_share, ge=0.0, lt=1.0)
        check_number(o, "policy_value_share", self.policy_value_share, ge=0.0, lt=1.0)
        check_number(o, "ci_level", self.ci_level, gt=0.0, lt=1.0)
        if not isinstance(self.ssp_identification, bool):
            raise ConfigError(
                f"The 'ssp_identification' option of {o} must be True or False. Got "
                f"{self.ssp_identification!r} instead.")
        from gpope.core.intervals import check_interval_groups

        if self.interval_groups is not None:
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

        The SOLVER and INTERVAL settings of ``settings`` (:data:`gpope.core.operating.SOLVER_KEYS`,
        :data:`~gpope.core.operating.INTERVAL_KEYS`) are NOT copied: :meth:`resolve` applies them
        as the lowest layer, below the spec's ``evaluation:`` block. Its other settings
        (estimator, shares, level, memory...) are copied.
        """
        from gpope.core.operating import INTERVAL_KEYS, SOLVER_KEYS

        base: dict[str, Any] = {}
        if settings is not None:
            base = {f.name: getattr(settings, f.name) for f in dataclasses.fields(cls)
                    if hasattr(settings, f.name) and f.name not in (*SOLVER_KEYS, *INTERVAL_KEYS)}
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
            passes = touched / m, batch_size = q m, ssp_clip_quantile and interval_groups;
            provenance: ``source`` of each setting ("options", "spec", "conf"), the tuned point
            used, the spec's tuning record, ``interval_note``: why a layer's interval_groups was
            not applied, or None).
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
        spec_iv = spec.evaluation.interval_settings() if spec.evaluation is not None else {}
        quantile, source["ssp_clip_quantile"] = (
            (self.ssp_clip_quantile, "options") if self.ssp_clip_quantile is not None
            else (spec_iv["ssp_clip_quantile"], "spec") if "ssp_clip_quantile" in spec_iv
            else (settings.ssp_clip_quantile, "conf"))
        groups, note = self._interval_groups(m=m, sampling=sampling, spec_iv=spec_iv,
                                             conf_iv=settings.interval_settings(), source=source)
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
            ssp_clip_quantile=float(quantile),
            interval_groups=groups,
        )
        info = {
            "source": source,
            "tuned_point": None if point is None else point.to_dict(),
            "spec_has_evaluation_block": spec.evaluation is not None,
            "tuning": None if spec.evaluation is None else dict(spec.evaluation.tuning),
            "touched_trajectories": touched,
            "interval_note": note,
        }
        return out, info

    def _interval_groups(self, *, m: int, sampling: str, spec_iv: dict[str, Any],
                         conf_iv: dict[str, Any], source: dict[str, str]) -> tuple[int, str | None]:
        """(K, why a layer's K was not applied) of :meth:`resolve`: the explicit K as given,
        else the first layer (spec, conf) that sets ``interval_groups``, with its thresholds
        (:func:`gpope.core.operating.interval_groups_for`) and only where the run can take it."""
        from gpope.core.operating import interval_groups_for

        if self.interval_groups is not None:
            source["interval_groups"] = "options"
            return int(self.interval_groups), None
        layer, source["interval_groups"] = ((spec_iv, "spec") if "interval_groups" in spec_iv
                                            else (conf_iv, "conf"))
        k, note = interval_groups_for(
            layer["interval_groups"], m=m, epsilon=self.epsilon,
            min_patients=layer.get("interval_groups_min_patients"),
            min_m_epsilon=layer.get("interval_groups_min_m_epsilon"))
        if k and self.estimator == "ssp":
            return 0, None  # an ssp run's interval is its own
        if k and (sampling != "poisson" or self.tune != "none"):
            return 0, (f"interval_groups {k} ({source['interval_groups']} default) not applied: "
                       f"it needs sampling poisson and no private tuning (sampling {sampling!r}, "
                       f"tune {self.tune!r}); the interval is the hull of the noisy-statistics "
                       "interval and the value")
        return k, note


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


def check_seed_allowed(config: GpopeConfig, dataset: str) -> None:
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


"""The settings of one private evaluation: one type, its constraints as data, one resolver.

:class:`RunSettings` names every public setting of ``gpope evaluate`` once; its constraints are
data (:data:`gpope.core.evaluation.constraints.CONSTRAINTS`, as scikit-learn's parameter
constraints) checked by one function wherever a value enters: the configuration's
``evaluation:`` section, the spec's ``evaluation:`` block (a ``"spec"`` :class:`SettingsLayer`)
and the command line or caller (an ``"options"`` layer). :func:`resolve_settings` applies the
layers, command line > spec block > configuration, once the public m is known, and records where
each setting came from; :func:`check_combination` refuses the combinations no run may take.

Everything here is public configuration: nothing is read from private data (m is public).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpope.core.evaluation.constraints import CONSTRAINTS, RUN_ONLY, check_setting
from gpope.core.policy_value_settings import PolicyValueSettings
from gpope.core.tuning.private_settings import PrivateTuningSettings
from gpope.core.untuned.settings import BehaviourSettings, UntunedSettings
from gpope.errors import ConfigError

__all__ = ["INVALID_ACCOUNTING_REFUSAL", "NESTED_BLOCKS",
           "PrivateTuningSettings", "RunSettings", "SettingsLayer", "check_combination",
           "check_delta_against_m", "resolve_settings"]

#: The one message that refuses an accountant that is not a valid bound (``paper``) for a
#: release; ``{accountant}`` and ``{why}`` come from its registry entry.
INVALID_ACCOUNTING_REFUSAL = (
    "The {accountant!r} accountant is not a valid privacy bound ({why}), so it cannot certify a "
    "private release. Use --accountant auto (or rdp/pld), or pass --allow-invalid-accounting to "
    "run it anyway: the run is then NOT private everywhere, labelled 'not a valid bound', and the "
    "ledger charges a rigorous RDP bound of its mechanism."
)


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """Every public setting of one private evaluation: the configuration's ``evaluation:`` section
    with the packaged defaults, each setting documented where it is set (``conf/default.yaml``) and
    constrained in :data:`~gpope.core.evaluation.constraints.CONSTRAINTS`; resolved, one run's
    settings. The solver and interval settings of the configuration apply only where neither the
    command line nor the spec's block sets them (:func:`resolve_settings`).

    Run only (never from the configuration, :data:`~gpope.core.evaluation.constraints.RUN_ONLY`):
    ``epsilon``, ``delta`` (the spend reserved in the ledger), ``seed`` (None: OS entropy, private;
    an int: reproducible, NOT private) and the ``allow_*`` overrides (the ``paper`` accountant, a
    seed on real data, statistics older than the latest ingest). Not in the packaged file:
    ``path`` ("auto" by the public size, or "memory" / "stream" forced), ``private_diagnostics``
    (also log MSPBE/LSTD of the private statistics, tagged private), ``public_trajectories`` and
    ``public_max_length`` (the fresh public cohort for MSPBE and the public clip bounds; 0
    disables) and ``rows_per_fetch`` (sampled rows per Spark fetch on the streamed path)."""

    epsilon: float | None = None
    delta: float | None = None
    passes: float | None = 20.0
    iterations: int | None = 20000
    batch_rate: float | None = None
    batch_size: float | None = None
    clip: float | None = 1.0
    step_size: float | None = 0.5
    step_schedule: Literal["constant", "inverse"] | None = "inverse"
    step_offset: float | None = None
    step_offset_fraction: float | None = 0.1
    averaging: Literal["none", "uniform", "tail"] | None = "tail"
    tail_fraction: float | None = 0.5
    sampling: Literal["uniform", "poisson"] | None = "poisson"
    accountant: str | None = "auto"
    trace_every: int | None = None
    seed: int | None = None
    in_memory_limit_mb: int | None = 2048
    path: Literal["auto", "memory", "stream"] = "auto"
    private_diagnostics: bool = False
    public_trajectories: int = 100
    public_max_length: int | None = None
    rows_per_fetch: int = 4096
    estimator: str = "gpope"
    ssp_clip: float | None = None
    ssp_clip_quantile: float | None = 0.99
    moments_share: float = 0.1
    statistics_share: float = 0.1
    policy_value_share: float = 0.3
    policy_value: PolicyValueSettings = field(default_factory=PolicyValueSettings)
    ci_level: float = 0.95
    ssp_identification: bool = True
    interval_groups: int | None = 0
    interval_groups_min_patients: int | None = 0
    interval_groups_min_m_epsilon: float | None = 0.0
    tune: Literal["none", "private"] = "none"
    private_tuning: PrivateTuningSettings = field(default_factory=PrivateTuningSettings)
    untuned: UntunedSettings = field(default_factory=UntunedSettings)
    behaviour: BehaviourSettings = field(default_factory=BehaviourSettings)
    secure_noise: bool = False
    noise_grid: float | None = None
    allow_invalid_accounting: bool = False
    allow_not_private: bool = False
    allow_stale_stats: bool = False

    def __post_init__(self) -> None:
        owner = "RunSettings"
        for name in CONSTRAINTS:
            value = check_setting(owner, name, getattr(self, name))
            if value is not None:
                object.__setattr__(self, name, value)
        if self.policy_value.share != PolicyValueSettings.share:
            raise ConfigError(
                "The release's share is the 'policy_value_share' setting, not "
                "'policy_value.share': set evaluation.policy_value_share (0 disables the "
                f"release) and drop policy_value.share ({self.policy_value.share!r}).")

    def policy_value_settings(self) -> PolicyValueSettings:
        """The ``policy_value`` block with share ``policy_value_share`` (the block as it is where
        that share is 0: the audit checks the mechanism at the block's default share)."""
        if not self.policy_value_share:
            return self.policy_value
        return dataclasses.replace(self.policy_value, share=self.policy_value_share)

    def layer(self, keys: tuple[str, ...]) -> dict[str, Any]:
        """The values of ``keys`` (None = not set), as a layer mapping."""
        return {k: getattr(self, k) for k in keys}

    def solver_settings(self) -> dict[str, Any]:
        """The solver keys (:data:`gpope.core.gpope.operating.SOLVER_KEYS`) as a layer mapping."""
        from gpope.core.gpope.operating import SOLVER_KEYS

        return self.layer(SOLVER_KEYS)

    def interval_settings(self) -> dict[str, Any]:
        """The interval keys (:data:`gpope.core.gpope.operating.INTERVAL_KEYS`) as a layer mapping."""
        from gpope.core.gpope.operating import INTERVAL_KEYS

        return self.layer(INTERVAL_KEYS)


#: The nested settings blocks of :class:`RunSettings`: set in the configuration only (no spec or
#: command-line layer), so the resolver's provenance names them ``"conf"``.
NESTED_BLOCKS = tuple(f.name for f in dataclasses.fields(RunSettings)
                      if isinstance(f.default_factory, type)
                      and dataclasses.is_dataclass(f.default_factory))


@dataclass(frozen=True)
class SettingsLayer:
    """One layer of a run's settings: a validated partial mapping of :class:`RunSettings` names and
    its ``source`` (``"options"``: the command line or caller; ``"spec"``: a spec's block). A spec
    layer also carries the per-epsilon (clip, step size) points tuned on ``tuning['patients']``
    public trajectories (:class:`gpope.core.gpope.operating.TunedPoint`) and the public tuning and
    interval studies behind them (recorded, never interpreted but ``patients`` and ``max_length``).
    """

    values: Mapping[str, Any]
    source: str = "options"
    tuned: tuple[Any, ...] = ()
    tuning: Mapping[str, Any] = field(default_factory=dict)
    intervals_provenance: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        owner = "RunSettings" if self.source != "spec" else "evaluation"
        clean = {k: check_setting(owner, k, v) for k, v in dict(self.values).items()
                 if v is not None}
        object.__setattr__(self, "values", clean)
        if self.source == "spec":
            from gpope.core.gpope.operating import check_spec_layer

            object.__setattr__(self, "tuned", check_spec_layer(
                clean, tuple(self.tuned), self.tuning, self.intervals_provenance))
            object.__setattr__(self, "tuning", dict(self.tuning))
            object.__setattr__(self, "intervals_provenance", dict(self.intervals_provenance))
        elif self.tuned or self.tuning or self.intervals_provenance:
            raise ConfigError("Only a spec's evaluation: layer (source 'spec') carries tuned "
                              "points and their provenance.")

    @classmethod
    def of(cls, **values: Any) -> SettingsLayer:
        """The layer of the given settings (None values: not set)."""
        return cls(values)

    @classmethod
    def from_spec_block(cls, data: Mapping[str, Any], *, where: str = "evaluation"
                        ) -> SettingsLayer:
        """The ``"spec"`` layer of a spec's YAML ``evaluation:`` block.

        Raises:
            ConfigError: an unknown key or an invalid value, naming ``where``.
        """
        from gpope.core.gpope.operating import parse_spec_block

        values, tuned, tuning, provenance = parse_spec_block(data, where)
        try:
            return cls(values, "spec", tuned, tuning, provenance)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        """The YAML form; ``from_spec_block(to_dict())`` gives an equal layer."""
        from gpope.core.gpope.operating import INTERVAL_KEYS, SOLVER_KEYS

        d: dict[str, Any] = {k: self.values[k] for k in (*SOLVER_KEYS, *INTERVAL_KEYS)
                             if k in self.values}
        if self.intervals_provenance:
            d["intervals_provenance"] = dict(self.intervals_provenance)
        if self.tuned:
            d["tuned"] = [p.to_dict() for p in self.tuned]
        if self.tuning:
            d["tuning"] = dict(self.tuning)
        return d

    def get(self, name: str, default: Any = None) -> Any:
        """The value of ``name``, or ``default`` when this layer does not set it."""
        return self.values.get(name, default)

    def replace(self, **values: Any) -> SettingsLayer:
        """This layer with ``values`` set over it (None values unset nothing)."""
        return dataclasses.replace(
            self, values={**self.values, **{k: v for k, v in values.items() if v is not None}})

    @property
    def public_size(self) -> int | None:
        """m_pub, the public cohort size of the tuned points (None when not recorded)."""
        v = self.tuning.get("patients")
        return None if v is None else int(v)

    def interval_settings(self) -> dict[str, Any]:
        """The interval settings this layer sets (:data:`gpope.core.gpope.operating.INTERVAL_KEYS`)."""
        from gpope.core.gpope.operating import INTERVAL_KEYS

        return {k: self.values[k] for k in INTERVAL_KEYS if k in self.values}

    def select(self, m: int, epsilon: float) -> tuple[dict[str, Any], Any]:
        """The layer's solver settings for a run of m trajectories at ``epsilon``, with the
        tuned point nearest in m epsilon (:func:`gpope.core.gpope.operating.select_tuned`)."""
        from gpope.core.gpope.operating import select_tuned

        return select_tuned(self.values, self.tuned, self.public_size, m, epsilon)

    def outside_tuned(self, m: int, epsilon: float, *, max_length: int | None = None,
                      factor: float = 2.0) -> str | None:
        """Why a run lies outside what was tuned, or None
        (:func:`gpope.core.gpope.operating.outside_tuned`)."""
        from gpope.core.gpope.operating import outside_tuned

        return outside_tuned(self.tuned, self.tuning, m, epsilon, max_length=max_length,
                             factor=factor)


#: Why a default ``interval_groups`` rule is not applied on the streamed path.
STREAMED_GROUPS_NOTE = (
    "interval_groups {k} (default) not applied: the statistics exceed in_memory_limit_mb={limit} "
    "and stream from Spark; the interval is the hull of the noisy-statistics interval and the "
    "value")


#: Why ``secure_noise`` needs the RDP accountant and (for GPOPE) uniform sampling.
SECURE_NOISE_REFUSAL = (
    "--secure-noise draws discrete Gaussian noise, whose privacy is certified only by RDP "
    "(Canonne, Kamath, Steinke 2020: its Renyi divergences are at most the continuous "
    "Gaussian's) and, for subsampled GPOPE steps, only under --sampling uniform (the "
    "without-replacement RDP bound of Wang, Balle, Kasiviswanathan 2019 holds for any base "
    "mechanism; the PLD accountant and the Poisson RDP bound are computed for the continuous "
    "Gaussian). Got sampling {sampling!r}, accountant {accountant!r}. Use --secure-noise with "
    "--sampling uniform --accountant rdp (or auto), or with --estimator ssp --accountant rdp."
)


def check_combination(s: Any) -> None:
    """Refuse the combinations of settings no run may take (public settings only); the one place
    that refuses the ``paper`` accountant without ``allow_invalid_accounting``.

    Raises:
        ConfigError: the ``paper`` accountant unless allowed; ``secure_noise`` with a seed, with
            ``tune`` other than "none", with ``path`` "stream", or with an accountant whose
            guarantee does not cover the discrete Gaussian.
    """
    from gpope.core.accounting.registry import accountant_info, not_a_valid_bound

    name = getattr(s, "accountant", None) or "auto"
    if not_a_valid_bound(name) and not s.allow_invalid_accounting:
        raise ConfigError(INVALID_ACCOUNTING_REFUSAL.format(
            accountant=name, why=accountant_info(name).limitation_of_bound))
    if getattr(s, "secure_noise", False):
        from gpope.core.mechanisms.secure_noise import check_no_seed

        check_no_seed(s.seed, "gpope evaluate --secure-noise")
        if s.tune != "none":
            raise ConfigError(
                "The 'secure_noise' setting of gpope evaluate does not support "
                f"tune={s.tune!r} yet; run with tune='none'.")
        if s.path == "stream":
            raise ConfigError(
                "The 'secure_noise' setting of gpope evaluate runs on the in-memory path only; got "
                "path='stream'. Use path 'auto' or 'memory'.")
        from gpope.core.accounting.registry import resolve_accountant

        sampling = getattr(s, "sampling", None) or "poisson"
        from gpope.core.estimators import get

        accountant = resolve_accountant(name, sampling)
        if (not accountant_info(accountant).discrete_gaussian
                or not get(s.estimator).secure_noise_ok(sampling)):
            raise ConfigError(SECURE_NOISE_REFUSAL.format(sampling=sampling,
                                                          accountant=accountant))


def check_delta_against_m(delta: float, m: int) -> None:
    """Refuse ``delta >= 1/m`` (it allows publishing one random patient's record outright) and
    warn above ``1/(10 m)``."""
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


def _check_conf(conf: RunSettings) -> None:
    """The configuration layer: no run-only setting, and a budget and step offset that the
    layer determines consistently (the same rules as a spec's block)."""
    from gpope.core.gpope.operating import BUDGET_KEYS, OFFSET_KEYS, check_layer_rules

    given = [k for k in RUN_ONLY if getattr(conf, k) not in (None, False)]
    if given:
        raise ConfigError(
            f"The configuration's evaluation: section sets {', '.join(given)}, which belong to one "
            "run: pass them on the command line (or to gpope.api.evaluate) instead.")
    check_layer_rules(conf.layer((*BUDGET_KEYS, *OFFSET_KEYS)),
                      "The configuration's evaluation: section")


def merged_view(conf: RunSettings, flags: SettingsLayer) -> RunSettings:
    """The configuration with the caller's settings over it (no spec block, no m): what the
    checks before Spark see."""
    _check_conf(conf)
    view = dataclasses.replace(conf, **dict(flags.values))
    check_combination(view)
    return view


class SpecWithBlock(Protocol):
    """What the resolver reads of a spec: its ``evaluation:`` block or None (structural: the spec
    module imports this one)."""

    @property
    def evaluation(self) -> SettingsLayer | None: ...


def resolve_settings(
    conf: RunSettings, spec: SpecWithBlock, flags: SettingsLayer, *, m: int,
    recorded_max_length: int | None = None, layout: str | None = None,
) -> tuple[RunSettings, dict[str, Any]]:
    """One run's settings for m trajectories: command line > spec block > configuration, with the
    estimator chosen or the one that claims the run (:func:`gpope.core.estimators.claiming`);
    resolved once, never patched afterwards. ``recorded_max_length`` (the public episode cap
    ``gpope simulate`` recorded) stands in for an unset ``public_max_length``; a default
    ``interval_groups`` rule yields to a ``"stream"`` ``layout``.

    Returns (the resolved settings, the provenance: ``source`` of every setting, the tuned point,
    the spec's tuning record, ``touched_trajectories``, ``interval_note``).

    Raises:
        ConfigError: an invalid combination, a missing epsilon or delta, or a budget that the
            layers do not determine.
    """
    from gpope.core import estimators
    from gpope.core.gpope.operating import (
        INTERVAL_KEYS,
        SOLVER_KEYS,
        merge_layers,
        resolve_budget,
        resolve_step_offset,
    )

    base = merged_view(conf, flags)
    if flags.get("epsilon") is None or flags.get("delta") is None:
        raise ConfigError("A run needs its spend: give epsilon and delta (--epsilon, --delta).")
    epsilon = float(flags.get("epsilon"))
    mine = {k: flags.get(k) for k in SOLVER_KEYS}
    block, point = ({}, None)
    if spec.evaluation is not None:
        block, point = spec.evaluation.select(m, epsilon)
    merged = merge_layers(mine, block, conf.solver_settings())
    source = {k: "options" if k in flags.values else "conf" for k in CONSTRAINTS}
    source.update(dict.fromkeys(NESTED_BLOCKS, "conf"))  # no spec or command-line layer
    for k in merged:
        source[k] = ("options" if mine.get(k) is not None
                     else "spec" if block.get(k) is not None else "conf")
    claimed = estimators.claiming(spec.evaluation is not None, source)
    if claimed is not None:
        base = dataclasses.replace(base, estimator=claimed)
    estimator = estimators.get(base.estimator)
    sampling = merged.get("sampling", "poisson")
    N, q = resolve_budget(m=m, sampling=sampling, passes=merged.get("passes"),
                          batch_size=merged.get("batch_size"), iterations=merged.get("iterations"),
                          batch_rate=merged.get("batch_rate"))
    offset = resolve_step_offset(iterations=N, step_offset=merged.get("step_offset"),
                                 step_offset_fraction=merged.get("step_offset_fraction"))
    touched = N * q * m if q is not None else float(N)
    spec_iv = spec.evaluation.interval_settings() if spec.evaluation is not None else {}
    quantile, source["ssp_clip_quantile"] = (
        (flags.get("ssp_clip_quantile"), "options") if flags.get("ssp_clip_quantile") is not None
        else (spec_iv["ssp_clip_quantile"], "spec") if "ssp_clip_quantile" in spec_iv
        else (conf.ssp_clip_quantile, "conf"))
    groups, note = _interval_groups(base, m=m, epsilon=epsilon, sampling=sampling,
                                    layers=((flags.values, "options"), (spec_iv, "spec"),
                                            (conf.layer(INTERVAL_KEYS), "conf")), source=source,
                                    streamed=layout == "stream")
    out = dataclasses.replace(
        base,
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
        ssp_clip_quantile=float(quantile),
        interval_groups=groups,
        public_max_length=(base.public_max_length if base.public_max_length is not None
                           else recorded_max_length),
    )
    if _without_policy_value(spec, out):
        out = dataclasses.replace(out, policy_value_share=0.0)
    check_combination(out)
    estimator.check(spec, out)
    info = {
        "source": source,
        "tuned_point": None if point is None else point.to_dict(),
        "spec_has_evaluation_block": spec.evaluation is not None,
        "tuning": None if spec.evaluation is None else dict(spec.evaluation.tuning),
        "touched_trajectories": touched,
        "interval_note": note,
    }
    return out, info


def _interval_groups(s: RunSettings, *, m: int, epsilon: float, sampling: str,
                     layers: tuple[tuple[Mapping[str, Any], str], ...],
                     source: dict[str, str], streamed: bool = False) -> tuple[int, str | None]:
    """(K, why a layer's K was not applied): the caller's K as given, else the rule of the first
    layer (spec, conf) that sets ``interval_groups``, with its thresholds
    (:func:`gpope.core.gpope.operating.interval_groups_for`), and only where the run can take it."""
    from gpope.core.gpope.operating import interval_groups_for

    layer, where = next(((lay, w) for lay, w in layers if lay.get("interval_groups") is not None),
                        ({"interval_groups": 0}, "conf"))
    source["interval_groups"] = where
    if where == "options":
        return int(layer["interval_groups"]), None
    k, note = interval_groups_for(
        layer["interval_groups"], m=m, epsilon=epsilon,
        min_patients=layer.get("interval_groups_min_patients"),
        min_m_epsilon=layer.get("interval_groups_min_m_epsilon"))
    from gpope.core.estimators import get

    if k and not get(s.estimator).interval_groups:
        return 0, None  # the estimator's interval is its own
    if k and (sampling != "poisson" or s.tune != "none"):
        return 0, (f"interval_groups {k} ({where} default) not applied: it needs sampling "
                   f"poisson and no private tuning (sampling {sampling!r}, tune {s.tune!r}); the "
                   "interval is the hull of the noisy-statistics interval and the value")
    if k and streamed:
        return 0, STREAMED_GROUPS_NOTE.format(k=k, limit=s.in_memory_limit_mb)
    return k, note


def _without_policy_value(spec: Any, s: RunSettings) -> bool:
    """A state-action fit whose behaviour is not estimated releases no policy value: its theta is
    over (state, action), so no direct J(target), and no logged ratio for the identified set."""
    from gpope.core.estimators import get

    fm = getattr(spec, "feature_map", None)
    if fm is None or fm.to_dict().get("kind") != "state_action":
        return False
    return not (get(s.estimator).estimates_behaviour
                and fm.base.to_dict().get("kind") == "tabular")

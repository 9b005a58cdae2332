"""The evaluation spec: what is being evaluated, independent of any data.

An :class:`EvaluationSpec` fixes everything that turns a dataset's transitions into per-trajectory
statistics and theta into released values: the feature map, the target policy, the discount gamma,
the normalisation of the statistics (with its public length scale) and the named, public reference
states at which value estimates are released. All of it is public configuration (docs/ARCHITECTURE.md
section 4). The shell reads a YAML file (``conf/specs/*.yaml``) into a mapping and builds the spec
with :meth:`EvaluationSpec.from_mapping`; the core never sees the YAML.

The spec id is a short, stable hash (12 hex digits of SHA-256) of the canonical JSON of the parts
that determine the statistics: feature map, target policy, gamma, normalisation, length scale,
reward scale and, when set, the public data bounds. The statistics table is partitioned by it, so
two specs that differ only by name, domain or reference states share statistics.

The YAML form, key by key: docs/OWN_DATA.md, "The evaluation spec". Its ``evaluation:`` block
is a ``"spec"`` :class:`gpope.core.evaluation.settings.SettingsLayer`, not part of the spec id
(it changes how statistics are used, not what they are).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gpope.core.bounds import check_bounds, check_return_bounds
from gpope.core.validation import check_choice, check_number
from gpope.errors import ConfigError

__all__ = ["EvaluationSpec", "Normalization", "canonical_json", "declared_variables"]

Normalization = Literal["transition", "trajectory_mean"]
_NORMALIZATIONS = ("transition", "trajectory_mean")
_STATS_KEYS = ("feature_map", "target_policy", "gamma", "normalization", "length_scale",
               "reward_scale")
#: Statistics-defining keys hashed into the spec id only when set (older specs keep their ids).
_OPTIONAL_STATS_KEYS = ("importance_weight_bound", "reward_bounds")
_KEYS = ("name", "domain", "gamma", "normalization", "length_scale", "reward_scale", "feature_map",
         "target_policy", "reference_states", "policy_name", "importance_weight_bound",
         "reward_bounds", "return_bounds", "evaluation")


def canonical_json(obj: Any) -> str:
    """Canonical JSON of a plain object: sorted keys, no spaces, numpy values as Python numbers."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_plain, allow_nan=False)


def declared_variables(feature_map: Any, policy: Any, *, where: str = "spec") -> Any:
    """The discrete variables (:class:`gpope.core.features.DiscreteVariables`) that the spec's
    feature map or tabular target policy declares, or None.

    Raises:
        ConfigError: the two declare different variables (names, order or levels).
    """
    mapped = getattr(feature_map, "variables", None)
    ruled = getattr(policy, "variables", None)
    if mapped is not None and ruled is not None and mapped != ruled:
        raise ConfigError(
            f"{where}: the feature map declares the variables {mapped.describe()} but the "
            f"target policy {ruled.describe()}; declare the same variables, in the same order.")
    return mapped if mapped is not None else ruled


def _built(where: str, build: Callable[[], Any]) -> Any:
    """``build()``, its errors one ConfigError line named by ``where``."""
    try:
        return build()
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    except (TypeError, KeyError, ValueError) as exc:
        raise ConfigError(f"{where} is invalid ({type(exc).__name__}: {exc}).") from exc


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


@dataclass(frozen=True, eq=False)
class EvaluationSpec:
    """Feature map + target policy + gamma + normalisation + public reference states (each key as
    in docs/OWN_DATA.md, "The evaluation spec"). ``reward_scale`` c multiplies every reward so that
    gradients are of the order of the clip: theta estimates c V and :meth:`reference_values`
    divides by c. ``importance_weight_bound`` and ``reward_bounds`` are public clamps the stats
    stage applies and counts (:mod:`gpope.core.bounds`); ``domain`` (a public simulator) serves
    ground truth only; ``name``, ``domain``, ``policy_name``, the reference states and the
    ``evaluation`` layer are not part of the spec id. ``return_bounds``: the public range of one
    record's discounted return under any policy (the study's outcome definition, e.g. [-1, 1] for
    a discounted discharge +1 or death -1), tighter than the rewards imply; the policy value
    release clamps each return to it and reads its ranges from it (not part of the spec id: the
    statistics do not depend on it)."""

    name: str
    feature_map: Any
    target_policy: Any
    gamma: float
    normalization: Normalization = "transition"
    length_scale: float | None = None
    reward_scale: float = 1.0
    reference_states: tuple[tuple[str, tuple[float, ...]], ...] = field(default=())
    domain: str | None = None
    policy_name: str | None = None
    importance_weight_bound: float | None = None
    reward_bounds: tuple[float, float] | None = None
    evaluation: Any = None
    return_bounds: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        w, r = check_bounds("EvaluationSpec", self.importance_weight_bound, self.reward_bounds)
        object.__setattr__(self, "importance_weight_bound", w)
        object.__setattr__(self, "reward_bounds", r)
        object.__setattr__(self, "return_bounds",
                           check_return_bounds("EvaluationSpec", self.return_bounds, r))
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"The 'name' parameter of EvaluationSpec must be a non-empty string. Got {self.name!r} instead.")
        check_number("EvaluationSpec", "gamma", self.gamma, ge=0.0, le=1.0)
        check_choice("EvaluationSpec", "normalization", self.normalization, _NORMALIZATIONS)
        if self.normalization == "transition":
            if self.length_scale is None:
                raise ConfigError(
                    "The 'length_scale' parameter of EvaluationSpec must be set (> 0) when "
                    "normalization is 'transition': use the public maximum trajectory length, "
                    "e.g. the dataset's max_length. Got None instead."
                )
            check_number("EvaluationSpec", "length_scale", self.length_scale, gt=0.0)
        elif self.length_scale is not None:
            check_number("EvaluationSpec", "length_scale", self.length_scale, gt=0.0)
        check_number("EvaluationSpec", "reward_scale", self.reward_scale, gt=0.0)
        if self.evaluation is not None:
            from gpope.core.evaluation.settings import SettingsLayer

            if not (isinstance(self.evaluation, SettingsLayer) and self.evaluation.source == "spec"):
                raise ConfigError(
                    "The 'evaluation' parameter of EvaluationSpec must be a spec SettingsLayer "
                    "(SettingsLayer.from_spec_block) or None. Got "
                    f"{type(self.evaluation).__name__} instead."
                )
        n = getattr(self.feature_map, "n_features", None)
        if not isinstance(n, int) or n < 1 or not callable(self.feature_map):
            raise ConfigError(
                "The 'feature_map' parameter of EvaluationSpec must be a FeatureMap (callable with "
                f"an integer n_features >= 1). Got {self.feature_map!r} instead."
            )
        if not hasattr(self.target_policy, "probabilities"):
            raise ConfigError(
                "The 'target_policy' parameter of EvaluationSpec must be a Policy (with a "
                f"probabilities(states) method). Got {self.target_policy!r} instead."
            )
        self._check_tabular_rows()
        names = [name for name, _ in self.reference_states]
        from gpope.core.policy_value import QUANTITIES

        reserved = sorted(set(names) & set(QUANTITIES))
        if reserved:
            raise ConfigError(
                f"Reference state name(s) {reserved} of spec {self.name!r} are reserved for the "
                f"run's scalar answers ({', '.join(QUANTITIES)}, rows of released_values); "
                "rename the reference state(s).")
        if len(set(names)) != len(names):
            raise ConfigError(f"EvaluationSpec.reference_states names must be unique. Got {names}.")
        dims = {len(state) for _, state in self.reference_states}
        if len(dims) > 1:
            raise ConfigError(
                "Every reference state of EvaluationSpec must have the same dimension. "
                f"Got dimensions {sorted(dims)} for {names}."
            )
        for name, state in self.reference_states:
            if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in state):
                raise ConfigError(
                    f"Reference state {name!r} of EvaluationSpec must be a list of finite numbers. "
                    f"Got {list(state)!r} instead."
                )
        if self.reference_states:
            try:
                phi = np.asarray(self.feature_map(self.reference_array()), dtype=np.float64)
            except Exception as exc:  # a feature map rejects states of the wrong dimension
                raise ConfigError(
                    f"The feature map of spec {self.name!r} cannot featurise its reference states "
                    f"({type(exc).__name__}: {exc}); give states in the units and dimension of the "
                    "dataset's state column."
                ) from exc
            if phi.shape != (len(self.reference_states), n):
                raise ConfigError(
                    f"The feature map of spec {self.name!r} returned shape {phi.shape} for "
                    f"{len(self.reference_states)} reference states; expected "
                    f"({len(self.reference_states)}, {n})."
                )
            low, high = getattr(self.feature_map, "low", None), getattr(self.feature_map, "high", None)
            if low is not None and high is not None:
                states = self.reference_array()
                outside = [name for (name, _), row in zip(self.reference_states, states, strict=True)
                           if np.any(row < np.asarray(low)) or np.any(row > np.asarray(high))]
                if outside:
                    raise ConfigError(
                        f"Reference state(s) {', '.join(map(repr, outside))} of spec {self.name!r} "
                        f"lie outside the feature map's public ranges (low {list(low)}, high "
                        f"{list(high)}): the map clips a state to them, so the released value "
                        "would be that of another state; move the states inside or widen the "
                        "ranges."
                    )

    def _check_tabular_rows(self) -> None:
        """A tabular target policy over tabular features needs one row per featurised state."""
        from gpope.core.features import TabularFeatures
        from gpope.core.policies import TabularPolicy

        if isinstance(self.feature_map, TabularFeatures) and isinstance(self.target_policy,
                                                                        TabularPolicy):
            rows, n_states = int(self.target_policy.probs.shape[0]), self.feature_map.n_states
            if rows != n_states:
                raise ConfigError(
                    f"Spec {self.name!r}: target_policy.probs has {rows} row(s) but the feature "
                    f"map has n_states {n_states}; give one row per state 0..{n_states - 1} "
                    "(pi(a|s) for each action, in the order of the dataset's actions).")

    # ------------------------------------------------------------------ construction / identity

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, where: str = "spec") -> EvaluationSpec:
        """Build a spec from its plain (YAML) form; see the module docstring for the keys.

        Raises:
            ConfigError: unknown or missing keys, or invalid values (the message names ``where``).
        """
        from gpope.core.features import feature_map_from_dict
        from gpope.core.policies import load_policy, policy_from_dict

        if not isinstance(data, Mapping):
            raise ConfigError(f"{where} must be a mapping. Got {data!r} instead.")
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise ConfigError(f"Unknown key(s) {unknown} in {where}; valid keys: {', '.join(_KEYS)}.")
        missing = [k for k in ("name", "gamma", "feature_map", "target_policy") if k not in data]
        if missing:
            raise ConfigError(f"{where} is missing required key(s) {missing}.")
        fm = data["feature_map"]
        if not isinstance(fm, Mapping) or "kind" not in fm:
            raise ConfigError(f"{where}.feature_map must be a mapping with a 'kind'. Got {fm!r}.")
        feature_map = _built(f"{where}.feature_map", lambda: feature_map_from_dict(dict(fm)))
        tp = data["target_policy"]

        def policy_of() -> tuple[Any, str | None]:
            if isinstance(tp, str):
                return load_policy(tp), tp
            if isinstance(tp, Mapping) and set(tp) == {"artifact"}:
                return load_policy(str(tp["artifact"])), str(tp["artifact"])
            if isinstance(tp, Mapping):
                return policy_from_dict(dict(tp)), None
            raise ConfigError(f"{where}.target_policy must be a mapping with a 'kind' or "
                              f"{{artifact: NAME}}. Got {tp!r} instead.")

        policy, policy_name = _built(f"{where}.target_policy", policy_of)
        refs = data.get("reference_states") or {}
        if not isinstance(refs, Mapping):
            raise ConfigError(
                f"{where}.reference_states must map names to states. Got {refs!r} instead."
            )
        variables = declared_variables(feature_map, policy, where=where)
        reference_states = []
        for ref_name, state in refs.items():
            if variables is not None and isinstance(state, (str, Mapping)):
                state = variables.parse_state(f"{where}.reference_states.{ref_name}", state)
            elif isinstance(state, (str, bytes, Mapping)) or not isinstance(state, (list, tuple)):
                named = (" (a state named by its variables, 'lactate=2,bp=0', needs the "
                         "feature map or the target policy to declare 'variables')"
                         if isinstance(state, (str, Mapping)) else "")
                raise ConfigError(
                    f"{where}.reference_states.{ref_name} must be a list of numbers{named}. "
                    f"Got {state!r}.")
            reference_states.append((str(ref_name), tuple(state)))
        length_scale = data.get("length_scale")
        evaluation = None
        if data.get("evaluation") is not None:
            from gpope.core.evaluation.settings import SettingsLayer

            evaluation = SettingsLayer.from_spec_block(data["evaluation"],
                                                       where=f"{where}.evaluation")
        try:
            return cls(
                name=data["name"],
                feature_map=feature_map,
                target_policy=policy,
                gamma=data["gamma"],
                normalization=data.get("normalization", "transition"),
                length_scale=None if length_scale is None else length_scale,
                reward_scale=data.get("reward_scale", 1.0),
                reference_states=tuple(reference_states),
                domain=data.get("domain"),
                policy_name=data.get("policy_name", policy_name),
                importance_weight_bound=data.get("importance_weight_bound"),
                reward_bounds=(tuple(data["reward_bounds"])  # a YAML list; the spec checks it
                               if isinstance(data.get("reward_bounds"), list)
                               else data.get("reward_bounds")),
                return_bounds=(tuple(data["return_bounds"])
                               if isinstance(data.get("return_bounds"), list)
                               else data.get("return_bounds")),
                evaluation=evaluation,
            )
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    def to_dict(self) -> dict[str, Any]:
        """The plain, JSON-ready form; ``from_mapping(to_dict())`` gives an equal spec."""
        d = {
            "name": self.name,
            "domain": self.domain,
            "gamma": float(self.gamma),
            "normalization": self.normalization,
            "length_scale": None if self.length_scale is None else float(self.length_scale),
            "reward_scale": float(self.reward_scale),
            "feature_map": self.feature_map.to_dict(),
            "target_policy": self.target_policy.to_dict(),
            "reference_states": {k: [float(v) for v in s] for k, s in self.reference_states},
            "policy_name": self.policy_name,
            "importance_weight_bound": self.importance_weight_bound,
            "reward_bounds": None if self.reward_bounds is None else list(self.reward_bounds),
        }
        if self.return_bounds is not None:
            d["return_bounds"] = list(self.return_bounds)
        if self.evaluation is not None:
            d["evaluation"] = self.evaluation.to_dict()
        return d

    def statistics_key(self) -> dict[str, Any]:
        """The parts that determine the statistics (hashed into :attr:`spec_id`)."""
        d = self.to_dict()
        key = {k: d[k] for k in _STATS_KEYS}
        key.update({k: d[k] for k in _OPTIONAL_STATS_KEYS if d[k] is not None})
        return key

    @property
    def spec_id(self) -> str:
        """12 hex digits of SHA-256 of :meth:`statistics_key` as canonical JSON (stable)."""
        digest = hashlib.sha256(canonical_json(self.statistics_key()).encode("utf-8"))
        return digest.hexdigest()[:12]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EvaluationSpec):
            return NotImplemented
        return canonical_json(self.to_dict()) == canonical_json(other.to_dict())

    def __hash__(self) -> int:
        return hash(canonical_json(self.to_dict()))

    # ------------------------------------------------------------------ values

    @property
    def n_features(self) -> int:
        """n, the number of features (theta has this length)."""
        return int(self.feature_map.n_features)

    @property
    def reference_names(self) -> tuple[str, ...]:
        """Names of the reference states, in order."""
        return tuple(name for name, _ in self.reference_states)

    def reference_array(self) -> np.ndarray:
        """(k, d) float64 array of the reference states (k = 0 gives shape (0, 0))."""
        if not self.reference_states:
            return np.zeros((0, 0))
        return np.array([s for _, s in self.reference_states], dtype=np.float64)

    def reference_values(self, theta: np.ndarray) -> np.ndarray:
        """(k,) values theta . phi(s) / reward_scale at the reference states (post-processing).

        Raises:
            ConfigError: ``theta`` does not have shape (n_features,).
        """
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_features,):
            raise ConfigError(
                f"theta must have shape ({self.n_features},) for spec {self.name!r}. Got {theta.shape}."
            )
        if not self.reference_states:
            return np.zeros(0)
        phi = np.asarray(self.feature_map(self.reference_array()), dtype=np.float64)
        return (phi @ theta) / self.reward_scale

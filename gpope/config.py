"""Configuration: YAML parsed once at the edge into frozen, validated dataclasses.

:func:`load_config` reads a YAML file (or nothing: every field has a default, and
``conf/default.yaml`` spells the defaults out) into :class:`GpopeConfig`. :func:`from_mapping` is
the generic, strict builder: unknown keys, wrong types and out-of-range values raise
:class:`~gpope.errors.ConfigError` naming the key, the constraint and the value given.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from gpope.core.evaluation.settings import RunSettings
from gpope.core.validation import check_choice, check_int, check_number, type_note
from gpope.errors import ConfigError
from gpope.shell.lake.registry import STORAGE_CHOICES

__all__ = [
    "DatasetSettings",
    "GpopeConfig",
    "LakeSettings",
    "PrivacySettings",
    "SparkSettings",
    "TrackingSettings",
    "from_mapping",
    "load_config",
    "to_mapping",
]

T = TypeVar("T")


@dataclass(frozen=True)
class SparkSettings:
    """How the SparkSession is built (ignored on a cluster that already has a session)."""

    master: str = "local[*]"
    app_name: str = "gpope"
    shuffle_partitions: int = 8
    driver_memory: str = "4g"
    ui: bool = False
    extra: dict[str, str] = field(default_factory=dict)
    remote: str | None = None

    def __post_init__(self) -> None:
        check_int("SparkSettings", "shuffle_partitions", self.shuffle_partitions, ge=1)
        if not self.master:
            raise ConfigError("The 'master' parameter of SparkSettings must be non-empty. Got ''.")
        if self.remote is not None and not str(self.remote).startswith("sc://"):
            raise ConfigError(
                "The 'remote' parameter of SparkSettings must be a Spark Connect URL "
                f"'sc://host:port[/;param=value...]'. Got {self.remote!r} instead."
            )


@dataclass(frozen=True)
class LakeSettings:
    """Where tables live: a local/DBFS root, or a Unity Catalog ``catalog.schema``."""

    root: str = "lake"
    catalog: str | None = None
    schema: str | None = None
    storage: Literal[STORAGE_CHOICES] = "auto"  # type: ignore[valid-type]
    """``auto`` or a registered store's name (:data:`gpope.shell.lake.registry.STORES`)."""
    retention_hours: float = 168.0
    """Time-travel window that ``gpope maintain`` keeps when it vacuums (hours, >= 0)."""

    def __post_init__(self) -> None:
        check_choice("LakeSettings", "storage", self.storage, STORAGE_CHOICES)
        check_number("LakeSettings", "retention_hours", self.retention_hours, ge=0.0)
        if (self.catalog is None) != (self.schema is None):
            raise ConfigError(
                "LakeSettings needs both 'catalog' and 'schema' for Unity Catalog tables, or neither "
                f"for path-based tables. Got catalog={self.catalog!r}, schema={self.schema!r}."
            )


@dataclass(frozen=True)
class TrackingSettings:
    """MLflow tracking. ``uri`` None means $MLFLOW_TRACKING_URI, else sqlite:///<lake>/mlflow.db.

    Attributes:
        timeout_seconds: an evaluation's MLflow logging after its release ends within this many
            seconds; past it the run is reported released and not tracked, with the ``gpope
            track --run-id`` command that logs it later (the command still exits 0).
        http_retries: retries of one MLflow HTTP request (``MLFLOW_HTTP_REQUEST_MAX_RETRIES``,
            unless the environment sets it; MLflow's own default retries for about 4 minutes).
        http_backoff_factor: seconds of the first back-off between those retries, doubling
            after each (``MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR``, unless the environment sets it).
        http_timeout_seconds: seconds one MLflow HTTP request may take
            (``MLFLOW_HTTP_REQUEST_TIMEOUT``, unless the environment sets it).
    """

    uri: str | None = None
    experiment: str = "gpope"
    timeout_seconds: float = 120.0
    http_retries: int = 2
    http_backoff_factor: int = 1
    http_timeout_seconds: int = 10

    def __post_init__(self) -> None:
        check_number("TrackingSettings", "timeout_seconds", self.timeout_seconds, gt=0.0)
        check_int("TrackingSettings", "http_retries", self.http_retries, ge=0)
        check_int("TrackingSettings", "http_backoff_factor", self.http_backoff_factor, ge=0)
        check_int("TrackingSettings", "http_timeout_seconds", self.http_timeout_seconds, ge=1)


@dataclass(frozen=True)
class DatasetSettings:
    """How ingest turns a dataset's raw event tables into transitions (all public configuration).

    Attributes:
        variables: observation variables that make up the state vector, in order.
        defaults: value of a variable before its first observation (missing: 0.0).
        missing_indicators: append one 0/1 column per variable: 1 while it has never been observed.
        actions: the action vocabulary; the action index is the position in this list.
        max_length: public maximum trajectory length L (the ``transition`` normalisation divides by it;
            longer trajectories are cut and the rest is quarantined with a reason).
        terminal_variable: an observation variable whose presence marks the end of an episode
            (terminal: next features zero); without it every last step is truncated.
        no_terminal_events: True declares that episodes never really end (no death, discharge
            or goal): every record that stops early is a truncation. It confirms what ingest
            assumes without a ``terminal_variable`` (silencing its warning and its refusal of an
            undeclared end marker); it cannot be combined with ``terminal_variable``.
        domain: simulator behind a synthetic dataset (chain, mountaincar, hiv), None for real data.
    """

    variables: tuple[str, ...] = ()
    defaults: dict[str, float] = field(default_factory=dict)
    missing_indicators: bool = False
    actions: tuple[str, ...] = ()
    max_length: int = 200
    terminal_variable: str | None = None
    no_terminal_events: bool = False
    domain: str | None = None

    def __post_init__(self) -> None:
        check_int("DatasetSettings", "max_length", self.max_length, ge=1)
        if self.no_terminal_events and self.terminal_variable is not None:
            raise ConfigError(
                "DatasetSettings: 'no_terminal_events: true' says episodes never end, but "
                f"'terminal_variable' is {self.terminal_variable!r}. Keep one of the two."
            )
        unknown = sorted(set(self.defaults) - set(self.variables))
        if unknown:
            raise ConfigError(
                f"DatasetSettings.defaults names variables not in 'variables': {unknown}. "
                f"Configured variables: {list(self.variables)}."
            )
        if len(set(self.actions)) != len(self.actions):
            raise ConfigError(f"DatasetSettings.actions must be unique. Got {list(self.actions)}.")


@dataclass(frozen=True)
class PrivacySettings:
    """Privacy budget defaults for datasets without an explicit ``gpope budget set``."""

    default_epsilon: float = 3.0
    default_delta: float = 1e-5
    composition: Literal["rdp", "basic"] = "rdp"
    reservation_timeout_hours: float = 24.0
    #: the released number of patients m~ (one per dataset and statistics version, charged once
    #: under add/remove-one: :mod:`gpope.core.mechanisms.count`)
    count_epsilon: float = 0.1
    count_delta: float = 1e-7

    def __post_init__(self) -> None:
        from gpope.core.validation import check_choice, check_number

        check_number("PrivacySettings", "default_epsilon", self.default_epsilon, gt=0)
        check_number("PrivacySettings", "default_delta", self.default_delta, gt=0, lt=1)
        check_choice("PrivacySettings", "composition", self.composition, ("rdp", "basic"))
        check_number(
            "PrivacySettings", "reservation_timeout_hours", self.reservation_timeout_hours, gt=0
        )
        check_number("PrivacySettings", "count_epsilon", self.count_epsilon, gt=0)
        check_number("PrivacySettings", "count_delta", self.count_delta, gt=0, lt=1)


@dataclass(frozen=True)
class GpopeConfig:
    """The whole configuration of a gpope deployment."""

    spark: SparkSettings = field(default_factory=SparkSettings)
    lake: LakeSettings = field(default_factory=LakeSettings)
    tracking: TrackingSettings = field(default_factory=TrackingSettings)
    evaluation: RunSettings = field(default_factory=RunSettings)
    privacy: PrivacySettings = field(default_factory=PrivacySettings)
    datasets: dict[str, DatasetSettings] = field(default_factory=dict)

    def dataset(self, name: str) -> DatasetSettings:
        """The settings of dataset ``name``; unknown names raise ConfigError listing known ones."""
        if name in self.datasets:
            return self.datasets[name]
        raise ConfigError(
            f"Dataset {name!r} is not configured; add it under 'datasets:' in the --conf file. "
            f"Configured datasets: {sorted(self.datasets) or 'none'}."
        )


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Convert ``value`` to the annotated type ``tp`` or raise ConfigError naming ``where``."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {tp}.")
    if origin is Literal:
        options = get_args(tp)
        if value not in options:
            listed = ", ".join(repr(o) for o in options)
            raise ConfigError(f"{where} must be one of {listed}. Got {value!r} instead.")
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping (a YAML section). Got {value!r} instead.")
        return from_mapping(tp, value, where=where)
    if origin in (tuple, list):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list. Got {value!r} instead.")
        args = get_args(tp)
        item_tp = args[0] if args else Any
        items = [_convert(v, item_tp, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping. Got {value!r} instead.")
        args = get_args(tp)
        val_tp = args[1] if len(args) == 2 else Any
        return {str(k): _convert(v, val_tp, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false. Got {value!r} instead.")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{where} must be an integer. Got {value!r}{type_note(value)} instead.")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} must be a number. Got {value!r}{type_note(value)} instead.")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            quote = (f" (a code is text: quote it, '{value}', as the data's integer codes are "
                     "read as text)") if isinstance(value, int) and not isinstance(value, bool) \
                else ""
            raise ConfigError(f"{where} must be a string. Got {value!r} instead{quote}.")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where} must be of type {_type_name(tp)}. Got {value!r} instead.")
    return value


def from_mapping(cls: type[T], data: Mapping[str, Any], *, where: str = "config") -> T:
    """Build the dataclass ``cls`` from a mapping, strictly.

    Guarantees: unknown keys, wrong types and invalid values raise ConfigError whose message names
    the full key path (e.g. ``config.spark.shuffle_partitions``); missing keys take the defaults.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping. Got {data!r} instead.")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(
            f"Unknown key(s) {', '.join(map(repr, unknown))} in {where}; "
            f"valid keys: {', '.join(names)}."
        )
    kwargs = {k: _convert(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def to_mapping(obj: Any) -> Any:
    """The plain (YAML/JSON-ready) form of a config dataclass; inverse of :func:`from_mapping`."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_mapping(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_mapping(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_mapping(v) for k, v in obj.items()}
    return obj


def _yaml_loader() -> Any:
    """PyYAML's safe loader reading every YAML 1.2 number form as a number.

    PyYAML follows YAML 1.1, where an exponent needs a dot and a sign: ``1.0e308``, ``1e-5`` and
    ``2E3`` came back as strings, and a spec's ``reward_bounds: [0, 1.0e308]`` was refused as
    text. Quoted scalars (``"1e5"``) stay strings.
    """
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return Loader


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or non-mapping content raises ConfigError.

    Numbers in every YAML 1.2 form (``1e-5``, ``1.0e308``) are read as numbers.
    """
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"Configuration file {str(p)!r} does not exist; pass an existing --conf.")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_yaml_loader()) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"Configuration file {str(p)!r} is not UTF-8 text (byte {exc.start} is "
            f"{exc.object[exc.start:exc.start + 1]!r}); is it a binary file? Pass a YAML file."
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"Configuration file {str(p)!r} is not valid YAML: {' '.join(str(exc).split())}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"Configuration file {str(p)!r} must contain a mapping at the top level.")
    return data


def load_config(path: str | Path | None = None, **overrides: Any) -> GpopeConfig:
    """Load the configuration from ``path`` (None: defaults), then apply section overrides.

    ``overrides`` are section mappings merged over the file, e.g. ``lake={"root": "/tmp/lake"}``;
    None values are ignored so CLI options can be passed through unconditionally.
    """
    data: dict[str, Any] = load_yaml(path) if path is not None else {}
    where = str(path) if path is not None else "config"
    for section, values in overrides.items():
        if values is None:
            continue
        clean = {k: v for k, v in dict(values).items() if v is not None}
        if clean:
            merged = dict(data.get(section) or {})
            merged.update(clean)
            data[section] = merged
    return from_mapping(GpopeConfig, data, where=where)

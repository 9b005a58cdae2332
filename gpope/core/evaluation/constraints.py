"""The constraints of every evaluation setting, declared as data and checked by one function.

In the manner of scikit-learn's parameter constraints: :data:`CONSTRAINTS` maps each setting of
:class:`gpope.core.evaluation.settings.RunSettings` to its constraint, and :func:`check_setting`
checks a value wherever it enters (the configuration, a spec's ``evaluation:`` block, the command
line), with one message form ("The 'clip' parameter of RunSettings must be > 0. Got -1 instead.").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpope.core.validation import check_choice, check_int, check_number
from gpope.errors import ConfigError

__all__ = ["CONSTRAINTS", "RUN_ONLY", "Accountant", "Choice", "Estimator", "Flag", "Int", "Real",
           "check_setting"]


@dataclass(frozen=True)
class Real:
    """A finite number within the bounds given (None: no bound)."""

    gt: float | None = None
    ge: float | None = None
    lt: float | None = None
    le: float | None = None

    def check(self, owner: str, name: str, value: Any) -> float:
        return check_number(owner, name, value, gt=self.gt, ge=self.ge, lt=self.lt, le=self.le)


@dataclass(frozen=True)
class Int:
    """An integer (not a bool) within the bounds given; ``not_one``: 1 is refused (a count of
    groups is 0 or at least 2)."""

    ge: int | None = None
    not_one: bool = False

    def check(self, owner: str, name: str, value: Any) -> int:
        out = check_int(owner, name, value, ge=self.ge)
        if self.not_one and out == 1:
            raise ConfigError(
                f"The {name!r} parameter of {owner} must be 0 (off) or at least 2 (the number of "
                "disjoint patient groups whose spread gives the interval). Got 1 instead.")
        return out


@dataclass(frozen=True)
class Choice:
    """One of the listed strings."""

    options: tuple[str, ...]

    def check(self, owner: str, name: str, value: Any) -> str:
        return check_choice(owner, name, value, self.options)


@dataclass(frozen=True)
class Accountant:
    """"auto" or a registered accountant (:mod:`gpope.core.accounting.registry`, read when
    checked, so a registered accountant is valid everywhere at once)."""

    def check(self, owner: str, name: str, value: Any) -> str:
        from gpope.core.accounting.registry import accountant_choices

        return check_choice(owner, name, value, accountant_choices())


@dataclass(frozen=True)
class Estimator:
    """A registered estimator (:mod:`gpope.core.estimators`, read when checked, so a registered
    estimator is valid everywhere at once)."""

    def check(self, owner: str, name: str, value: Any) -> str:
        from gpope.core.estimators import estimator_names

        return check_choice(owner, name, value, estimator_names())


@dataclass(frozen=True)
class Flag:
    """True or False."""

    def check(self, owner: str, name: str, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(
                f"The {name!r} parameter of {owner} must be true or false. Got {value!r} instead.")
        return value


#: The constraint of every setting; None is always accepted as "not set" (a setting a run must
#: have is filled by the packaged default or refused by the resolver).
CONSTRAINTS: dict[str, Real | Int | Choice | Accountant | Estimator | Flag] = {
    "epsilon": Real(gt=0.0),
    "delta": Real(gt=0.0, lt=1.0),
    "passes": Real(gt=0.0),
    "iterations": Int(ge=1),
    "batch_rate": Real(gt=0.0, le=1.0),
    # resolved, the expected batch q m may be below 1; a given one must reach 1 trajectory
    # (gpope.core.gpope.operating.resolve_budget refuses less)
    "batch_size": Real(gt=0.0),
    "clip": Real(gt=0.0),
    "step_size": Real(gt=0.0),
    "step_schedule": Choice(("constant", "inverse")),
    "step_offset": Real(ge=0.0),
    "step_offset_fraction": Real(ge=0.0),
    "averaging": Choice(("none", "uniform", "tail")),
    "tail_fraction": Real(gt=0.0, le=1.0),
    "sampling": Choice(("uniform", "poisson")),
    "accountant": Accountant(),
    "trace_every": Int(ge=1),
    "seed": Int(ge=0),
    "in_memory_limit_mb": Int(ge=1),
    "path": Choice(("auto", "memory", "stream")),
    "private_diagnostics": Flag(),
    "public_trajectories": Int(ge=0),
    "public_max_length": Int(ge=1),
    "rows_per_fetch": Int(ge=1),
    "estimator": Estimator(),
    "ssp_clip": Real(gt=0.0),
    "ssp_clip_quantile": Real(gt=0.0, le=1.0),
    "moments_share": Real(gt=0.0, lt=1.0),
    "statistics_share": Real(ge=0.0, lt=1.0),
    "policy_value_share": Real(ge=0.0, lt=1.0),
    "ci_level": Real(gt=0.0, lt=1.0),
    "ssp_identification": Flag(),
    "interval_groups": Int(ge=0, not_one=True),
    "interval_groups_min_patients": Int(ge=0),
    "interval_groups_min_m_epsilon": Real(ge=0.0),
    "tune": Choice(("none", "private")),
    "secure_noise": Flag(),
    "noise_grid": Real(gt=0.0),
    "allow_invalid_accounting": Flag(),
    "allow_not_private": Flag(),
    "allow_stale_stats": Flag(),
}

#: Settings that belong to one run and never come from the configuration.
RUN_ONLY = ("epsilon", "delta", "seed", "allow_invalid_accounting", "allow_not_private",
            "allow_stale_stats")


def check_setting(owner: str, name: str, value: Any) -> Any:
    """``value`` checked against the constraint of setting ``name`` (None passes: not set).

    Raises:
        ConfigError: an unknown setting, or a value outside its constraint; the message names the
            setting, the constraint and the value.
    """
    if name not in CONSTRAINTS:
        raise ConfigError(
            f"Unknown setting {name!r} of {owner}; valid settings: {', '.join(CONSTRAINTS)}.")
    return None if value is None else CONSTRAINTS[name].check(owner, name, value)

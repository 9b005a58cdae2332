"""The estimators of ``gpope evaluate``: one interface (:class:`Estimator`) and one registry.

The command line, the settings' constraint, the plan, the pipeline, MLflow and the report read
this registry; nothing outside this package branches on an estimator's name. To add one, write
``gpope/core/estimators/<name>.py`` with ``class X(Estimator)`` (``name``, ``description``, the
facts that differ from the one-shot default, ``plan`` and ``execute``) and add its line to
:data:`_BUILT_IN`, or call ``register(X())`` as tests/shell/test_evaluate_privacy.py does.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpope.core.estimators.base import SOLVER_SETTINGS, Estimator, PlanContext
from gpope.core.estimators.execution import Estimate, ReleaseExecution, RunSource, StatisticsSource
from gpope.errors import ConfigError

__all__ = ["SOLVER_SETTINGS", "Estimate", "Estimator", "PlanContext", "ReleaseExecution",
           "RunSource", "StatisticsSource",
           "audit", "audit_names", "claiming", "estimator_choices", "estimator_help",
           "estimator_names", "execute", "get", "register", "unregister"]

#: The built-in estimators (and audited releases), loaded on first use; the order of ``--help``.
_BUILT_IN: dict[str, str] = {
    "gpope": "gpope.core.estimators.gpope:ESTIMATOR",
    "ssp": "gpope.core.estimators.ssp:ESTIMATOR",
    "untuned": "gpope.core.estimators.untuned:ESTIMATOR",
}
#: Releases audited beside the estimators (``gpope audit --estimator``), not estimators.
_AUDITED: dict[str, str] = {"policy_value": "gpope.core.estimators.policy_value:AUDIT"}
_REGISTERED: dict[str, Estimator | str] = dict(_BUILT_IN)


def register(estimator: Estimator) -> None:
    """Add an estimator: its name becomes a valid ``--estimator`` choice and setting."""
    if not estimator.name or estimator.name in _REGISTERED or estimator.name in _AUDITED:
        raise ConfigError(f"An estimator named {estimator.name!r} is already registered "
                          "(or the name is empty); choose another name.")
    _REGISTERED[estimator.name] = estimator


def unregister(name: str) -> None:
    """Remove an estimator added by :func:`register` (tests); built-in ones stay."""
    if name not in _BUILT_IN:
        _REGISTERED.pop(name, None)


def _load(where: str) -> Any:
    module, attr = where.split(":")
    return getattr(importlib.import_module(module), attr)


def get(name: str) -> Estimator:
    """The registered estimator ``name``; ConfigError listing the valid ones otherwise."""
    entry = _REGISTERED.get(name)
    if entry is None:
        raise ConfigError(f"Unknown estimator {name!r}; valid estimators: "
                          f"{', '.join(_REGISTERED)}.")
    if isinstance(entry, str):
        entry = _REGISTERED[name] = _load(entry)
    return entry


def estimator_names() -> tuple[str, ...]:
    """Every valid value of the ``estimator`` setting."""
    return tuple(_REGISTERED)


def estimator_choices() -> tuple[str, ...]:
    """The ``--estimator`` choices (the estimators a user names; the default claims its runs)."""
    return tuple(n for n in _REGISTERED if get(n).command_line)


def estimator_help() -> str:
    """One line per ``--estimator`` choice, for ``--help``."""
    return "; ".join(f"{n}: {get(n).description}" for n in estimator_choices())


def claiming(spec_has_block: bool, sources: Any) -> str | None:
    """The estimator that claims a run nobody chose one for (:meth:`Estimator.claims`), or None."""
    return next((n for n in _REGISTERED if get(n).claims(spec_has_block, sources)), None)


def audit_names() -> tuple[str, ...]:
    """The ``gpope audit --estimator`` choices: the estimators with an audit and the audited
    releases."""
    return (*(n for n in _REGISTERED if type(get(n)).audit is not Estimator.audit), *_AUDITED)


def audit(name: str, request: Any) -> list[tuple[str, Any]]:
    """The audit of ``name`` (:meth:`Estimator.audit`, or an audited release's)."""
    if name in _AUDITED:
        return _load(_AUDITED[name])(request)
    return get(name).audit(request)


def execute(name: str, source: StatisticsSource, **kwargs: Any) -> Estimate:
    """Run the execution of estimator ``name`` against ``source``."""
    return get(name).execute(source, **kwargs)

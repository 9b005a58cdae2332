"""Parameter checks with one message form, shared by every configuration dataclass.

Messages follow the form ``The 'clip' parameter of GPOPEConfig must be > 0. Got -1.0 instead.``
All checks raise :class:`gpope.errors.ConfigError`; none uses ``assert``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypedDict, Unpack

from gpope.errors import ConfigError

__all__ = ["IntBounds", "NumberBounds", "check_choice", "check_fields", "check_int", "check_number",
           "check_probability", "type_note"]


def _fail(owner: str, name: str, constraint: str, value: Any) -> ConfigError:
    return ConfigError(
        f"The {name!r} parameter of {owner} must be {constraint}. Got {value!r}"
        f"{type_note(value) if constraint in ('a number', 'an integer') else ''} instead."
    )


def type_note(value: Any) -> str:
    """`` (a str: write numbers without quotes)`` for a value of the wrong type ('' for None): a
    number that arrives as quoted text prints like a number, so its type says why it was refused."""
    if value is None:
        return ""
    hint = ": write numbers without quotes" if isinstance(value, str) else ""
    return f" (a {type(value).__name__}{hint})"


class NumberBounds(TypedDict, total=False):
    """The bounds of :func:`check_number`: the value must be ``> gt``, ``>= ge``, ``< lt`` and
    ``<= le`` (an absent or None bound is not checked)."""

    gt: float | None
    ge: float | None
    lt: float | None
    le: float | None


class IntBounds(TypedDict, total=False):
    """The bounds of :func:`check_int`: the value must be ``>= ge`` and ``<= le`` (an absent or
    None bound is not checked)."""

    ge: int | None
    le: int | None


#: Every bound keyword, the comparison the value must pass and its sign in messages, in the
#: order the bounds are checked.
_BOUNDS: tuple[tuple[str, Callable[[Any, Any], bool], str], ...] = (
    ("gt", operator.gt, ">"), ("ge", operator.ge, ">="), ("lt", operator.lt, "<"),
    ("le", operator.le, "<="))
_NUMBER_KEYS = frozenset(NumberBounds.__annotations__)
_INT_KEYS = frozenset(IntBounds.__annotations__)


def _within(
    check: str, owner: str, name: str, value: Any, bounds: Mapping[str, Any], keys: frozenset[str]
) -> Any:
    """``value`` if it passes every bound given (first failing bound: ConfigError); a keyword
    not in ``keys`` is a TypeError, as a signature would raise."""
    if not bounds:
        return value
    if not keys.issuperset(bounds):
        unknown = sorted(set(bounds) - keys)[0]
        raise TypeError(f"{check}() got an unexpected keyword argument {unknown!r}")
    for key, holds, sign in _BOUNDS:
        limit = bounds.get(key)
        if limit is not None and not holds(value, limit):
            raise _fail(owner, name, f"{sign} {limit}", value)
    return value


def _checked(check: str, owner: str, name: str, value: Any, allow_none: bool,
             convert: Callable[[str, str, Any], Any], bounds: Mapping[str, Any],
             keys: frozenset[str]) -> Any:
    """None if ``value`` is None and ``allow_none``, else ``convert(owner, name, value)`` checked
    against ``bounds`` (:func:`_within`)."""
    if value is None and allow_none:
        return None
    return _within(check, owner, name, convert(owner, name, value), bounds, keys)


def _as_float(owner: str, name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(owner, name, "a number", value)
    value = float(value)
    if not math.isfinite(value):
        raise _fail(owner, name, "finite", value)
    return value


def _as_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise _fail(owner, name, "an integer", value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
        except ImportError:  # pragma: no cover - numpy is a hard dependency
            pass
    if not isinstance(value, int):
        raise _fail(owner, name, "an integer", value)
    return value


def check_number(
    owner: str, name: str, value: Any, *, allow_none: bool = False, **bounds: Unpack[NumberBounds]
) -> float | None:
    """Return ``value`` as a float after checking type, finiteness and ``bounds``
    (:class:`NumberBounds`); None passes only with ``allow_none``."""
    return _checked("check_number", owner, name, value, allow_none, _as_float, bounds, _NUMBER_KEYS)


def check_int(
    owner: str, name: str, value: Any, *, allow_none: bool = False, **bounds: Unpack[IntBounds]
) -> int | None:
    """Return ``value`` as an int after checking it is integral and within ``bounds``
    (:class:`IntBounds`); None passes only with ``allow_none``."""
    return _checked("check_int", owner, name, value, allow_none, _as_int, bounds, _INT_KEYS)


def check_fields(obj: Any, names: Iterable[str], **bounds: Unpack[NumberBounds]) -> None:
    """Check the number fields ``names`` of ``obj`` against one set of ``bounds``
    (:func:`check_number`; messages name ``obj``'s class)."""
    for name in names:
        check_number(type(obj).__name__, name, getattr(obj, name), **bounds)


def check_probability(owner: str, name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float in (0, 1] (or [0, 1] with ``allow_zero``)."""
    if allow_zero:
        return check_number(owner, name, value, ge=0.0, le=1.0)  # type: ignore[return-value]
    return check_number(owner, name, value, gt=0.0, le=1.0)  # type: ignore[return-value]


def check_choice(owner: str, name: str, value: Any, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``choices``; the error lists the valid values."""
    options = tuple(choices)
    if value not in options:
        listed = ", ".join(repr(c) for c in options)
        raise _fail(owner, name, f"one of {listed}", value)
    return value


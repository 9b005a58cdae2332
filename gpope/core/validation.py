"""Parameter checks with one message form, shared by every configuration dataclass.

Messages follow the form ``The 'clip' parameter of GPOPEConfig must be > 0. Got -1.0 instead.``
All checks raise :class:`gpope.errors.ConfigError`; none uses ``assert``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from gpope.errors import ConfigError

__all__ = [
    "check_choice",
    "check_finite",
    "check_int",
    "check_number",
    "check_probability",
    "type_note",
]


def _fail(owner: str, name: str, constraint: str, value: Any) -> ConfigError:
    return ConfigError(
        f"The {name!r} parameter of {owner} must be {constraint}. Got {value!r}"
        f"{type_note(value) if constraint in ('a number', 'an integer') else ''} instead."
    )


def type_note(value: Any) -> str:
    """`` (a str: write numbers without quotes)`` for a value of the wrong type ('' for None).

    A number that arrives as text (a quoted YAML scalar) prints like a number; naming its type
    says why it was refused.
    """
    if value is None:
        return ""
    hint = ": write numbers without quotes" if isinstance(value, str) else ""
    return f" (a {type(value).__name__}{hint})"


def check_number(
    owner: str,
    name: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    allow_none: bool = False,
) -> float | None:
    """Return ``value`` as a float after checking type, finiteness and bounds."""
    if value is None:
        if allow_none:
            return None
        raise _fail(owner, name, "a number", value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(owner, name, "a number", value)
    value = float(value)
    if not math.isfinite(value):
        raise _fail(owner, name, "finite", value)
    if gt is not None and not value > gt:
        raise _fail(owner, name, f"> {gt}", value)
    if ge is not None and not value >= ge:
        raise _fail(owner, name, f">= {ge}", value)
    if lt is not None and not value < lt:
        raise _fail(owner, name, f"< {lt}", value)
    if le is not None and not value <= le:
        raise _fail(owner, name, f"<= {le}", value)
    return value


def check_int(
    owner: str,
    name: str,
    value: Any,
    *,
    ge: int | None = None,
    le: int | None = None,
    allow_none: bool = False,
) -> int | None:
    """Return ``value`` as an int after checking it is integral and within bounds."""
    if value is None:
        if allow_none:
            return None
        raise _fail(owner, name, "an integer", value)
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
    if ge is not None and value < ge:
        raise _fail(owner, name, f">= {ge}", value)
    if le is not None and value > le:
        raise _fail(owner, name, f"<= {le}", value)
    return value


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


def check_finite(owner: str, name: str, value: Any) -> float:
    """Return ``value`` as a finite float (any sign)."""
    return check_number(owner, name, value)  # type: ignore[return-value]

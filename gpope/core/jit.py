"""numba for the package's compiled loops, or None when it is switched off or not installed.

Every compiled loop (the GPOPE steps of :mod:`gpope.core.gpope.kernels`, the HIV integrator of
:mod:`gpope.core.envs.hiv_integrator`) gets numba from :func:`numba_module`, so one switch,
``GPOPE_NO_JIT=1``, sends all of them to their numpy loops, which do the same arithmetic.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["numba_module"]


def numba_module() -> ModuleType | None:
    """The numba module; None when ``GPOPE_NO_JIT`` is set or numba cannot be imported."""
    if os.environ.get("GPOPE_NO_JIT"):
        return None
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a pinned dependency
        return None
    return numba

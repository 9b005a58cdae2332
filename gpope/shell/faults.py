"""Fault injection for tests: ``GPOPE_FAULT`` names points where the process fails or pauses.

Named points sit between the commits of multi-step stages, so tests can really kill a run there
or hold it while another process acts. ``$GPOPE_FAULT`` is a comma-separated list of:

* ``<point>``: SIGKILL this process at ``<point>``;
* ``<point>:int``: SIGINT (a Ctrl-C) at ``<point>``;
* ``<point>:raise``: raise :class:`InjectedFault` (an unexpected error, not a
  :class:`~gpope.errors.GpopeError`) at ``<point>``;
* ``<point>:wait=<file>``: at ``<point>``, create ``<file>.reached`` and block until ``<file>``
  exists (a deterministic interleaving of two real processes; the path holds no comma);
* ``clock=<seconds>``: this process's wall clock for the rows it writes is shifted by
  ``<seconds>`` (e.g. ``clock=-7200``: a writer whose clock is two hours behind).

Without the environment variable nothing happens.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from gpope.errors import GpopeError

__all__ = ["ENV", "WAIT_TIMEOUT_S", "InjectedFault", "clock_offset", "point"]

ENV = "GPOPE_FAULT"
#: How long a paused process waits for its release file before it gives up.
WAIT_TIMEOUT_S = 120.0


class InjectedFault(RuntimeError):
    """The error a ``<point>:raise`` fault raises: stands for any unexpected failure there."""


def _entries() -> list[str]:
    wanted = os.environ.get(ENV)
    return [w.strip() for w in wanted.split(",")] if wanted else []


def point(name: str) -> None:
    """Act at point ``name`` as ``$GPOPE_FAULT`` says (kill, interrupt, raise or wait); else
    nothing.

    Raises:
        InjectedFault: ``$GPOPE_FAULT`` holds ``<name>:raise``.
        GpopeError: a ``wait`` point's release file did not appear within WAIT_TIMEOUT_S.
    """
    entries = _entries()
    if not entries:
        return
    if name in entries:
        os.kill(os.getpid(), signal.SIGKILL)
    if f"{name}:int" in entries:
        os.kill(os.getpid(), signal.SIGINT)
    if f"{name}:raise" in entries:
        raise InjectedFault(f"fault injected at {name!r} (${ENV})")
    for entry in entries:
        if entry.startswith(f"{name}:wait="):
            _wait(name, Path(entry.split("=", 1)[1]))


def _wait(name: str, release: Path) -> None:
    Path(f"{release}.reached").touch()
    deadline = time.monotonic() + WAIT_TIMEOUT_S
    while not release.exists():
        if time.monotonic() > deadline:
            raise GpopeError(
                f"fault point {name!r} waited {WAIT_TIMEOUT_S:g} s for {release}, which never "
                f"appeared; unset {ENV} outside tests."
            )
        time.sleep(0.01)


def clock_offset() -> float:
    """Seconds added to this process's wall clock for the rows it writes (0 without a fault)."""
    for entry in _entries():
        if entry.startswith("clock="):
            return float(entry.split("=", 1)[1])
    return 0.0

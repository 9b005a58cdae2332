"""Fault injection for kill tests: ``GPOPE_FAULT=<point>`` makes the process SIGKILL itself there.

Named points sit between the commits of multi-step stages (e.g. ``evaluate.after_reserve``,
``evaluate.after_release``), so tests can really kill a run at that step (``kill -9``, no
cleanup, no ``finally``) and check what the lake and the ledger look like afterwards. Without the
environment variable :func:`point` does nothing.
"""

from __future__ import annotations

import os
import signal

__all__ = ["ENV", "point"]

ENV = "GPOPE_FAULT"


def point(name: str) -> None:
    """SIGKILL the current process if ``$GPOPE_FAULT`` names this point (comma-separated list);
    ``<point>:int`` sends SIGINT instead (a Ctrl-C at that step)."""
    wanted = os.environ.get(ENV)
    if not wanted:
        return
    names = {w.strip() for w in wanted.split(",")}
    if name in names:
        os.kill(os.getpid(), signal.SIGKILL)
    if f"{name}:int" in names:
        os.kill(os.getpid(), signal.SIGINT)

"""Stops by a signal: SIGTERM handled like Ctrl-C, commits a signal never splits, and the one
line that says what a stopped command did and did not commit.

:func:`install` makes SIGTERM raise :class:`Terminated`, a :class:`KeyboardInterrupt`, so every
stage's interrupt handling applies to schedulers' stops too. Commits that make a stage's output
visible run under :func:`deferred`: a signal arriving there is acted on once the commit and its
:func:`record` are done, so this process's journal (:func:`commits`) is exactly what readers can
see, and :func:`stopped_line` says which it is.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["STAGE_OUTPUTS", "Stopped", "Terminated", "command_stopped", "commits", "deferred",
           "end_children", "exit_code", "install", "received", "record", "reset", "start_command",
           "stopped_line"]

#: What each data stage commits (the tables readers see after it): the subject of its line.
STAGE_OUTPUTS = {
    "simulate": "the bronze observations, treatments and outcomes",
    "load": "the bronze observations, treatments and outcomes",
    "ingest": "the silver transitions and rejected_events",
    "stats": "the gold trajectory_stats",
}

_COMMITS: list[str] = []
_RECEIVED: list[int] = []
_DEFERRING = [0]  # depth of nested deferred() blocks
_BEFORE: set[int] = set()  # child processes that existed when the command started


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like a Ctrl-C."""


def _on_term(signum: int, frame: object) -> None:
    _RECEIVED.append(signum)
    _quiet_jvm_bridge()
    raise Terminated("stopped by SIGTERM")


def _quiet_jvm_bridge() -> None:
    """After a stop, py4j's records of the JVM calls it cut (tracebacks on the root logger and
    its own) are not shown: the command's one line says what the stop left."""
    logging.getLogger("py4j").propagate = False
    root = logging.getLogger()
    if not root.handlers:  # else logging.exception() would add a stderr handler
        root.addHandler(logging.NullHandler())


def _children() -> set[int]:
    """This process's child processes (Linux ``/proc``; elsewhere none)."""
    import os

    me = str(os.getpid())
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return set()
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me:  # the field after the state is the parent pid
            out.add(int(pid))
    return out


def end_children() -> None:
    """SIGKILL the child processes this command started (a local Spark's JVM): a stopped
    command must not leave its JVM behind (a JVM stopped while it starts never exits) nor
    printing traces after the command's line. Their work is abandoned like the command's:
    anything they wrote is uncommitted, staged files are removed by the next write. Children
    that ran before the command (a notebook's or a test session's Spark) are left alone, and in
    an interactive session (a REPL, IPython) a Ctrl-C ends none: the session keeps its Spark."""
    import os
    import sys

    interactive = hasattr(sys, "ps1") or "IPython" in sys.modules
    if interactive and received() != "SIGTERM":
        return
    for pid in _children() - _BEFORE:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class _CutJvmCall(logging.Filter):
    """Drops py4j's traceback of a JVM call that Ctrl-C cut (logged on the root logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "KeyboardInterrupt while sending command."


_CUT = _CutJvmCall()


def install() -> None:
    """SIGTERM raises :class:`Terminated` in the main thread (elsewhere: nothing changes), and
    py4j's tracebacks of the JVM calls a Ctrl-C cuts are not shown (the command's line says
    what the stop left)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_term)
    logging.getLogger("py4j").propagate = False
    root = logging.getLogger()
    if _CUT not in root.filters:
        root.addFilter(_CUT)


def received() -> str | None:
    """The name of the last stopping signal this process received ("SIGTERM", "SIGINT"), or
    None (a Ctrl-C that PySpark's handler turned into KeyboardInterrupt counts as SIGINT)."""
    return signal.Signals(_RECEIVED[-1]).name if _RECEIVED else None


def exit_code(exc: BaseException) -> int:
    """128 + the signal's number: 143 after SIGTERM, 130 after Ctrl-C."""
    term = isinstance(exc, Terminated) or received() == "SIGTERM"
    return 128 + (signal.SIGTERM if term else signal.SIGINT)


def reset() -> None:
    """Forget earlier commits and signals, and note the child processes that exist already (a
    command starting in a process that ran others)."""
    _COMMITS.clear()
    _RECEIVED.clear()
    _BEFORE.clear()
    _BEFORE.update(_children())


def record(what: str) -> None:
    """Note that this process committed ``what`` (visible to readers from now on)."""
    _COMMITS.append(what)


def commits() -> tuple[str, ...]:
    """What this process committed, in order."""
    return tuple(_COMMITS)


@contextmanager
def deferred() -> Iterator[None]:
    """SIGTERM and SIGINT arriving inside the block are acted on when it ends (a commit and its
    :func:`record` are never split); outside the main thread signals cannot arrive: no-op."""
    if threading.current_thread() is not threading.main_thread() or _DEFERRING[0]:
        yield  # no signal here, or an enclosing block acts on it at its end
        return
    pending: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in previous:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    _DEFERRING[0] += 1
    try:
        yield
    finally:
        _DEFERRING[0] -= 1
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            _RECEIVED.append(pending[0])
            _quiet_jvm_bridge()
            if pending[0] == signal.SIGTERM:
                raise Terminated("stopped by SIGTERM")
            raise KeyboardInterrupt


def stopped_line(command: str, dataset: str | None, exc: BaseException) -> str:
    """The one line a command stopped by a signal prints: what it committed, what it did not,
    and what to run next (a stage's own message, when it raised one, is kept)."""
    term = exit_code(exc) == 128 + signal.SIGTERM
    by = "SIGTERM" if term else "Ctrl-C"
    text = str(exc)
    if text and text != "stopped by SIGTERM":  # the stage said where it stopped
        return f"stopped by SIGTERM: {text}" if term else text
    done = commits()
    where = f" of dataset {dataset}" if dataset else ""
    subject = STAGE_OUTPUTS.get(command)
    if done:
        return (f"stopped by {by} after it committed {'; '.join(done)} (visible to readers); "
                "nothing after that was committed.")
    if subject is None:
        return f"stopped by {by}."
    return (f"stopped by {by} before its commit: nothing was committed, {subject}{where} are as "
            f"they were (anything half-written stays invisible to readers); run `gpope "
            f"{command}` again.")


@dataclass(frozen=True)
class Stopped:
    """A command stopped by a signal: the one line it prints (:func:`stopped_line`) and its exit
    status (:func:`exit_code`)."""

    line: str
    exit_code: int


def start_command() -> None:
    """Prepare this process for one command: forget earlier commits and signals, note the child
    processes that exist already (:func:`reset`), and make SIGTERM stop it like a Ctrl-C
    (:func:`install`)."""
    reset()
    install()


def command_stopped(command: str, dataset: str | None, exc: BaseException) -> Stopped:
    """A command stopped by a signal: ends the child processes it started (its local JVM,
    :func:`end_children`) and says what the stop left committed, with the exit status."""
    end_children()
    return Stopped(stopped_line(command, dataset, exc), exit_code(exc))

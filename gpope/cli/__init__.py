"""The ``gpope`` command line: one subcommand module per command group.

Each module in :data:`COMMAND_MODULES` exposes ``register(subparsers)``, which adds its parser(s)
and sets ``func`` (a handler ``(args) -> int``) as the parser default. Handlers raise
:class:`gpope.errors.GpopeError` for user-facing failures; :func:`main` prints the one-line reason
to stderr and exits non-zero.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from gpope import __version__
from gpope.errors import GpopeError

# Command groups, in the order they appear in --help. Each entry is a module of this package.
COMMAND_MODULES: tuple[str, ...] = ("demo", "simulate", "load", "ingest", "stats", "evaluate",
                                    "budget", "maintain", "query", "compare", "track", "accountant",
                                    "experiment", "tune", "audit")


# Negative numbers in every form float() reads (argparse's own pattern misses "-1e-5"), so that
# "--delta -1e-5" reaches the validation that refuses it with a clear message.
_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.IGNORECASE)
_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
# "The 'delta' parameter of RunSettings must be ..." from the settings the CLI fills.
_PARAMETER_OF = re.compile(r"The '(\w+)' parameter of (\w+)")


class GpopeArgumentParser(argparse.ArgumentParser):
    """ArgumentParser that reads negative numbers in scientific notation as values and suggests
    the closest choice for a mistyped subcommand ("did you mean ...?")."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str):  # type: ignore[override]
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = re.findall(r"'([^']*)'", match.group(2))
            close = difflib.get_close_matches(match.group(1), choices, n=1, cutoff=0.5)
            if close:
                message = f"{message}; did you mean '{close[0]}'?"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered subcommand."""
    parser = GpopeArgumentParser(
        prog="gpope",
        description=("Differentially private off-policy evaluation (GPOPE) on Spark, Delta Lake "
                     "and MLflow. Every command has --help; commands that report accept --json."),
    )
    parser.add_argument("--version", action="version", version=f"gpope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"gpope.cli.{name}")
        module.register(sub)
    return parser


_PYTHON_SHOWWARNING = warnings.showwarning


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """gpope's own warnings as one clear line on stderr (no source path, no code line); other
    packages' warnings keep Python's format."""
    if issubclass(category, UserWarning) and f"{os.sep}gpope{os.sep}" in str(filename):
        print(f"WARNING: {message}", file=file or sys.stderr)
        return
    _PYTHON_SHOWWARNING(message, category, filename, lineno, file, line)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpope`` console script; returns the exit status."""
    from gpope import api

    warnings.showwarning = _one_line_warning
    api.start_command()  # SIGTERM (a scheduler's stop) is handled like Ctrl-C
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GpopeError as exc:
        message = user_message(str(exc), _command_parser(parser, args))
        print(f"gpope {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        # the JVM this command started stops with it, silently
        stopped = api.command_stopped(args.command, getattr(args, "dataset", None), exc)
        summary = getattr(exc, "summary", None)
        if summary:  # interrupted after a release: say what was released
            print(summary)
        # one line: what the stop left committed and what not (the stage's own words if any)
        print(f"gpope {args.command}: {stopped.line}", file=sys.stderr)
        return stopped.exit_code


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The (sub)parser that parsed ``args``'s command, for naming its flags in messages."""
    node: Any = parser
    for dest in ("command", "budget_command"):
        name = getattr(args, dest, None)
        sub = next((a for a in getattr(node, "_actions", ())
                    if isinstance(a, argparse._SubParsersAction)), None)
        if name is None or sub is None or name not in sub.choices:
            break
        node = sub.choices[name]
    return node


def user_message(message: str, parser: Any) -> str:
    """``message`` with internal option-class names replaced by the command's flag names.

    "The 'delta' parameter of RunSettings must be > 0" becomes "--delta must be > 0" when the
    command has a ``--delta`` flag; a spec's parameters become "the spec's 'gamma'"; other
    internal class names become "the 'x' setting".
    """
    flags = {}
    for action in getattr(parser, "_actions", ()):
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs:
            flags[action.dest] = longs[0]

    def replace(m: re.Match[str]) -> str:
        name, owner = m.group(1), m.group(2)
        if name in flags:
            return flags[name]
        if owner == "EvaluationSpec":
            return f"The spec's {name!r}"
        return f"The {name!r} setting"

    return _PARAMETER_OF.sub(replace, message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``gpope`` command line: one subcommand module per command group.

Each module in :data:`COMMAND_MODULES` exposes ``register(subparsers)``, which adds its parser(s)
and sets ``func`` (a handler ``(args) -> int``) as the parser default. Handlers raise
:class:`gpope.errors.GpopeError` for user-facing failures; :func:`main` prints the one-line reason
to stderr and exits non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from gpope import __version__
from gpope.errors import GpopeError

# Command groups, in the order they appear in --help. Each entry is a module of this package.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "simulate",
    "ingest",
    "stats",
    "evaluate",
    "budget",
    "query",
    "accountant",
    "experiment",
    "tune",
    "audit",
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser with every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="gpope",
        description=(
            "Differentially private off-policy evaluation (GPOPE) on Spark, Delta Lake and MLflow. "
            "Every command has --help; commands that report accept --json."
        ),
    )
    parser.add_argument("--version", action="version", version=f"gpope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"gpope.shell.cli.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpope`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GpopeError as exc:
        print(f"gpope {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gpope {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

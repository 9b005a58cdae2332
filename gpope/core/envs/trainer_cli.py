"""The command line the policy trainers share (``python -m gpope.core.envs.train_*``).

Every trainer takes ``--out`` (the artifact path) and ``--seed``, plus its own numeric options, and
writes one JSON artifact recording the command that reproduces it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["command_line", "trainer_parser", "write_artifact"]


def trainer_parser(doc: str, **defaults: float) -> argparse.ArgumentParser:
    """A parser with ``--out`` (required), ``--seed`` (default 0) and one option per keyword,
    typed as its default (``eval_episodes=1000`` gives ``--eval-episodes``, an int, default 1000).

    Args:
        doc: the trainer's module docstring; its first line describes the command.
        **defaults: option name -> default value (int or float).
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="artifact path (.json)")
    parser.add_argument("--seed", type=int, default=0)
    for name, default in defaults.items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return parser


def command_line(module: str, argv: list[str] | None) -> str:
    """The command that reproduces this run of ``module`` (``argv`` None: the process's)."""
    return f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:])


def write_artifact(out: Path, artifact: Mapping[str, Any]) -> None:
    """Write ``artifact`` to ``out`` as indented JSON with a final newline (folders created)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(artifact, indent=1) + "\n", encoding="utf-8")

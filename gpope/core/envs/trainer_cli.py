"""The command line the policy trainers share (``python -m gpope.core.envs.train_*``).

Every trainer takes ``--out`` (the artifact path) and options named after its ``train`` function's
keywords, with that function's defaults, and writes one JSON artifact recording the command that
reproduces it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["command_line", "trainer_parser", "write_artifact"]


def trainer_parser(doc: str, train: Callable[..., Any], options: Sequence[str],
                   **extra: float) -> argparse.ArgumentParser:
    """A parser with ``--out`` (required), one option per name of ``options`` whose default is
    ``train``'s default for that keyword, then one per ``extra`` keyword (name -> default, for
    options ``train`` does not take). Each option is typed as its default; ``eval_episodes``
    gives ``--eval-episodes``; the first line of ``doc`` describes the command.
    """
    keywords = inspect.signature(train).parameters
    defaults = {name: keywords[name].default for name in options}
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="artifact path (.json)")
    for name, default in {**defaults, **extra}.items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return parser


def command_line(module: str, argv: list[str] | None) -> str:
    """The command that reproduces this run of ``module`` (``argv`` None: the process's)."""
    return f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:])


def write_artifact(out: Path, artifact: Mapping[str, Any]) -> None:
    """Write ``artifact`` to ``out`` as indented JSON with a final newline (folders created)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(artifact, indent=1) + "\n", encoding="utf-8")

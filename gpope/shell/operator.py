"""The operator channel: noise-free values of private data, kept out of shared job logs.

Job stdout is readable by anyone who can view the job, so it carries only public or released
values. Noise-free counts of the private tables go here instead: one JSON line per record, tagged
``diagnostic.private=true``, in a file readable by its owner only (``$GPOPE_OPERATOR_LOG``, else
``<lake>/_operator/private_diagnostics.jsonl`` on a local lake); elsewhere the record is dropped
(the job says so), never printed.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpope.jsonable import jsonable

if TYPE_CHECKING:
    from gpope.config import GpopeConfig

__all__ = ["ENV", "HEADING", "OPERATOR_ONLY", "operator_log_path", "operator_only",
           "record_private"]

ENV = "GPOPE_OPERATOR_LOG"

#: The one line above every noise-free count a CLI command prints (the operator's terminal; the
#: jobs send the same counts to the operator log instead).
HEADING = ("operator only, not private (noise-free counts of the private data, not covered by "
           "the accountant; do not share):")

#: The ``--json`` key holding a command's noise-free counts.
OPERATOR_ONLY = "operator_only"


def operator_only(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` as the ``--json`` ``operator_only`` object, tagged ``diagnostic.private``."""
    return {"diagnostic.private": True, "note": HEADING.rstrip(":"), **fields}


def operator_log_path(config: GpopeConfig) -> Path | None:
    """Where private operator records go (None: nowhere available)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    from gpope.shell.lake.names import local_root

    if config.lake.catalog is not None:
        return None
    root = local_root(str(config.lake.root))
    return None if root is None else Path(root) / "_operator" / "private_diagnostics.jsonl"


def record_private(config: GpopeConfig, *, stage: str, dataset: str, payload: dict[str, Any]) -> str:
    """Append a tagged record to the operator log; returns a sentence saying where it went."""
    path = operator_log_path(config)
    if path is None:
        return (f"private counts of {stage} were not recorded (set ${ENV} to an operator-only "
                "file to keep them); they are never printed")
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"diagnostic.private": True, "stage": stage, "dataset": dataset,
              "at": datetime.now(UTC).isoformat(), **payload}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, default=jsonable, sort_keys=True) + "\n")
    return f"private counts of {stage} (diagnostic.private=true) are in the operator log {path}"

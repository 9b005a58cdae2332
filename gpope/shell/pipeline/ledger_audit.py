"""The privacy ledger's readers refuse commits gpope does not write (local lakes, no JVM).

gpope only appends to ``gold/privacy_ledger`` (with a ``commitInfo`` recording the rows' identities,
:data:`gpope.shell.pipeline.ledger_store.ROWS_KEY`), changes a table property or compacts it
(``OPTIMIZE``, ``dataChange: false``). Anything else could lower the reported spend (a forged
``remove`` resets a dataset's spend), so :func:`audit_log` refuses it before any budget is folded,
and refuses a table that lost rows a retained commit recorded. Commits older than the log's
retention cannot be audited; runs released in the lake but unknown to the ledger are charged by
``gpope budget reconcile``.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpope.errors import CorruptTableError

__all__ = ["REPAIR", "audit_log", "unreadable"]

#: What an operator does about a ledger its readers refuse.
REPAIR = (
    "Restore gold/privacy_ledger from a backup (gpope never rewrites or removes ledger rows); "
    "without one, move the table aside and run `gpope budget reconcile`, which charges every run "
    "released in the lake again, then set each budget with `gpope budget set`."
)


def _refuse(path: str, what: str) -> CorruptTableError:
    return CorruptTableError(f"The privacy ledger at {path} {what}. {REPAIR}")


def unreadable(path: str, exc: BaseException) -> CorruptTableError:
    """The one-line error for a ledger whose data cannot be read (e.g. a missing Parquet file)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return _refuse(path, f"cannot be read ({type(exc).__name__}: {first[:200]})")


def _actions(file: Path, path: str) -> list[dict]:
    try:
        text = file.read_text(encoding="utf-8")
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise _refuse(path, f"has a damaged commit file {file.name} ({type(exc).__name__})") from None


def audit_log(path: str, row_keys: set[str], rows_key: str, *, version: int | None = None) -> None:
    """Raise CorruptTableError for a local ledger holding a commit gpope does not write, a damaged
    commit file, or missing rows (``row_keys``: the rows the table holds; ``version``: audit the
    commits up to it)."""
    log = Path(path) / "_delta_log"
    if not log.is_dir():
        return
    files = sorted(f for f in log.iterdir()
                   if len(f.name) == 25 and f.name.endswith(".json") and f.name[:20].isdigit())
    recorded: dict[str, int] = {}
    for file in files:
        number = int(file.name[:20])
        if version is not None and number > version:
            continue
        actions = _actions(file, path)
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
        if not isinstance(info, dict):
            raise _refuse(path, f"has commit {number} without commitInfo, which gpope never "
                                "writes")
        removes = [a["remove"] for a in actions if "remove" in a]
        compaction = str(info.get("operation", "")).upper() == "OPTIMIZE"
        if removes and (not compaction or any(r.get("dataChange") is not False for r in removes)):
            raise _refuse(path, f"has commit {number} that removes rows ({len(removes)} remove "
                                "action(s)); the ledger is append-only, so its spend cannot be "
                                "trusted")
        value = info.get(rows_key)
        try:
            keys = json.loads(value) if isinstance(value, str) else []
        except ValueError:
            keys = []
        for key in keys if isinstance(keys, list) else ():
            if isinstance(key, str):
                recorded.setdefault(key, number)
    missing = sorted(set(recorded) - row_keys, key=lambda k: recorded[k])
    if missing:
        raise _refuse(path, f"no longer holds {len(missing)} row(s) its commits added (first: "
                            f"{missing[0]!r}, commit {recorded[missing[0]]}); its spend cannot be "
                            "trusted")

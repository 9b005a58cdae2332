"""The layers' boundaries, read from the source with ast (every import counts: top level, inside
functions, under TYPE_CHECKING): the CLI reaches the pipeline and the lake through gpope.api
only, and only the lake (gpope/shell/lake/) knows that delta-rs reads and writes Delta tables; and
the package's shape: the core's root holds at most 20 modules (concepts grow a subpackage), no
module reaches 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import gpope

ROOT = Path(gpope.__file__).parent


def imported(path: Path, package: str) -> set[str]:
    """The absolute module names ``path`` imports (``from a import b`` counts as ``a`` and
    ``a.b``; relative imports are resolved against ``package``, the file's package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def crossing(paths: list[Path], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """Per file, the imports that fall under one of the ``forbidden`` packages."""
    out = {}
    for path in paths:
        package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
        bad = sorted(n for n in imported(path, package)
                     if any(n == f or n.startswith(f + ".") for f in forbidden))
        if bad:
            out[path.name] = bad
    return out


def test_the_checker_sees_nested_and_relative_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    from gpope.shell.pipeline.ledger import PrivacyLedger\n"
                      "from ..shell import lake\n")
    assert imported(sample, "gpope.cli") == {
        "gpope.shell.pipeline.ledger", "gpope.shell.pipeline.ledger.PrivacyLedger",
        "gpope.shell", "gpope.shell.lake"}


def test_cli_imports_no_pipeline_or_lake_module():
    cli = sorted((ROOT / "cli").rglob("*.py"))
    assert len(cli) > 10
    assert crossing(cli, ("gpope.shell.pipeline", "gpope.shell.lake")) == {}
    entry = [ROOT / "shell" / "entrypoints.py"]
    assert crossing(entry, ("gpope.shell.pipeline",)) != {}  # the checker reads real modules


def test_only_the_lake_imports_delta_rs():
    outside = sorted(p for p in ROOT.rglob("*.py") if (ROOT / "shell" / "lake") not in p.parents)
    assert ROOT / "shell" / "pipeline" / "ledger_store.py" in outside
    assert crossing(outside, ("deltalake", "gpope.shell.lake.delta_rs")) == {}


def test_the_core_root_holds_at_most_20_modules():
    root = [p.name for p in (ROOT / "core").glob("*.py") if p.name != "__init__.py"]
    assert "spec.py" in root
    assert len(root) <= 20, sorted(root)


def test_no_module_reaches_600_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert sizes["api.py"] > 100
    assert {name: n for name, n in sizes.items() if n >= 600} == {}

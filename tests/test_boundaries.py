"""The layers' boundaries, read from the source with ast (every import counts: top level, inside
functions, under TYPE_CHECKING), and the package's shape.

- The CLI (gpope/cli/) parses arguments and prints: it reaches the product through ``gpope.api``
  only. Besides the api it imports its own package, the package's version, and the modules that
  start nothing and read no table: ``gpope.errors`` (the messages it prints), ``gpope.jsonable``
  (JSON output), ``gpope.config`` (the configuration type) and the pure core ``gpope.core`` (its
  registries for ``choices=``, and the calculators ``gpope accountant`` and ``gpope audit`` run
  without data). Nothing of ``gpope.shell`` (pipeline, lake, query, tracking, process control).
- Only the lake (gpope/shell/lake/) knows that delta-rs reads and writes Delta tables.
- The core's root holds at most 20 modules (concepts grow a subpackage); no module reaches 600
  lines.
"""

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


#: What a CLI module may import of gpope (a name, or a package and everything under it).
CLI_MAY_IMPORT = ("gpope.api", "gpope.cli", "gpope.errors", "gpope.jsonable", "gpope.config",
                  "gpope.core")


def outside_allowed(paths: list[Path], allowed: tuple[str, ...]) -> dict[str, list[str]]:
    """Per file, the gpope modules it imports that are not under one of ``allowed`` (the
    package itself and its ``__version__`` always are)."""
    out = {}
    for path in paths:
        package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts[:-1])
        bad = sorted(n for n in imported(path, package)
                     if n.startswith("gpope.") and n != "gpope.__version__"
                     and not any(n == a or n.startswith(a + ".") for a in allowed))
        if bad:
            out[path.name] = bad
    return out


def test_cli_imports_gpope_api_and_no_shell_module():
    cli = sorted((ROOT / "cli").rglob("*.py"))
    assert len(cli) > 10
    assert outside_allowed(cli, CLI_MAY_IMPORT) == {}
    assert crossing(cli, ("gpope.shell",)) == {}
    # the checker reads real modules: the api itself reaches into the shell
    assert outside_allowed([ROOT / "api.py"], CLI_MAY_IMPORT) != {}


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

"""The developer tools stay apart from the pipeline: they import it, it never imports them."""

from __future__ import annotations

import ast
from pathlib import Path

import vitladder


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-local imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def test_no_pipeline_module_imports_the_developer_tools():
    package = Path(vitladder.__file__).parent
    pipeline = [path for path in package.rglob("*.py") if "devtools" not in path.relative_to(package).parts]
    assert len(pipeline) > 20  # the walk found the package
    importers = {
        str(path.relative_to(package)): sorted(name for name in imported_modules(path) if "devtools" in name)
        for path in pipeline
    }
    assert {path: names for path, names in importers.items() if names} == {}

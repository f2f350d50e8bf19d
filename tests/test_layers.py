"""The package's layers, as its files state them (read with ast, lazy imports in functions included): no two
modules import each other, even through others, no module imports a layer above its own, and no code below or
beside a data source normalises with that source's statistics by default. A plugin reached by its name
(importlib: config_schema's data sources, data/sources/' and analysis/probes/' own lookups) is no import here."""

from __future__ import annotations

import ast
import graphlib
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vitladder"

# Bottom to top. A module belongs to the layer of the longest name here that it is or sits under, so the
# bottom layer holds every module directly under vitladder/ (errors, the config and its schema, the run
# folder, file I/O) except those at the top (the entry points' helpers, the pipeline that gives training its
# analysis); a new package is in it until it is named here.
LAYERS = (
    ("vitladder",),
    ("vitladder.wandb",),
    ("vitladder.data",),
    ("vitladder.model",),
    ("vitladder.training",),
    ("vitladder.analysis",),
    ("vitladder.report",),
    ("vitladder.demo",),
    ("vitladder.cli", "vitladder.devtools", "vitladder.pipeline"),
)


def module_files(package: Path) -> dict[str, Path]:
    """Every module's dotted name (a package's is its __init__.py's) -> its file."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules its file imports (`from a import b` imports module a.b when there is one)."""
    files = module_files(package)
    graph = {}
    for name, path in files.items():
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{path}:{node.lineno}: import by the absolute name"
                named.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        graph[name] = {module for module in named if module in files and module != name}
    return graph


def layer(module: str) -> int:
    return max(
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or module.startswith(f"{prefix}.")
    )[1]


def upward_arrows(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (module, target) for module, targets in graph.items() for target in targets if layer(target) > layer(module)
    }


def test_no_modules_import_each_other() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as error:
        pytest.fail(f"an import cycle: {' -> '.join(reversed(error.args[1]))}")


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [f"{module} imports {target}" for module, target in sorted(upward_arrows(import_graph()))]
    assert not upward, f"a layer imports one above it: {'; '.join(upward)}"


def test_an_import_of_a_layer_above_is_an_upward_arrow() -> None:
    # The arrow issue 23 removed (training gave itself the analysis), and the same and lower layers for contrast.
    graph = {
        "vitladder.training.run": {"vitladder.analysis.callback", "vitladder.training.axes", "vitladder.errors"},
        "vitladder.pipeline": {"vitladder.analysis.callback", "vitladder.training.run"},
        "vitladder.devtools.gpu_check": {"vitladder.pipeline"},
    }
    assert upward_arrows(graph) == {("vitladder.training.run", "vitladder.analysis.callback")}


def defaults(tree: ast.AST):
    """(the parameter or field, its default) for every default of a function's parameter or a class's field."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            positional = [*node.args.posonlyargs, *node.args.args]
            yield from zip(positional[len(positional) - len(node.args.defaults) :], node.args.defaults)
            yield from ((arg, value) for arg, value in zip(node.args.kwonlyargs, node.args.kw_defaults) if value)
        elif isinstance(node, ast.ClassDef):
            yield from ((f, f.value) for f in node.body if isinstance(f, ast.AnnAssign) and f.value is not None)


def names_statistics(node: ast.arg | ast.AnnAssign, value: ast.expr) -> bool:
    """Whether a default is a set of statistics: a named constant, or anything but None for a ChannelStats."""
    text = ast.unparse(value)
    annotation = ast.unparse(node.annotation) if node.annotation is not None else ""
    return bool(re.search(r"STATS|MEAN\b|STD\b", text)) or (
        "ChannelStats" in annotation and text not in ("None", "field(kw_only=True)")
    )


def test_no_statistics_are_a_default() -> None:
    """Normalisation takes the run's statistics (data/stats.py) from its caller: a default would normalise silently
    with CIFAR-10's. None (none known) and a required dataclass field are no default."""
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{value.lineno}: {ast.unparse(value)}"
        for path in module_files(PACKAGE).values()
        for node, value in defaults(ast.parse(path.read_text()))
        if names_statistics(node, value)
    ]
    assert not found, f"statistics as a default: {'; '.join(found)}"


def imported_libraries(path: Path) -> set[str]:
    """The top-level names of what a file imports (``import a.b`` and ``from a.b import c``: ``a``)."""
    tree = ast.parse(path.read_text(), str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {name.split(".")[0] for name in names}


def test_all_wandb_code_is_in_one_package() -> None:
    """Only vitladder.wandb imports the W&B libraries; the layers above hand it plain data (issue 23)."""
    outside = [
        name
        for name, path in module_files(PACKAGE).items()
        if not (name == "vitladder.wandb" or name.startswith("vitladder.wandb."))
        and imported_libraries(path) & {"wandb", "wandb_workspaces"}
    ]
    assert not outside, f"W&B imported outside vitladder.wandb: {', '.join(outside)}"

"""The shape of the code, as docs/development.md describes it: modules small enough to read in one
sitting, imports that form no cycle and point down the layers, every module importable alone, and
every module named in the module map."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "pipeline"
LAYERS = ["commands", "operations", "forgeloop", "forge", "sql", "storage"]  # top down; the rest are leaves


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(("loopmeter", *parts))
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules `name` imports, wherever in it (lazy imports inside functions too)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join([*base, *([node.module] if node.module else [])]) if node.level else (node.module or "")
            submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known]
            found.update(submodules)
            if target in known and len(submodules) < len(node.names):
                found.add(target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
    found.discard(name)
    return found


def layer(name: str) -> int | None:
    parts = name.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def test_no_module_is_over_500_lines():
    long = {name: len(path.read_text().splitlines()) for name, path in modules().items()}
    assert {name: lines for name, lines in long.items() if lines > 500} == {}


def test_the_imports_form_no_cycle():
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                cycles.append(path[path.index(child):] + [child])
            elif child not in state:
                visit(child, path + [child])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_imports_point_down_the_layers():
    """commands -> operations -> forgeloop, forge -> sql -> storage -> the leaves; the storage's table
    registry reads the areas' table declarations (leaves of their own)."""
    known = modules()
    declarations = {"loopmeter.forgeloop.tables", "loopmeter.forgeloop.schema", "loopmeter.forgeloop.scenarios",
                    "loopmeter.forgeloop.contract", "loopmeter.forge.tables"}
    upward = []
    for name, path in known.items():
        mine = layer(name)
        for target in imports(name, path, known):
            theirs = layer(target)
            if theirs is None or mine is None or target in declarations:
                continue
            if theirs < mine and not (mine == theirs):
                upward.append((name, target))
    leaves_up = [(name, target) for name, path in known.items() if layer(name) is None and name.count(".") == 1
                 for target in imports(name, path, known) if layer(target) in (0, 1) and name != "loopmeter.cli"]
    assert upward == [] and leaves_up == []


def test_the_module_map_names_every_module():
    text = (ROOT / "docs" / "development.md").read_text()
    missing = []
    for name, path in modules().items():
        relative = str(path.relative_to(PACKAGE))
        if f"`{relative}`" not in text and f"`{path.name}`" not in text:
            missing.append(relative)
    assert missing == []


# One interpreter imports each module in turn with none of the package loaded before it: a module
# that works only when another was imported first fails here, as it would alone in a new process.
ALONE = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [module for module in sys.modules if module.split(".")[0] == "loopmeter"]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        failed.append((name, traceback.format_exc()[-500:]))
print(repr(failed))
"""


@pytest.mark.slow
def test_every_module_imports_alone():
    names = [name for name in sorted(modules()) if name != "loopmeter.__main__"]  # importing it runs the program
    done = subprocess.run([sys.executable, "-c", ALONE, *names], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_duckdb_is_imported_in_one_place():
    """`duckdb_module` imports DuckDB with Ctrl-C held back (its loader aborts the process on a
    KeyboardInterrupt); every other module takes it from there (a type annotation's import aside)."""
    direct = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text())
        annotations_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                            and ast.unparse(block.test) == "TYPE_CHECKING" for node in ast.walk(block)}
        direct += [name for node in ast.walk(tree) if id(node) not in annotations_only and (
            (isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "duckdb" for alias in node.names))
            or (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "duckdb"))]
    assert direct == ["loopmeter.duckdb_module"]

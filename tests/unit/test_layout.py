"""The tree stays readable: no module of the product or its tools over ``MAX_LINES`` lines,
and no import circle among the project's modules (a circle means two modules are one
concept split in two, or a story that cannot be read top-down)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

from seckill_local.checkout import ROOT

MAX_LINES = 500
# Each top-level package and the folder it lives in; functions/ and scripts/ hold entry points.
PACKAGES = {
    "seckill": ROOT / "layers" / "seckill",
    "seckill_ops": ROOT / "ops" / "seckill_ops",
    "seckill_demo": ROOT / "demo" / "seckill_demo",
    "seckill_local": ROOT / "local" / "seckill_local",
    "benchmarks": ROOT / "benchmarks",
    "scripts": ROOT / "scripts",
    "functions": ROOT / "functions",
}


def modules() -> dict[str, Path]:
    """Every first-party module by dotted name (a package by its ``__init__``)."""
    found = {}
    for top, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if any(part.startswith(".") or part == "node_modules" for part in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((top, *parts))] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The first-party modules a module imports, anywhere in it (a function-level import
    that dodges a circle is still one)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in known and target != name}
    return found


def test_no_module_is_over_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules().values()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split by concern: {long}"


def test_no_import_circle() -> None:
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")

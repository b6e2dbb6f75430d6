"""The code uses only the public names of the libraries it depends on: a name with a
leading underscore is a library's own to rename or drop in any release, and a locked
build would then break at its next `make lock`. Checked over every Python file of the
tree (the product, the functions, the tools, the scripts and the tests): no import of
such a name (``from lib.mod import _name``, ``import lib._mod``) and no such attribute
of an imported name (``lib.mod._name``). The standard library and the project's own
packages are not concerned."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

from seckill_local.checkout import ROOT

# Folders that hold no code of the project: virtualenvs, caches, build output, Node.js.
NOT_OURS = {"node_modules", "build", "dist"}


def first_party() -> set[str]:
    """The project's top-level packages: ruff's known-first-party, and the tree's folders of code."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {*config["tool"]["ruff"]["lint"]["isort"]["known-first-party"], "tests", "scripts", "functions"}


def python_files() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if not any(part.startswith(".") or part in NOT_OURS for part in path.relative_to(ROOT).parts[:-1])
    )


def private(name: str) -> bool:
    """A leading underscore, dunders (``__version__``) aside, in any dotted segment."""
    return any(part.startswith("_") and not part.endswith("__") for part in name.split("."))


def private_uses(source: str, ours: set[str]) -> list[str]:
    """Each use of a third-party library's private name in the source, as ``line: what``."""
    tree = ast.parse(source)

    def third_party(module: str) -> bool:
        top = module.partition(".")[0]
        return top not in ours and top not in sys.stdlib_module_names

    imported: dict[str, str] = {}  # a local name bound to a third-party module or object -> what it is
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if third_party(alias.name):
                    if private(alias.name):
                        found.append(f"{node.lineno}: import {alias.name}")
                    local = alias.asname or alias.name.partition(".")[0]
                    imported[local] = alias.name if alias.asname else local
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and third_party(node.module):
            for alias in node.names:
                if private(node.module) or private(alias.name):
                    found.append(f"{node.lineno}: from {node.module} import {alias.name}")
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in imported:
                found.append(f"{node.lineno}: {'.'.join([imported[value.id], *reversed(chain)])}")
    return found


def test_no_file_uses_a_private_name_of_a_library() -> None:
    ours = first_party()
    files = python_files()
    assert ROOT / "layers" / "seckill" / "infra" / "logcontext.py" in files
    found = {
        str(path.relative_to(ROOT)): uses
        for path in files
        if (uses := private_uses(path.read_text(encoding="utf-8"), ours))
    }
    assert not found, f"private names of libraries (use a public way): {found}"


def test_the_checker_sees_each_form_and_spares_the_standard_library_and_the_project() -> None:
    source = """
import os, sys
import redis._parsers as parsers
import pydantic
from aws_lambda_powertools.logging.logger import _is_cold_start
from aws_lambda_powertools.logging import logger as powertools_logger
from redis import Redis
from seckill.infra import _internal
from . import _sibling

sys._getframe()
os._exit
powertools_logger.is_cold_start
powertools_logger._is_cold_start
pydantic.fields._Unset
Redis._connection
pydantic.__version__
_internal._value
"""
    assert private_uses(source, {"seckill"}) == [
        "3: import redis._parsers",
        "5: from aws_lambda_powertools.logging.logger import _is_cold_start",
        "14: aws_lambda_powertools.logging.logger._is_cold_start",
        "15: pydantic.fields._Unset",
        "16: redis.Redis._connection",
    ]

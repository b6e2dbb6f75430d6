"""Each distribution ships every package of its tree: a package left out of ``packages`` installs as a hole."""

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ["", "ops", "demo", "local", "benchmarks"]


def packages_on_disk(folder: Path, config: dict) -> set[str]:
    setup = config["tool"]["setuptools"]
    roots = setup.get("package-dir", {})
    found = set()
    for name in setup["packages"]:
        top = name.split(".")[0]
        base = folder / roots.get(top, top)
        found |= {
            ".".join([top, *init.parent.relative_to(base).parts])
            for init in base.rglob("__init__.py")
            if not any(part.startswith(".") for part in init.relative_to(base).parts)
        }
    return found


@pytest.mark.parametrize("where", DISTRIBUTIONS, ids=lambda where: where or "product")
def test_every_package_in_the_tree_is_listed(where: str) -> None:
    folder = ROOT / where
    config = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
    listed = set(config["tool"]["setuptools"]["packages"])
    assert packages_on_disk(folder, config) <= listed

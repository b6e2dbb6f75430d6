"""Each distribution installed as docs/architecture.md documents it, in a clean
virtualenv of its own: every console script answers ``--help``, the product ships
none of the tools' commands or dependencies, and each tool brings what it imports.

The virtualenvs have no pip of their own: the suite's uv installs into them (pip's
resolver and metadata, in seconds where pip took minutes for the five), from its
cache; each is made once per run, for the tests that use it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from seckill_local.checkout import ROOT

pytestmark = pytest.mark.e2e

# A name -> what `pip install` is given for it (docs/architecture.md's "install" column).
INSTALLS = {
    "product": [str(ROOT)],
    "ops": [str(ROOT), str(ROOT / "ops")],
    "local": ["-e", str(ROOT), "-e", str(ROOT / "local")],
    "demo": ["-e", str(ROOT), "-e", str(ROOT / "ops"), "-e", str(ROOT / "local"), "-e", str(ROOT / "demo")],
    "bench": [
        *("-e", str(ROOT), "-e", str(ROOT / "ops"), "-e", str(ROOT / "local"), "-e", str(ROOT / "demo")),
        *("-e", str(ROOT / "benchmarks")),
    ],
}
# The commands each install brings, as its distributions declare them.
OPS = {
    *("seckill-dlq-replay", "seckill-reconcile", "seckill-recovery", "seckill-migrate"),
    *("seckill-capacity", "seckill-draw"),
}
LOCAL = {"seckill-local", "seckill-tokens", "seckill-openapi", "seckill-edge-function"}
COMMANDS = {
    "product": set(),
    "ops": OPS,
    "local": LOCAL,
    "demo": OPS | LOCAL | {"seckill-flash-sale"},
    "bench": OPS | LOCAL | {"seckill-flash-sale", "seckill-bench"},
}
# What each install must not bring: the tools' dependencies stay out of what does not import them.
ABSENT = {
    "product": ["rich", "yaml", "moto", "matplotlib"],
    "ops": ["yaml", "moto", "matplotlib"],
    "local": ["rich", "matplotlib"],
    "demo": ["gunicorn", "waitress"],
    "bench": [],
}
UV = str(Path(sys.executable).with_name("uv"))  # make setup installs it in the suite's virtualenv
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> functools.partial[Path]:
    """The bin/ of a clean virtualenv holding one install, made at its first use."""
    return functools.partial(_install, tmp_path_factory.mktemp("installs"))


@functools.cache
def _install(root: Path, name: str) -> Path:
    target = root / name
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    done = subprocess.run(  # noqa: S603
        [UV, "pip", "install", "--python", str(python), "--quiet", *INSTALLS[name]],
        capture_output=True,
        text=True,
        env=CLEAN_ENV,
        check=False,
    )
    assert done.returncode == 0, f"pip install {' '.join(INSTALLS[name])}:\n{done.stderr[-3000:]}"
    return target / "bin"


def run_in(bin_dir: Path, command: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # Run from outside the checkout: only what the install put in the virtualenv is found.
    return subprocess.run(  # noqa: S603
        [str(bin_dir / command), *args],
        capture_output=True,
        text=True,
        env=CLEAN_ENV,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("name", sorted(INSTALLS))
def test_each_install_brings_its_commands_and_their_help(
    installed: functools.partial[Path], name: str, tmp_path: Path
) -> None:
    bin_dir = installed(name)
    present = {p.name for p in bin_dir.iterdir() if p.name.startswith("seckill-")}
    assert present == COMMANDS[name]
    for command in sorted(present):
        done = run_in(bin_dir, command, "--help", cwd=tmp_path)
        assert done.returncode == 0, f"{command} --help:\n{done.stderr[-3000:]}"
        assert done.stdout.startswith("usage: "), f"{command}: {done.stdout[:200]}"


@pytest.mark.parametrize("name", sorted(INSTALLS))
def test_each_install_leaves_out_what_it_does_not_import(
    installed: functools.partial[Path], name: str, tmp_path: Path
) -> None:
    check = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    done = run_in(installed(name), "python", "-c", check, *ABSENT[name], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []


def test_seckill_capacity_runs_in_the_ops_install_and_says_what_plot_needs(
    installed: functools.partial[Path], tmp_path: Path
) -> None:
    bin_dir = installed("ops")
    done = run_in(bin_dir, "seckill-capacity", "--users", "1000", "--stock", "10", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "First wall with the edge" in done.stdout
    # matplotlib is the [plot] extra's: the plain install has none.
    done = run_in(bin_dir, "seckill-capacity", "--plot", str(tmp_path / "c.png"), cwd=tmp_path)
    assert done.returncode == 2
    assert "seckill-ops[plot]" in done.stderr


def test_the_product_alone_imports_every_module_and_finds_its_scripts(
    installed: functools.partial[Path], tmp_path: Path
) -> None:
    # A non-editable install: a sub-package or data file left out of pyproject.toml is missing here.
    modules = sorted(
        ".".join(("seckill", *path.relative_to(ROOT / "layers" / "seckill").with_suffix("").parts))
        for path in (ROOT / "layers" / "seckill").rglob("*.py")
    )
    check = (
        "import importlib, importlib.resources, sys\n"
        "for name in sys.argv[1:]:\n"
        "    importlib.import_module(name.removesuffix('.__init__'))\n"
        "package = importlib.resources.files('seckill')\n"
        "assert (package / 'lua' / 'gate.lua').is_file() and (package / 'lua' / 'lib' / 'mark.lua').is_file()\n"
        "assert (package / 'schema.sql').is_file() and (package / 'py.typed').is_file()\n"
        "print(package)\n"
    )
    done = run_in(installed("product"), "python", "-c", check, *modules, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "site-packages" in done.stdout  # the install's copy, not the checkout

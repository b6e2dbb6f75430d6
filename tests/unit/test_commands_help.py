"""The installed commands: present, each with --help, and clear when a service is unreachable."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import distribution
from pathlib import Path

import pytest

from seckill_local.checkout import ROOT
from tests.helpers import closed_port, run_python

# The distributions make setup installs (editable), by folder, and the commands each declares.
DISTRIBUTIONS = {
    folder: tomllib.loads((ROOT / folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for folder in (".", "ops", "local", "demo")
}
COMMANDS = {name: target for project in DISTRIBUTIONS.values() for name, target in project.get("scripts", {}).items()}


def test_seckill_tokens_says_when_redis_is_unreachable(tmp_path: Path) -> None:
    done = run_python(
        "-m",
        "seckill_local.tokens_command",
        "--count",
        "1",
        "--out",
        str(tmp_path / "t.txt"),
        "--redis-url",
        f"redis://127.0.0.1:{closed_port()}/0",
    )
    assert done.returncode == 2
    assert "cannot write tokens to Redis" in done.stderr


def test_the_commands_are_installed() -> None:
    for project in DISTRIBUTIONS.values():
        installed = {ep.name: ep.value for ep in distribution(project["name"]).entry_points}
        assert installed == project.get("scripts", {}), project["name"]
    assert "seckill-flash-sale" in COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_installed_command_answers_help(command: str) -> None:
    path = Path(sys.executable).parent / command
    done = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {command} "), done.stdout[:200]

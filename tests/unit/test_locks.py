"""Every install is from a lock: each ``requirements*.in`` of the tree has its lock beside
it, every locked requirement is pinned to one version with its hashes, the lock still
admits what its ``.in`` asks (an edit to the ``.in`` without `make lock` fails here),
`make lock` compiles every ``.in`` (a new function's included), and no other
requirements file installs anything unlocked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from seckill_local.checkout import ROOT
from tests.locks import direct, entries, requirement_files

INPUTS = requirement_files(".in")
# The one requirements file that is not a lock: this checkout's distributions, editable.
OWN = ROOT / "requirements-own.txt"


def name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_layer_every_function_with_requirements_and_each_tool_have_an_input() -> None:
    assert {name(p) for p in INPUTS} >= {
        "layers/requirements.in",
        "functions/edge_publisher/requirements.in",
        "requirements-dev.in",
        "requirements-sam.in",
        "requirements-checkov.in",
    }


@pytest.mark.parametrize("source", INPUTS, ids=name)
def test_each_lock_pins_every_requirement_with_hashes_and_admits_its_input(source: Path) -> None:
    lock = source.with_suffix(".txt")
    assert lock.is_file(), f"{name(lock)} missing: make lock"
    locked = entries(lock)
    unpinned = [str(e.requirement) for e in locked if not str(e.requirement.specifier).startswith("==")]
    unhashed = [str(e.requirement) for e in locked if not e.hashes]
    assert not unpinned, f"{name(lock)}: not pinned to one version: {unpinned}"
    assert not unhashed, f"{name(lock)}: without hashes: {unhashed}"
    versions: dict[str, list[str]] = {}
    for e in locked:
        versions.setdefault(canonicalize_name(e.requirement.name), []).append(str(e.requirement.specifier)[2:])
    stale = [
        str(wanted)
        for wanted in direct(source)
        if not any(wanted.specifier.contains(v) for v in versions.get(canonicalize_name(wanted.name), []))
    ]
    assert not stale, f"{name(lock)} does not satisfy {name(source)} for {stale}: make lock"


def test_no_requirements_file_but_the_checkouts_own_is_without_a_lock_input() -> None:
    files = requirement_files(".txt")
    assert OWN in files
    own = [line for line in OWN.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    assert own, "requirements-own.txt names no distribution"
    assert all(line.startswith("-e ") for line in own), own
    hand_written = [name(path) for path in files if path != OWN and not path.with_suffix(".in").is_file()]
    assert not hand_written, f"requirements with no .in to lock them from (rename it .in, make lock): {hand_written}"


def test_make_lock_compiles_every_input() -> None:
    make = ["make", "-n", "lock"]  # -n: what it would run, running nothing
    planned = subprocess.run(make, cwd=ROOT, capture_output=True, text=True, check=True, timeout=60).stdout  # noqa: S603
    commands = [c.split() for line in planned.splitlines() for c in line.split("&&") if "pip compile" in c]
    compiled = {(next(w for w in words if w.endswith(".in")), words[words.index("-o") + 1]) for words in commands}
    assert compiled == {(name(p), name(p.with_suffix(".txt"))) for p in INPUTS}

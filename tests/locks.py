"""The project's locks, read: each ``X.txt`` that `make lock` compiles (uv pip compile,
with hashes) from the short list ``X.in`` beside it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from seckill_local.checkout import ROOT


@dataclass(frozen=True)
class Locked:
    requirement: Requirement
    hashes: tuple[str, ...]


def requirement_files(suffix: str) -> list[Path]:
    """Every ``requirements*`` file of the tree with the suffix (virtualenvs, caches and Node.js left out)."""
    return sorted(
        path
        for path in ROOT.rglob(f"requirements*{suffix}")
        if not any(part.startswith(".") or part == "node_modules" for part in path.relative_to(ROOT).parts)
    )


def entries(lock: Path) -> list[Locked]:
    """The lock's requirements, each with its hashes (continued lines joined, comments dropped)."""
    found = []
    for line in lock.read_text(encoding="utf-8").replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            requirement, *hashes = line.split(" --hash=")
            found.append(Locked(Requirement(requirement), tuple(h.strip() for h in hashes)))
    return found


def pins(lock: Path) -> dict[str, str]:
    """Name (normalized) -> version, for a lock of one platform (each name once)."""
    found = {}
    for entry in entries(lock):
        name = canonicalize_name(entry.requirement.name)
        assert name not in found, f"{lock}: {name} twice"
        (spec,) = entry.requirement.specifier
        found[name] = spec.version
    return found


def direct(source: Path) -> list[Requirement]:
    """The ``.in``'s own requirements and those of the ``.in`` files it includes (``-r``);
    editable installs of the checkout and ``-r`` of another list are not locked."""
    found = []
    for raw in source.read_text(encoding="utf-8").splitlines():
        line = raw.split("#")[0].strip()
        if line.startswith("-r ") and line.endswith(".in"):
            found += direct(source.parent / line.removeprefix("-r ").strip())
        elif line and not line.startswith("-"):
            found.append(Requirement(line))
    return found

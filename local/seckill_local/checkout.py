"""The checkout the tools work in: the one repository root every tool and test finds
``template.yaml``, ``functions/``, ``lua/``, ``events/`` and ``docs/`` under.

The tools are installed editable from it (``pip install -e ./local``), so the root is
this package's own checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"


def write_or_check(path: Path, wanted: str, *, check: bool, stale: str, current: str, written: str) -> int:
    """A file of the checkout that a command generates: written (printing ``written``), or
    with ``check`` compared with ``wanted``, writing nothing: exit 1 with ``stale`` on
    standard error when it differs (or is missing), else 0 with ``current``."""
    if check:
        if (path.read_text(encoding="utf-8") if path.exists() else "") != wanted:
            print(stale, file=sys.stderr)
            return 1
        print(current)
        return 0
    path.write_text(wanted, encoding="utf-8")
    print(written)
    return 0

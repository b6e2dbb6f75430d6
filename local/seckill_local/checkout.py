"""The checkout the tools work in: the one repository root every tool and test finds
``template.yaml``, ``functions/``, ``lua/``, ``events/`` and ``docs/`` under.

The tools are installed editable from it (``pip install -e ./local``), so the root is
this package's own checkout.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"

#!/usr/bin/env python3
"""The DLQ replay command from a checkout: ``python scripts/dlq_replay.py --help``.

The same command as the installed ``seckill-dlq-replay`` (``ops/seckill_ops/dlq_replay.py``);
this path only lets it run from the repository without installing the project.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ops"))

from seckill_ops.dlq_replay import main

if __name__ == "__main__":
    sys.exit(main())

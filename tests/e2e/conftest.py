"""The end-to-end level's spread over pytest-xdist's workers (``--dist loadgroup``)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
# Each of these tests is a whole run of its own (a sale, the benchmarks) in its own
# database: they go one by one to whichever worker is free. Every other file's tests
# share the servers or the build its fixtures start, so they stay together on one worker.
STANDALONE = {"test_flash_sale.py", "test_bench.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent == HERE and item.path.name not in STANDALONE:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))

"""The integration level's own fixtures: the local edge in front of a stand-in for the API
(``tests.helpers.Upstream``), as test_edge_local and test_key_rotation drive it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from seckill_local.edge import EdgeServer
from tests.helpers import Upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def edge(upstream: Upstream) -> Iterator[EdgeServer]:
    with EdgeServer(upstream.url) as server:
        yield server

"""A client made when it is first used (imports nothing else: the edge publisher, outside
the VPC, uses it without Redis or MySQL)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class OnFirstUse:
    """Stands in for a client that is made when it is first used (any attribute
    read), once, whichever thread gets there first."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._client: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The client, made now if it was not yet."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
        return self._client

    @property
    def made(self) -> bool:
        return self._client is not None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)

"""The functions' Powertools Tracer, without the X-Ray SDK where nothing is traced.

Powertools' Tracer imports the X-Ray SDK's recorder (and with it botocore's
session, for the sampling rules) even when tracing is off, and still wraps each
decorated call in the SDK's dummy segments. Where Powertools would disable
tracing (``POWERTOOLS_TRACE_DISABLED``, or outside Lambda), the Tracer gets a
provider that records nothing instead, so a cold start skips the SDK. Where it
traces, it is Powertools' Tracer with the X-Ray recorder, as before.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aws_lambda_powertools import Tracer
from aws_lambda_powertools.tracing.base import BaseProvider, BaseSegment


class _NoSegment(BaseSegment):
    def close(self, end_time: int | None = None) -> None:
        pass

    def add_subsegment(self, subsegment: Any) -> None:
        pass

    def remove_subsegment(self, subsegment: Any) -> None:
        pass

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def add_exception(self, exception: BaseException, stack: Any, remote: bool = False) -> None:
        pass


class Untraced(BaseProvider):
    """A provider that records nothing: what the X-Ray SDK does while disabled, without the SDK."""

    _segment = _NoSegment()

    @contextmanager
    def in_subsegment(self, name: str | None = None, **kwargs: Any) -> Generator[BaseSegment, None, None]:
        yield self._segment

    @asynccontextmanager
    async def in_subsegment_async(self, name: str | None = None, **kwargs: Any) -> AsyncGenerator[BaseSegment, None]:
        yield self._segment

    def put_annotation(self, key: str, value: Any) -> None:
        pass

    def put_metadata(self, key: str, value: Any, namespace: str = "default") -> None:
        pass

    def patch(self, modules: Sequence[str]) -> None:
        pass

    def patch_all(self) -> None:
        pass


def tracer(patch_modules: Sequence[str] | None = None) -> Tracer:
    """Powertools' Tracer (patching ``patch_modules`` when it traces); untraced by Powertools' own rule."""
    # Powertools' check itself (environment only), so the two can never disagree on when to trace.
    if Tracer._is_tracer_disabled():
        return Tracer(disabled=True, provider=Untraced(), patch_modules=patch_modules)
    return Tracer(patch_modules=patch_modules)

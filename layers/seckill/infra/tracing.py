"""The functions' Powertools Tracer, without the X-Ray SDK where nothing is traced.

Powertools' Tracer imports the X-Ray SDK's recorder (and with it botocore's
session, for the sampling rules) even when tracing is off, and still wraps each
decorated call in the SDK's dummy segments. Where Powertools would disable
tracing (``POWERTOOLS_TRACE_DISABLED``, or outside Lambda), the Tracer gets a
provider that records nothing instead, so a cold start skips the SDK. Where it
traces, it is Powertools' Tracer with the X-Ray recorder, as before.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Generator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from aws_lambda_powertools import Tracer
from aws_lambda_powertools.shared import constants
from aws_lambda_powertools.shared.functions import resolve_truthy_env_var_choice
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


def tracing_disabled() -> bool:
    """Powertools' rule for when its Tracer traces nothing, from the same variables: disabled
    by ``POWERTOOLS_TRACE_DISABLED``, or outside Lambda, or in SAM's or Chalice's local
    emulation, where no X-Ray daemon listens. (Powertools' own check is private to it.)"""
    if resolve_truthy_env_var_choice(env=os.getenv(constants.TRACER_DISABLED_ENV, "false")):
        return True
    in_lambda = bool(os.getenv(constants.LAMBDA_TASK_ROOT_ENV))
    return not in_lambda or bool(os.getenv(constants.SAM_LOCAL_ENV) or os.getenv(constants.CHALICE_LOCAL_ENV))


def tracer(patch_modules: Sequence[str] | None = None) -> Tracer:
    """Powertools' Tracer (patching ``patch_modules`` when it traces); untraced by Powertools' own rule."""
    if tracing_disabled():
        return Tracer(disabled=True, provider=Untraced(), patch_modules=patch_modules)
    return Tracer(patch_modules=patch_modules)


def sampled(tracer: Tracer) -> bool:
    """Whether X-Ray keeps this invocation: tracing is on and the trace header does not
    say unsampled (without a header, as before: traced)."""
    return not tracer.disabled and "Sampled=0" not in os.environ.get("_X_AMZN_TRACE_ID", "")

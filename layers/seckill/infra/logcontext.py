"""The Lambda context and correlation id on an invocation's log lines, added when it logs.

Powertools' ``Logger.inject_lambda_context`` appends them to the logger's keys at
every invocation: a few µs, more than the rest of a refused press's Python, and
most presses log nothing. ``LogContext.inject`` only notes the invocation; the
same keys (``cold_start``, ``function_name``, ``function_memory_size``,
``function_arn``, ``function_request_id`` and ``correlation_id``) are appended
at its first log line, by a filter on the logger's handler, which every line
of the function and of the ``seckill`` package's loggers passes through.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.lambda_context import build_lambda_context_model

Handler = TypeVar("Handler", bound=Callable[..., Any])


def is_cold_start() -> bool:
    """Powertools' rule for an environment's first invocation: cold, unless provisioned
    concurrency initialized it ahead of any request (Lambda says so in this variable)."""
    return os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") != "provisioned-concurrency"


class LogContext(logging.Filter):
    def __init__(self, logger: Logger, correlation_id: Callable[[dict[str, Any]], str | None]) -> None:
        super().__init__()
        self.logger = logger
        self.correlation_id = correlation_id
        self._pending: tuple[dict[str, Any], Any, bool] | None = None
        self._first = True
        logger.registered_handler.addFilter(self)

    def inject(self, handler: Handler) -> Handler:
        """Like ``Logger.inject_lambda_context`` (without logging the event), the keys set when first needed."""

        @functools.wraps(handler)
        def run(event: dict[str, Any], context: Any) -> Any:
            cold_start = self._first and is_cold_start()
            self._first = False
            self._pending = (event, context, cold_start)
            try:
                return handler(event, context)
            finally:
                self._pending = None  # nothing of it lingers for a line logged between invocations

        return run  # type: ignore[return-value]

    def filter(self, record: logging.LogRecord) -> bool:
        pending, self._pending = self._pending, None
        if pending is not None:
            event, context, cold_start = pending
            self.logger.append_keys(
                cold_start=cold_start,
                **build_lambda_context_model(context).__dict__,
                correlation_id=self.correlation_id(event),
            )
        return True

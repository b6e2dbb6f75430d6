"""seckill.infra.logcontext puts on an invocation's log lines exactly what Powertools'
inject_lambda_context (with the correlation id) puts there, set only when the invocation logs."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging import logger as powertools_logger

from seckill.infra.logcontext import LogContext
from seckill_local.lambdas import LocalContext

Handler = Callable[[dict[str, Any], Any], None]


def request_id(event: dict[str, Any]) -> str | None:
    return event.get("requestContext", {}).get("requestId")


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """The JSON lines written so far, without their timestamps (which always differ)."""
    found = [json.loads(line) for line in stream.getvalue().splitlines()]
    for line in found:
        del line["timestamp"]
    return found


def logging_handler(service: str, logger: Logger) -> Handler:
    """Logs one line of its own and one of a package logger below it, when the event asks."""

    def handler(event: dict[str, Any], context: Any) -> None:
        if event.get("log"):
            logger.warning("refused", extra={"reason": "SOLD_OUT"})
            logging.getLogger(f"{service}.orders").warning("from the package")

    return handler


def powertools(service: str, stream: io.StringIO) -> Handler:
    logger = Logger(service=service, logger_handler=logging.StreamHandler(stream), level="INFO")
    inner = logging_handler(service, logger)

    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: Any) -> None:
        logger.set_correlation_id(request_id(event))
        inner(event, context)

    return handler


def lazy(service: str, stream: io.StringIO) -> Handler:
    logger = Logger(service=service, logger_handler=logging.StreamHandler(stream), level="INFO")
    return LogContext(logger, correlation_id=request_id).inject(logging_handler(service, logger))


def run(make: Callable[[str, io.StringIO], Handler], monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Four invocations (a cold one that logs, one that does not, two that do) of a fresh container."""
    monkeypatch.setattr(powertools_logger, "is_cold_start", True)
    stream = io.StringIO()
    handler = make(f"svc{uuid.uuid4().hex[:8]}", stream)
    for n, log in enumerate((True, False, True, True)):
        context = LocalContext("SeckillApiFunction", 5)
        context.aws_request_id = f"request-{n}"
        handler({"log": log, "requestContext": {"requestId": f"api-{n}"}}, context)
    found = lines(stream)
    for line in found:
        line["service"] = "service"  # each run has a service of its own
    return found


def test_the_lines_are_the_same_as_with_inject_lambda_context(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_LAMBDA_INITIALIZATION_TYPE", raising=False)
    expected = run(powertools, monkeypatch)
    assert run(lazy, monkeypatch) == expected
    # Each line names its own invocation, the first one cold.
    assert [(line["function_request_id"], line["correlation_id"], line["cold_start"]) for line in expected] == [
        ("request-0", "api-0", True),
        ("request-0", "api-0", True),
        ("request-2", "api-2", False),
        ("request-2", "api-2", False),
        ("request-3", "api-3", False),
        ("request-3", "api-3", False),
    ]


def test_provisioned_concurrency_is_never_a_cold_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "provisioned-concurrency")
    found = run(lazy, monkeypatch)
    assert len(found) == 6
    assert not any(line["cold_start"] for line in found)

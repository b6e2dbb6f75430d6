"""The hm-dianping ``Result`` body every HTTP response carries."""

from __future__ import annotations

import functools
import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import ResponseBuilder
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2


def ok(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Response[str]:
    return _response(status, {"success": True, "data": data, "errorMsg": None, "code": None}, headers)


def fail(status: int, code: str, message: str) -> Response[str]:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=_failure(code, message))


@functools.lru_cache(maxsize=64)
def _failure(code: str, message: str) -> str:
    """A refusal's body: a sale repeats a handful of them tens of thousands of times."""
    return json.dumps({"success": False, "data": None, "errorMsg": message, "code": code}, ensure_ascii=False)


def gateway(status: int, message: str) -> Response[str]:
    """API Gateway's own answer, byte for byte (``{"message":"Forbidden"}``), where the
    function answers in its stead."""
    body = json.dumps({"message": message}, separators=(",", ":"))
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


def _response(status: int, body: dict[str, Any], headers: dict[str, str] | None) -> Response[str]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, ensure_ascii=False),
        headers=headers,
    )


def refusal(status: int, code: str, message: str) -> dict[str, Any]:
    """A refusal as ``http_api`` answers it, built once per refusal and copied per request:
    it depends on nothing in the request (the press has no CORS and no compression)."""
    answer = _refusal(status, code, message)
    return {**answer, "headers": {**answer["headers"]}, "cookies": []}


@functools.lru_cache(maxsize=64)
def _refusal(status: int, code: str, message: str) -> dict[str, Any]:
    return http_api(fail(status, code, message), {})


def http_api(response: Response[str], event: dict[str, Any]) -> dict[str, Any]:
    """What an HTTP API (payload 2.0) integration returns, serialized as the Powertools resolver does,
    for a route answered without it."""
    builder: ResponseBuilder[APIGatewayProxyEventV2] = ResponseBuilder(response)
    return builder.build(APIGatewayProxyEventV2(event))

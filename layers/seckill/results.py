"""The hm-dianping ``Result`` body every HTTP response carries."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types


def ok(data: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Response[str]:
    return _response(status, {"success": True, "data": data, "errorMsg": None, "code": None}, headers)


def fail(status: int, code: str, message: str) -> Response[str]:
    return _response(status, {"success": False, "data": None, "errorMsg": message, "code": code}, None)


def _response(status: int, body: dict[str, Any], headers: dict[str, str] | None) -> Response[str]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(body, ensure_ascii=False),
        headers=headers,
    )

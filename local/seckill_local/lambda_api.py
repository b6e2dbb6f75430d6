"""Lambda's Invoke API on localhost, as ``sam local start-lambda`` serves it, so
boto3 (``AWS_ENDPOINT_URL_LAMBDA``) and ``aws lambda invoke --endpoint-url``
reach the template's functions by logical id (or an ARN ending in one).

``POST /2015-03-31/functions/<name>/invocations`` with the event as the body,
invoked synchronously (``RequestResponse``, the only type served): 200 with the
result, or with ``X-Amz-Function-Error: Unhandled`` and ``{errorMessage,
errorType}`` when the function raised or its container died. Requests must be
SigV4-signed with the local credentials, as IAM requires in AWS. Each function
gets its warm containers on its first invocation.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from seckill_local.api import Answer
from seckill_local.lambdas import FunctionPool
from seckill_local.sigv4 import Verifier, local_credentials
from seckill_local.sqs import local_region

INVOKE = re.compile(r"/2015-03-31/functions/(?P<name>[^/]+)/invocations")


def _error(status: int, kind: str, message: str) -> Answer:
    """An AWS JSON error, which botocore raises as ``<client>.exceptions.<kind>``."""
    body = json.dumps({"__type": kind, "message": message}).encode()
    return status, {"content-type": "application/json", "x-amzn-errortype": kind}, body


class LocalLambdaApi:
    def __init__(
        self, functions: list[str], pool: Callable[[str], FunctionPool], verifier: Verifier | None = None
    ) -> None:
        self.functions = set(functions)
        self.make_pool = pool
        self.pools: dict[str, FunctionPool] = {}
        self.verifier = verifier or Verifier(local_credentials(), "lambda", local_region())
        self._lock = threading.Lock()

    def _pool(self, name: str) -> FunctionPool:
        with self._lock:
            if name not in self.pools:
                self.pools[name] = self.make_pool(name)
            return self.pools[name]

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        found = INVOKE.fullmatch(target.split("?", 1)[0])
        if method != "POST" or found is None:
            return _error(404, "UnknownOperationException", f"{method} {target} is not Invoke")
        if self.verifier.caller(method, target, headers, body) is None:
            return _error(403, "InvalidSignatureException", "the request signature does not verify")
        name = unquote(found["name"]).rsplit(":", 1)[-1]
        if name not in self.functions:
            return _error(404, "ResourceNotFoundException", f"Function not found: {name}")
        try:
            event = json.loads(body or b"{}")
        except ValueError:
            return _error(400, "InvalidRequestContentException", "the payload is not JSON")
        kind = headers.get("x-amz-invocation-type", "RequestResponse")
        if kind != "RequestResponse":
            return _error(400, "InvalidParameterValueException", f"InvocationType {kind} is not served locally")
        try:
            result = self._pool(name).invoke(event)
        except Exception as exc:
            error = {"errorMessage": str(exc), "errorType": type(exc).__name__}
            return 200, {"content-type": "application/json", "x-amz-function-error": "Unhandled"}, _json(error)
        return 200, {"content-type": "application/json", "x-amz-executed-version": "$LATEST"}, _json(result)

    def close(self) -> None:
        with self._lock:
            for pool in self.pools.values():
                pool.close()


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()

"""The HTTP API on localhost, as ``sam local start-api`` would serve it.

Routes come from the template's HttpApi events. A route behind the default
authorizer runs AuthorizerFunction first (payload 2.0, simple responses,
cached for ReauthorizeEvery seconds per token and origin header, the two headers it
reads: with the edge API Gateway caches nothing, seckill.origin). An
authorizer that fails (raises, times out, or answers without a boolean
``isAuthorized``) gets the client API Gateway's 500 ``Internal Server Error``,
and nothing is cached.
AWS_IAM routes need a request SigV4-signed with the local credentials for the
local region (the signature is verified: ``seckill_local.sigv4``); API Gateway's
403 ``Forbidden`` answers one unsigned or badly signed, and the function sees an
``iam`` authorizer context naming the caller's access key.

As at API Gateway, every method is routed (one without a route gets the JSON 404),
a malformed or negative Content-Length gets a JSON 400, a repeated header or
query parameter reaches the function as one value, its values joined by commas,
and a query parameter with an empty value is kept, as ""
(https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

from seckill.origin import HEADER as ORIGIN_HEADER
from seckill_local.lambdas import FunctionPool
from seckill_local.sigv4 import Verifier, local_credentials
from seckill_local.sqs import local_region
from seckill_local.template import Function, Route, Template

ACCOUNT = "123456789012"
Answer = tuple[int, dict[str, str], bytes]


def iam_context(access_key: str) -> dict[str, Any]:
    return {
        "accessKey": access_key,
        "accountId": ACCOUNT,
        "callerId": access_key,
        "principalOrgId": None,
        "userArn": f"arn:aws:iam::{ACCOUNT}:user/local-admin",
        "userId": access_key,
    }


class LocalHttpApi:
    def __init__(self, template: Template, pools: dict[str, FunctionPool], verifier: Verifier | None = None) -> None:
        self.routes: list[tuple[Route, Function]] = template.routes()
        self.pools = pools
        self.authorizer = template.authorizer()
        self.verifier = verifier or Verifier(local_credentials(), "execute-api", local_region())
        self._auth_cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._lock = threading.Lock()

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        url = urlsplit(target)
        for route, fn in self.routes:
            params = route.match(method, url.path)
            if params is None:
                continue
            event = self._event(route, url.path, url.query, headers, body, params)
            authorizer: dict[str, Any] = {}
            if route.auth == "AWS_IAM":
                caller = self.verifier.caller(method, target, headers, body)
                if caller is None:
                    return _gateway(403, "Forbidden")
                authorizer = {"iam": iam_context(caller)}
            elif route.auth != "NONE" and self.authorizer is not None:
                token = headers.get("authorization")
                if not token:
                    return _gateway(401, "Unauthorized")
                try:
                    context = self._authorize(token, event)
                except Exception:
                    return _gateway(500, "Internal Server Error")
                if context is None:
                    return _gateway(403, "Forbidden")
                authorizer = {"lambda": context}
            if authorizer:
                event["requestContext"]["authorizer"] = authorizer
            try:
                result = self.pools[fn.logical_id].invoke(event)
            except Exception:
                return _gateway(500, "Internal Server Error")
            return _http_response(result)
        return _gateway(404, "Not Found")

    def _authorize(self, token: str, event: dict[str, Any]) -> dict[str, Any] | None:
        assert self.authorizer is not None
        function, ttl = self.authorizer
        now = time.monotonic()
        identity = f"{token}\n{event['headers'].get(ORIGIN_HEADER, '')}"
        with self._lock:
            cached = self._auth_cache.get(identity)
        if cached is not None and cached[0] > now:
            return cached[1]
        request = dict(event, type="REQUEST", identitySource=[token])
        request["routeArn"] = (
            f"arn:aws:execute-api:{local_region()}:{ACCOUNT}:local/$default/{event['routeKey'].replace(' ', '')}"
        )
        answer = self.pools[function].invoke(request)
        if not isinstance(answer, dict) or not isinstance(answer.get("isAuthorized"), bool):
            raise ValueError(f"the authorizer's answer is not a simple response: {answer!r}")
        context = (answer.get("context") or {}) if answer["isAuthorized"] else None
        if ttl > 0:
            with self._lock:
                self._auth_cache[identity] = (now + ttl, context)
        return context

    @staticmethod
    def _event(
        route: Route, path: str, query: str, headers: dict[str, str], body: bytes, params: dict[str, str]
    ) -> dict[str, Any]:
        now = datetime.now(UTC)
        text: str | None
        try:
            text, encoded = (body.decode("utf-8"), False) if body else (None, False)
        except UnicodeDecodeError:
            text, encoded = base64.b64encode(body).decode(), True
        route_key = f"{route.method} {route.path}"
        event: dict[str, Any] = {
            "version": "2.0",
            "routeKey": route_key,
            "rawPath": path,
            "rawQueryString": query,
            "headers": headers,
            "requestContext": {
                "accountId": ACCOUNT,
                "apiId": "local",
                "domainName": "localhost",
                "domainPrefix": "localhost",
                "http": {
                    "method": route.method,
                    "path": path,
                    "protocol": "HTTP/1.1",
                    "sourceIp": "127.0.0.1",
                    "userAgent": headers.get("user-agent", ""),
                },
                "requestId": str(uuid.uuid4()),
                "routeKey": route_key,
                "stage": "$default",
                "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
                "timeEpoch": int(now.timestamp() * 1000),
            },
            "isBase64Encoded": encoded,
        }
        if query:
            event["queryStringParameters"] = joined(parse_qsl(query, keep_blank_values=True))
        if params:
            event["pathParameters"] = params
        if text is not None:
            event["body"] = text
        return event


def joined(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Payload 2.0 has one value per name: API Gateway joins a repeated header's or query
    parameter's values with commas, in order (``rawQueryString`` keeps them apart)."""
    values: dict[str, str] = {}
    for name, value in pairs:
        values[name] = f"{values[name]},{value}" if name in values else value
    return values


def _gateway(status: int, message: str) -> Answer:
    """API Gateway's own answers (before or instead of the function)."""
    return status, {"content-type": "application/json"}, json.dumps({"message": message}).encode()


def _http_response(result: Any) -> Answer:
    if not isinstance(result, dict) or "statusCode" not in result:
        # Payload 2.0 treats anything else as a 200 JSON body.
        return 200, {"content-type": "application/json"}, json.dumps(result).encode()
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    headers = {k.lower(): str(v) for k, v in (result.get("headers") or {}).items()}
    return int(result["statusCode"]), headers, raw


class Handles(Protocol):
    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer: ...


def make_server(api: Handles, host: str, port: int, *, verbose: bool = False) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # An answer is two writes (the headers, then the body): with Nagle's algorithm the
        # body waits for the client's delayed ACK of the headers, about 40 ms on Linux.
        disable_nagle_algorithm = True

        def __getattr__(self, name: str) -> Any:
            # Every method reaches the routes, as at API Gateway (one without a route is its JSON
            # 404), where http.server answers a method it has no do_<METHOD> for with an HTML 501.
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

        def _serve(self) -> None:
            headers = joined((k.lower(), v) for k, v in self.headers.items())
            length = headers.get("content-length", "0")
            if not (length.isascii() and length.isdigit()):
                # API Gateway's 400 for a length that is no number of bytes ('abc', '1e3', '-1'); the
                # rest of the connection cannot be parsed either, so it is closed.
                self.close_connection = True
                self._answer(*_gateway(400, "Bad Request"))
                return
            body = self.rfile.read(int(length)) if int(length) else b""
            self._answer(*api.handle(self.command, self.path, headers, body))

        def _answer(self, status: int, headers: dict[str, str], raw: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(raw)))
            if self.close_connection:
                self.send_header("connection", "close")
            self.end_headers()
            if self.command != "HEAD":  # a HEAD answer has the headers of the body it leaves out
                self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            if verbose:
                super().log_message(format, *args)

    return _Server((host, port), Handler)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a flash sale opens many connections at once

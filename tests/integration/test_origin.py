"""No way around the edge (seckill.origin): the origin header's secret from Secrets
Manager (moto), current and previous accepted; the authorizer refusing a request
without it; and the local API refusing a direct call to a user route, as API Gateway
does once its authorizer denies, and to a public route the edge serves, as the
function does, in the same words."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
import urllib3
from aws_lambda_powertools.utilities import parameters

from seckill.infra.db import Credentials
from seckill.origin import HEADER, OriginCheck
from seckill_local.api import LocalHttpApi, make_server
from seckill_local.lambdas import FunctionPool, local_parameters
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import Template
from tests.helpers import load_event, module_of, new_user

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


@pytest.fixture
def origin_secret(sqs_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    """A secret shaped as OriginSecret on the moto server: (client, name)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_SECRETS_MANAGER", sqs_endpoint)
    client: Any = boto3.client("secretsmanager", endpoint_url=sqs_endpoint)
    name = f"seckill-origin-{uuid.uuid4().hex}"
    client.create_secret(Name=name, SecretString=json.dumps({"current": "first", "previous": ""}))
    parameters.clear_caches()
    yield client, name
    client.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
    parameters.clear_caches()


def test_current_and_previous_are_accepted_through_a_rotation(origin_secret: tuple[Any, str]) -> None:
    client, name = origin_secret
    check = OriginCheck.from_env({"ORIGIN_SECRET_ARN": name})
    assert check.admits({HEADER: "first"})
    assert not check.admits({HEADER: "second"})
    assert not check.admits({HEADER: ""})  # the empty "previous" admits nothing
    client.put_secret_value(SecretId=name, SecretString=json.dumps({"current": "second", "previous": "first"}))
    parameters.clear_caches()  # as once MAX_AGE_SECONDS have passed
    assert check.admits({HEADER: "second"})
    assert check.admits({HEADER: "first"})  # CloudFront may still send it
    client.put_secret_value(SecretId=name, SecretString=json.dumps({"current": "second", "previous": ""}))
    parameters.clear_caches()
    assert not check.admits({HEADER: "first"})


@pytest.mark.parametrize("value", ["plain text", json.dumps({"previous": "x"}), json.dumps({"current": ""})])
def test_a_secret_of_another_shape_fails_loudly(origin_secret: tuple[Any, str], value: str) -> None:
    """The authorizer then fails (API Gateway's 500, cached by nobody), never admits."""
    client, name = origin_secret
    client.put_secret_value(SecretId=name, SecretString=value)
    parameters.clear_caches()
    with pytest.raises((TypeError, parameters.exceptions.TransformParameterError)):
        OriginCheck.from_env({"ORIGIN_SECRET_ARN": name}).admits({HEADER: "x"})


@pytest.fixture
def authorizer(handlers: dict[str, Handler], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """AuthorizerFunction's module, configured as with SECKILL_ORIGIN_SECRET=edge-secret."""
    module = module_of(handlers["AuthorizerFunction"])
    monkeypatch.setattr(module, "origin", OriginCheck.from_env({"SECKILL_ORIGIN_SECRET": "edge-secret"}))
    return module


def test_the_authorizer_denies_a_valid_token_without_the_origin_header(
    authorizer: ModuleType, mint: Callable[[int], str], context: Any
) -> None:
    user_id = new_user()
    token = mint(user_id)
    event = load_event("authorizer.json")

    def answer(headers: dict[str, str]) -> dict[str, Any]:
        return authorizer.lambda_handler({**event, "headers": headers}, context)  # type: ignore[no-any-return]

    allowed = {"isAuthorized": True, "context": {"userId": str(user_id)}}
    assert answer({"authorization": f"Bearer {token}", HEADER: "edge-secret"}) == allowed
    for headers in ({}, {HEADER: ""}, {HEADER: "edge-secret!"}, {"X-Seckill-Origin-2": "edge-secret"}):
        assert answer({"authorization": f"Bearer {token}", **headers}) == {"isAuthorized": False}


@contextlib.contextmanager
def local_api(template: Template, env: dict[str, str]) -> Iterator[str]:
    """The local API (start-api) in-process, one container per function."""
    pools = {
        name: FunctionPool(template.functions[name], env, 1) for name in ("SeckillApiFunction", "AuthorizerFunction")
    }
    try:
        for pool in pools.values():
            pool.warm()
        server = make_server(LocalHttpApi(template, pools), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
    finally:
        for pool in pools.values():
            pool.close()


def test_a_direct_call_to_the_api_without_the_origin_header_is_refused(
    template: Template, creds: Credentials, mint: Callable[[int], str]
) -> None:
    origin = secrets.token_urlsafe(32)
    env = {
        **LOCAL_AWS,
        **local_parameters(os.environ["REDIS_URL"], creds),
        "POWERTOOLS_TRACE_DISABLED": "true",
        "SECKILL_ORIGIN_SECRET": origin,
    }
    token = mint(new_user())
    http = urllib3.PoolManager(retries=False, timeout=30)
    # API Gateway's answer, byte for byte, whoever gives it (its authorizer or the function).
    forbidden = (403, "application/json", b'{"message":"Forbidden"}')
    # Ids no test made: the function answers each 404.
    voucher_id, order_id = 10**15 + secrets.randbelow(10**9), 2**62 + secrets.randbelow(2**40)
    user_routes = [
        ("POST", f"/voucher-order/seckill/{voucher_id}"),
        ("GET", f"/voucher-order/{order_id}"),
        ("POST", f"/voucher-order/{order_id}/cancel"),
    ]
    with local_api(template, env) as api:

        def call(method: str, path: str, headers: dict[str, str]) -> tuple[int, str, bytes]:
            answer = http.request(method, f"{api}{path}", headers=headers)
            return answer.status, answer.headers["content-type"], answer.data

        for method, path in user_routes:
            # Through the edge the function answers (the ids name nothing).
            assert call(method, path, {"authorization": token, HEADER: origin})[0] == 404, (method, path)
            # The same token a moment later, straight to the API: refused, not a cached answer.
            assert call(method, path, {"authorization": token}) == forbidden, (method, path)
            assert call(method, path, {"authorization": token, HEADER: "guess"}) == forbidden, (method, path)
        # The public routes the edge serves: the function refuses them alike, before reading anything.
        public_routes = [("GET", "/voucher/list/1", 200), ("GET", f"/voucher/seckill/{voucher_id}/draw", 404)]
        for method, path, status in public_routes:
            assert call(method, path, {HEADER: origin})[0] == status, (method, path)
            assert call(method, path, {}) == forbidden, (method, path)
            assert call(method, path, {HEADER: "guess"}) == forbidden, (method, path)

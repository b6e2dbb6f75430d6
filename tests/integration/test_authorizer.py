"""AuthorizerFunction with events/authorizer.json: token -> userId (payload 2.0, simple responses)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_lib

from seckill.infra import keys
from tests.helpers import closed_port, load_event, module_of, new_user

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]
DENIED = {"isAuthorized": False}


@pytest.fixture
def authorize(handlers: dict[str, Handler], context: Any) -> Callable[[dict[str, str]], dict[str, Any]]:
    """Invoke the authorizer with the sample event, its headers replaced."""

    def invoke(headers: dict[str, str]) -> dict[str, Any]:
        event = load_event("authorizer.json")
        event["headers"] = {k: v for k, v in event["headers"].items() if k.lower() != "authorization"} | headers
        event["identitySource"] = list(headers.values())[-1:] if headers else []
        return handlers["AuthorizerFunction"](json.loads(json.dumps(event)), context)

    return invoke


@pytest.mark.parametrize("prefix", ["Bearer ", "", "bearer ", "BEARER  "])
def test_minted_token_is_authorized_with_the_user_id(
    authorize: Callable[[dict[str, str]], dict[str, Any]], mint: Callable[[int], str], prefix: str
) -> None:
    user_id = new_user()
    token = mint(user_id)
    answer = authorize({"authorization": f"{prefix}{token}"})
    assert answer == {"isAuthorized": True, "context": {"userId": str(user_id)}}


@pytest.mark.parametrize("name", ["authorization", "Authorization", "AUTHORIZATION", "aUtHoRiZaTiOn"])
def test_header_name_is_case_insensitive(
    authorize: Callable[[dict[str, str]], dict[str, Any]], mint: Callable[[int], str], name: str
) -> None:
    user_id = new_user()
    token = mint(user_id)
    assert authorize({name: f"Bearer {token}"}) == {"isAuthorized": True, "context": {"userId": str(user_id)}}


def test_each_token_maps_to_its_own_user(
    authorize: Callable[[dict[str, str]], dict[str, Any]], mint: Callable[[int], str]
) -> None:
    users = [new_user() for _ in range(3)]
    tokens = {user: mint(user) for user in users}
    for user, token in tokens.items():
        assert authorize({"authorization": token})["context"] == {"userId": str(user)}


def test_unknown_token_is_denied(authorize: Callable[[dict[str, str]], dict[str, Any]], redis: Any) -> None:
    token = uuid.uuid4().hex
    assert not redis.exists(keys.login_token(token))
    assert authorize({"authorization": f"Bearer {token}"}) == DENIED
    # The sample event's own token belongs to nobody here either.
    assert not redis.exists(keys.login_token("4f1c2b7e9a0d4e6c8b3a5d7f9e1c2b4a"))
    assert authorize({"authorization": "Bearer 4f1c2b7e9a0d4e6c8b3a5d7f9e1c2b4a"}) == DENIED


def test_missing_header_is_denied(authorize: Callable[[dict[str, str]], dict[str, Any]]) -> None:
    assert authorize({}) == DENIED


def test_no_headers_at_all_is_denied(handlers: dict[str, Handler], context: Any) -> None:
    event = load_event("authorizer.json")
    del event["headers"]
    assert handlers["AuthorizerFunction"](event, context) == DENIED


@pytest.mark.parametrize(
    "value",
    [
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "short",
        "has space inside",
        "login:token:*",
        "../../etc/passwd",
        "*",
        "x" * 500,
        "Bearer Bearer 4f1c2b7e9a0d4e6c8b3a5d7f9e1c2b4a",
    ],
)
def test_junk_token_is_denied(authorize: Callable[[dict[str, str]], dict[str, Any]], value: str) -> None:
    assert authorize({"authorization": value}) == DENIED


@pytest.mark.parametrize("stored_id", ["abc", "0", "-3", "", " 7", "7.0", "²", "٣", "99999999999999999999"])
def test_token_whose_hash_has_no_valid_user_id_is_denied(
    authorize: Callable[[dict[str, str]], dict[str, Any]], redis: Any, stored_id: str
) -> None:
    token = uuid.uuid4().hex
    key = keys.login_token(token)
    redis.hset(key, mapping={"id": stored_id, "nickName": "x", "icon": ""})
    redis.expire(key, 60)
    try:
        assert authorize({"authorization": token}) == DENIED
    finally:
        redis.delete(key)


@pytest.mark.parametrize(
    "store",
    [
        lambda r, key: r.set(key, "1000001"),
        lambda r, key: r.rpush(key, "1000001"),
        lambda r, key: r.sadd(key, "1000001"),
        lambda r, key: r.zadd(key, {"1000001": 1}),
        lambda r, key: r.xadd(key, {"id": "1000001"}),
        lambda r, key: r.hset(key, mapping={"nickName": "no id", "icon": ""}),
    ],
    ids=["string", "list", "set", "sorted-set", "stream", "hash-without-id"],
)
def test_token_whose_key_is_no_login_hash_is_denied(
    authorize: Callable[[dict[str, str]], dict[str, Any]], redis: Any, store: Callable[[Any, str], Any]
) -> None:
    """Redis answers WRONGTYPE to HGET on another type of key: that token logs nobody in,
    a deny, not a failed invocation (a 500 on every request carrying it)."""
    token = uuid.uuid4().hex
    key = keys.login_token(token)
    store(redis, key)
    redis.expire(key, 60)
    try:
        assert authorize({"authorization": f"Bearer {token}"}) == DENIED
    finally:
        redis.delete(key)


def test_revoked_token_is_denied(
    authorize: Callable[[dict[str, str]], dict[str, Any]], mint: Callable[[int], str], redis: Any
) -> None:
    user_id = new_user()
    token = mint(user_id)
    assert authorize({"authorization": token})["isAuthorized"] is True
    redis.delete(keys.login_token(token))
    assert authorize({"authorization": token}) == DENIED


def test_a_failed_lookup_raises_instead_of_denying(
    authorize: Callable[[dict[str, str]], dict[str, Any]],
    handlers: dict[str, Handler],
    mint: Callable[[int], str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis unreachable: a deny would be cached by API Gateway for ReauthorizeEvery; a
    failed invocation is a 500 that nobody caches."""
    token = mint(new_user())
    module = module_of(handlers["AuthorizerFunction"])
    with monkeypatch.context() as patch:
        patch.setattr(module, "redis", redis_lib.Redis(port=closed_port(), socket_connect_timeout=0.2, retry=None))
        with pytest.raises(redis_lib.exceptions.ConnectionError):
            authorize({"authorization": f"Bearer {token}"})
        # Nothing to look up: still a plain deny, no Redis needed.
        assert authorize({"authorization": "Bearer"}) == DENIED
    assert authorize({"authorization": f"Bearer {token}"})["isAuthorized"] is True

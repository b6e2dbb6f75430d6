"""Shared fixtures: a real Redis, a real MariaDB database of the suite's own,
and a moto SQS server. Every test makes its own vouchers (ids drawn at random,
so leftovers of other runs never collide) and cleans up its keys."""

from __future__ import annotations

import json
import logging
import os
import secrets
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from moto.server import ThreadedMotoServer
from redis import Redis

from benchmarks.servers import SqsServer
from seckill import hints, vouchers
from seckill.hints import CONFIRMED
from seckill.infra import keys
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database, connect
from seckill.infra.lua_scripts import Scripts
from seckill.migrate import migrate
from seckill.passes import new_ring
from seckill.press.gate import Gate
from seckill.tokens import mint_tokens
from seckill_local.lambdas import load_handler
from seckill_local.ports import free_port
from seckill_local.sqs import LOCAL_AWS, ensure_queues, sqs_client
from seckill_local.template import Template
from tests.claims import claimed_database
from tests.helpers import (
    HINT_TTL,
    RESULT_KEYS,
    Handler,
    Hold,
    accept,
    body,
    drain,
    on_sale,
    persist_order,
    seckill_event,
)
from tests.outcomes import Arena

RUN_ID = secrets.token_hex(4)
DB_NAME = f"seckill_test_{RUN_ID}"
UNIT_TESTS = Path(__file__).parent / "unit"

logging.getLogger("werkzeug").setLevel(logging.WARNING)

# Handlers read their configuration at import; point it at the suite's services first.
os.environ.update(LOCAL_AWS)
os.environ.update(
    {
        # Until the run claims a database of its own (redis_database): nothing reaches Redis before.
        "REDIS_URL": os.environ.get("TEST_REDIS_URL", "redis://unclaimed.invalid:6379/0"),
        "DB_HOST": os.environ.get("TEST_DB_HOST", "127.0.0.1"),
        "DB_PORT": os.environ.get("TEST_DB_PORT", "3306"),
        "DB_USER": os.environ.get("TEST_DB_USER", "root"),
        "DB_PASSWORD": os.environ.get("TEST_DB_PASSWORD", ""),
        "DB_NAME": DB_NAME,
        "DB_SECRET_ARN": "",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "SECKILL_REFUSAL_CACHE_SECONDS": "0",
        # The draw passes' ring: a key of this run's own.
        "SECKILL_PASS_KEYS": new_ring("t1").to_json(),
    }
)


@pytest.fixture(scope="session", autouse=True)
def redis_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """REDIS_URL: TEST_REDIS_URL if given, else a database of the local Redis claimed for this
    run alone (tests/claims.py). Unit tests reach no service: a run of them alone claims none."""
    if "TEST_REDIS_URL" in os.environ or all(UNIT_TESTS in item.path.parents for item in request.session.items):
        yield os.environ["REDIS_URL"]
        return
    client = Redis(host="127.0.0.1", port=6379, decode_responses=True)
    with claimed_database(client, f"pid {os.getpid()} run {RUN_ID}") as database:
        # The run's alone: earlier runs' leftovers go, the day's order-id counter among
        # them (each recovery raises it by 2^24, so a day of runs would overflow it). Then
        # it holds every voucher of the run's fresh database, none: it has lost nothing,
        # and its counter at 0 repeats no id of that database (docs/testing.md).
        fresh = Redis(host="127.0.0.1", port=6379, db=database)
        fresh.flushdb()
        fresh.set(keys.loaded(), 1)
        os.environ["REDIS_URL"] = f"redis://127.0.0.1:6379/{database}"
        yield os.environ["REDIS_URL"]
    client.close()


@pytest.fixture(scope="session")
def settings(redis_database: str) -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def creds(settings: Settings) -> Iterator[Credentials]:
    """The suite's own database, created by the migration and dropped at the end."""
    creds = Credentials(settings.db_host, settings.db_port, settings.db_user, settings.db_password, DB_NAME)
    migrate(creds)
    conn = connect(creds)
    with conn.cursor() as cursor:
        # Voucher ids become Redis keys: start far from other runs' ids.
        cursor.execute(f"ALTER TABLE tb_voucher AUTO_INCREMENT = {secrets.randbelow(10**12) + 10**9}")
    conn.close()
    yield creds
    # The Redis keys of every voucher of this database go with it, including those a
    # rebuild brought back after a test had cleaned up.
    conn = connect(creds)
    with conn.cursor() as cursor:
        cursor.execute("SELECT voucher_id FROM tb_seckill_voucher")
        voucher_ids = [int(row["voucher_id"]) for row in cursor.fetchall()]
    conn.close()
    redis = redis_client(settings)
    for voucher_id in voucher_ids:
        redis.delete(*keys.voucher_keys(voucher_id))
    conn = connect(creds, database=False)
    with conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{DB_NAME}`")
    conn.close()


@pytest.fixture(scope="session")
def db(creds: Credentials) -> Database:
    return Database(creds)


@pytest.fixture(scope="session")
def redis(settings: Settings) -> Any:
    client = redis_client(settings)
    # This Redis holds loaded vouchers: an unknown one is really unknown (404, not 503).
    client.set(keys.loaded(), 1)
    return client


@pytest.fixture(scope="session")
def scripts(redis: Any) -> Scripts:
    return Scripts.register(redis)


@pytest.fixture
def gate(redis: Any, scripts: Scripts) -> Gate:
    return Gate(redis, scripts, refusal_cache_seconds=0)


@pytest.fixture(scope="session")
def template() -> Template:
    return Template.load()


@pytest.fixture(scope="session")
def sqs_endpoint() -> Iterator[str]:
    """A moto server in server mode, reached over HTTP like the real endpoint."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ["AWS_ENDPOINT_URL_SQS"] = endpoint
    yield endpoint
    server.stop()


@pytest.fixture(scope="session")
def sqs(sqs_endpoint: str) -> Any:
    return sqs_client(sqs_endpoint)


@pytest.fixture(scope="session")
def fauxqs() -> Iterator[Any]:
    """An SQS client on fauxqs, the fast stand-in the benchmarks use, for queues of
    thousands of messages. Without Node.js or fauxqs it fails and says why (make
    bench-setup installs both; make test runs it first)."""
    server = SqsServer("fauxqs", free_port())
    yield sqs_client(server.endpoint)
    server.stop()


@pytest.fixture
def queues(sqs: Any, template: Template) -> Iterator[dict[str, str]]:
    """The template's queues under a prefix of this test's own; deleted afterwards."""
    urls = ensure_queues(sqs, template, prefix=f"t{uuid.uuid4().hex[:10]}-", visibility_timeout=1)
    yield urls
    for url in urls.values():
        sqs.delete_queue(QueueUrl=url)


@pytest.fixture(scope="session")
def session_queues(sqs: Any, template: Template) -> dict[str, str]:
    """Queues the handlers are wired to for the whole session (purged per test)."""
    return ensure_queues(sqs, template, prefix=f"s{RUN_ID}-", visibility_timeout=1)


@pytest.fixture(scope="session")
def handlers(creds: Credentials, session_queues: dict[str, str], template: Template) -> dict[str, Callable]:
    """The three Lambda handlers, imported as the runtime would, wired to the suite's services."""
    os.environ["ORDER_QUEUE_URL"] = session_queues["OrderQueue"]
    os.environ["ORDER_DLQ_URL"] = session_queues["OrderDeadLetterQueue"]
    os.environ["ORDER_EXPIRY_QUEUE_URL"] = session_queues["OrderExpiryQueue"]
    os.environ["DRAW_CLOCK_QUEUE_URL"] = session_queues["DrawClockQueue"]
    return {logical_id: load_handler(fn) for logical_id, fn in template.functions.items()}


@pytest.fixture
def order_queue(sqs: Any, session_queues: dict[str, str]) -> Iterator[str]:
    """The handlers' OrderQueue, empty at the start and end of the test."""
    url = session_queues["OrderQueue"]
    drain(sqs, url)
    yield url
    drain(sqs, url)


@pytest.fixture
def mint(redis: Any) -> Iterator[Callable[[int], str]]:
    """Mints a login token for a user; deletes every minted token afterwards."""
    minted: list[str] = []

    def make(user_id: int) -> str:
        token = mint_tokens(redis, [user_id], ttl_seconds=300)[user_id]
        minted.append(token)
        return token

    yield make
    if minted:
        redis.delete(*(keys.login_token(t) for t in minted))


@pytest.fixture
def make_voucher(db: Database, redis: Any) -> Iterator[Callable[..., int]]:
    """Creates seckill vouchers (MySQL + Redis preload); removes their Redis keys after the test."""
    made: list[int] = []

    def make(stock: int = 10, begin: datetime | None = None, end: datetime | None = None, shop_id: int = 1) -> int:
        voucher_id = vouchers.create_seckill_voucher(db, redis, on_sale(stock, begin, end, shop_id))
        made.append(voucher_id)
        return voucher_id

    yield make
    for voucher_id in made:
        redis.delete(*keys.voucher_keys(voucher_id))


@pytest.fixture
def context() -> Any:
    from seckill_local.lambdas import LocalContext

    return LocalContext("test", 30)


@pytest.fixture
def arena(
    db: Database, creds: Credentials, redis: Any, gate: Gate, make_voucher: Callable[..., int]
) -> Iterator[Arena]:
    """Where the persister's outcome table (tests/outcomes.py) arranges its records."""
    made = Arena(db, creds, redis, gate, make_voucher)
    yield made
    made.clean()


@pytest.fixture
def call(handlers: dict[str, Handler], context: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Invoke SeckillApiFunction; every answer must be a ``Result`` and never a stack trace."""

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        response = handlers["SeckillApiFunction"](json.loads(json.dumps(event)), context)
        assert "Traceback" not in response["body"], response
        result = body(response)
        assert set(result) == RESULT_KEYS, result
        assert result["success"] is (response["statusCode"] < 400), response
        if not result["success"]:
            assert result["data"] is None
            assert isinstance(result["errorMsg"], str)
            assert result["errorMsg"]
            assert isinstance(result["code"], str)
        return response

    return invoke


@pytest.fixture
def orders_made(redis: Any) -> Iterator[list[int]]:
    """Order ids the test got a 202 for; their status hints are removed afterwards."""
    made: list[int] = []
    yield made
    for order_id in made:
        redis.delete(keys.order_status(order_id))


@pytest.fixture
def buy(
    call: Callable[[dict[str, Any]], dict[str, Any]], orders_made: list[int]
) -> Callable[[int, int], dict[str, Any]]:
    def place(voucher_id: int, user_id: int) -> dict[str, Any]:
        response = call(seckill_event(voucher_id, user_id))
        if response["statusCode"] == 202:
            orders_made.append(int(body(response)["data"]))
        return response

    return place


@pytest.fixture
def sell(db: Database, redis: Any, scripts: Scripts, gate: Gate) -> Iterator[Callable[..., list[Hold]]]:
    """``count`` confirmed orders (holds) of a voucher of their own with ``stock`` units,
    each persisted as the persister stores it."""
    made: list[int] = []

    def make(count: int = 1, stock: int = 3, hold_seconds: int = 900) -> list[Hold]:
        voucher = on_sale(stock).model_copy(update={"hold_seconds": hold_seconds})
        voucher_id = vouchers.create_seckill_voucher(db, redis, voucher)
        made.append(voucher_id)
        sold = []
        for _ in range(count):
            m = accept(gate, voucher_id)
            hints.write_pending(redis, m, HINT_TTL)
            assert persist_order(db, redis, scripts, m).status == CONFIRMED
            sold.append(Hold(voucher_id, m.order_id, m.user_id))
        return sold

    yield make
    for voucher_id in made:
        redis.delete(*keys.voucher_keys(voucher_id), keys.returned(voucher_id))

"""What a function opens before its first request (seckill.infra.warmup), by Lambda's
initialization type, against the real Redis and MariaDB: nothing on demand; everything
ahead of traffic; closed before a SnapStart snapshot and opened again after a restore."""

from __future__ import annotations

import importlib.util
import logging
import secrets
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import snapshot_restore_py

from seckill.infra import warmup
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database
from seckill.infra.lazy import OnFirstUse
from seckill_local.lambdas import LocalContext
from seckill_local.template import Template
from tests.helpers import body, closed_port, new_user, seckill_event, wait_for

Hooks = tuple[list[Any], list[Any]]


@pytest.fixture
def hooks(monkeypatch: pytest.MonkeyPatch) -> Hooks:
    """snapshot_restore_py's registries, empty for this test: what the runtime would run."""
    before: list[Any] = []
    after: list[Any] = []
    monkeypatch.setattr(snapshot_restore_py, "_before_snapshot_registry", before)
    monkeypatch.setattr(snapshot_restore_py, "_after_restore_registry", after)
    return before, after


def snapshot(hooks: Hooks) -> None:
    """Lambda runs the before-snapshot hooks in reverse order of registration."""
    for func, args, kwargs in reversed(hooks[0]):
        func(*args, **kwargs)


def restore(hooks: Hooks) -> None:
    for func, args, kwargs in hooks[1]:
        func(*args, **kwargs)


class Opened:
    """A function's connections as the servers see them: its Redis client by name, its MySQL thread."""

    def __init__(self, settings: Settings, creds: Credentials, redis: Any, db: Database) -> None:
        self.name = f"warmup-{uuid.uuid4().hex[:12]}"
        self.client = redis_client(settings)
        self.client.connection_pool.connection_kwargs["client_name"] = self.name
        self.database = Database(creds)
        self.made: list[str] = []
        self.sqs = OnFirstUse(lambda: self.made.append("sqs") or "client")
        self.observer = redis
        self.db = db

    def connections(self) -> warmup.Connections:
        return warmup.Connections(self.client, self.database, [self.sqs])

    def redis_ids(self) -> set[int]:
        return {int(c["id"]) for c in self.observer.client_list() if c.get("name") == self.name}

    def mysql_alive(self, thread_id: int) -> bool:
        def find(cursor: Any) -> bool:
            cursor.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE ID = %s", (thread_id,))
            return cursor.fetchone() is not None

        return bool(self.db.run(find, read_only=True))


@pytest.fixture
def opened(settings: Settings, creds: Credentials, redis: Any, db: Database) -> Opened:
    return Opened(settings, creds, redis, db)


def test_on_demand_opens_nothing_before_the_first_request(
    opened: Opened, hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand")
    warmup.prepare(opened.connections())
    assert opened.redis_ids() == set()
    assert opened.made == []
    assert hooks == ([], [])
    # The first use connects.
    assert opened.client.ping()
    assert len(opened.redis_ids()) == 1


def test_provisioned_concurrency_connects_during_init(
    opened: Opened, hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "provisioned-concurrency")
    warmup.prepare(opened.connections())
    assert len(opened.redis_ids()) == 1
    assert opened.mysql_alive(opened.database.connection().thread_id())
    assert opened.made == ["sqs"]
    assert hooks == ([], [])  # no snapshot to prepare for


def test_snapstart_closes_before_the_snapshot_and_reconnects_after_restore(
    opened: Opened, hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    warmup.prepare(opened.connections())
    (redis_before,) = opened.redis_ids()
    mysql_before = opened.database.connection().thread_id()
    assert opened.mysql_alive(mysql_before)
    assert opened.made == ["sqs"]  # made once, kept in the snapshot

    snapshot(hooks)
    # A server notices a closed connection soon, not at once.
    wait_for(opened.redis_ids, "Redis to drop the connection", until=lambda ids: ids == set(), interval=0.02)
    wait_for(lambda: opened.mysql_alive(mysql_before), "MySQL to drop the connection", until=lambda alive: not alive)

    restore(hooks)
    (redis_after,) = opened.redis_ids()
    assert redis_after != redis_before
    mysql_after = opened.database.connection().thread_id()
    assert mysql_after != mysql_before
    assert opened.mysql_alive(mysql_after)
    assert opened.made == ["sqs"]
    # And they serve.
    assert opened.client.ping()
    assert opened.database.run(lambda cursor: cursor.execute("SELECT 1"), read_only=True) == 1


def test_unreachable_dependencies_do_not_fail_init(
    settings: Settings, creds: Credentials, hooks: Hooks, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Ahead of traffic a dependency may be down: the function still starts, and connects at first use."""
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    gone = replace(settings, redis_url=f"redis://127.0.0.1:{closed_port()}/0")
    db = Database(replace(creds, port=closed_port()))
    with caplog.at_level(logging.WARNING, logger="seckill.infra.warmup"):
        warmup.prepare(warmup.Connections(redis_client(gone), db))
        restore(hooks)
    unreachable = [r.getMessage() for r in caplog.records if "ahead of traffic" in r.getMessage()]
    assert len(unreachable) == 4  # Redis and MySQL, at init and after the restore


def test_the_api_function_under_snapstart_answers_after_a_restore(
    template: Template,
    hooks: Hooks,
    monkeypatch: pytest.MonkeyPatch,
    session_queues: dict[str, str],
    make_voucher: Callable[..., int],
    order_queue: str,
) -> None:
    """SeckillApiFunction's module as SnapStart initializes it: its hooks are registered,
    and after a snapshot and a restore it sells and refuses as before."""
    monkeypatch.setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "snap-start")
    monkeypatch.setenv("ORDER_QUEUE_URL", session_queues["OrderQueue"])
    fn = template.functions["SeckillApiFunction"]
    name = f"_snapstart_api_{secrets.token_hex(4)}"
    spec = importlib.util.spec_from_file_location(name, fn.code_uri / "app.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.syspath_prepend(str(fn.code_uri))
    spec.loader.exec_module(module)
    assert module.sqs.made
    assert [f.__name__ for f, _, _ in hooks[0]] == ["close"]
    assert [f.__name__ for f, _, _ in hooks[1]] == ["reopen"]

    snapshot(hooks)
    restore(hooks)
    voucher_id = make_voucher(stock=1)
    answers = []
    for _ in range(2):
        response = module.lambda_handler(seckill_event(voucher_id, new_user()), LocalContext("SeckillApiFunction", 10))
        answers.append((response["statusCode"], body(response)["code"]))
    assert answers == [(202, None), (409, "SOLD_OUT")]

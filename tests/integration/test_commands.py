"""The operator's and developer's commands, run as a user runs them."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from seckill.edge.state import Sweep, parse_message
from seckill.ids import next_order_id
from seckill.infra import keys
from seckill.infra.db import Credentials, Database
from seckill.messages import OrderMessage, queue_depth
from seckill.press.gate import Gate
from seckill.tokens import user_for_token
from tests.helpers import drain, new_user, run_python


def service_env(creds: Credentials, **extra: str) -> dict[str, str]:
    """The suite's own database, Redis and SQS endpoint (conftest set them in os.environ)."""
    return {**os.environ, "DB_NAME": creds.database, **extra}


def edge_states(sqs: Any, queue_url: str, voucher_id: int) -> list[tuple[bool, bool]]:
    """(soldOut, stopped) of each state EdgeStateQueue holds for the voucher (the command
    sends those of every voucher it saw: the suite's others too)."""
    messages = [parse_message(m["Body"]) for m in drain(sqs, queue_url)]
    states = [s for m in messages for s in (m.states if isinstance(m, Sweep) else (m,))]
    return [(s.sold_out, s.stopped) for s in states if s.voucher_id == voucher_id]


def test_seckill_tokens_mints_users_into_redis_and_a_file(tmp_path: Path, redis: Any) -> None:
    out, first = tmp_path / "tokens.txt", new_user()
    done = run_python(
        "-m",
        "seckill_local.tokens_command",
        "--count",
        "5",
        "--first-user",
        str(first),
        "--out",
        str(out),
        "--with-user-ids",
        "--ttl",
        "60",
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split(",") for line in out.read_text().splitlines()]
    try:
        assert [int(user) for user, _ in lines] == list(range(first, first + 5))
        assert all(user_for_token(redis, token) == int(user) for user, token in lines)
        assert 0 < redis.ttl(keys.login_token(lines[0][1])) <= 60
    finally:
        redis.delete(*(keys.login_token(token) for _, token in lines))
    assert "5 tokens for users" in done.stdout


def test_reconcile_command_fails_and_releases_a_stale_reservation(
    creds: Credentials, gate: Gate, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    voucher_id, user = make_voucher(stock=2), new_user()
    reservation = gate.reserve(voucher_id, user, uuid.uuid4().hex)  # the request died before its 202
    # ...a minute ago: older than the youngest age an operator may ask for.
    redis.hset(
        keys.pending(voucher_id),
        str(user),
        f"{reservation.accepted_ms - 60_000}:{reservation.token}:{reservation.order_id}",
    )
    env = service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"])
    done = run_python(
        "-m", "seckill_ops.reconcile", "--voucher", str(voucher_id), "--pending-age", "30", "--json", env=env
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["queueDrained"] is True
    assert result["totals"]["failed"] == 1
    assert redis.get(keys.stock(voucher_id)) == "2"


def test_reconcile_command_sends_the_sale_state_to_the_edge(
    creds: Credentials, sqs: Any, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    voucher_id = make_voucher(stock=2)
    env = service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"], EDGE_STATE_QUEUE_URL=queues["EdgeStateQueue"])
    try:
        done = run_python("-m", "seckill_ops.reconcile", "--voucher", str(voucher_id), env=env)
        assert done.returncode == 0, done.stderr
        assert edge_states(sqs, queues["EdgeStateQueue"], voucher_id) == [(False, False)]
    finally:
        redis.delete(keys.edge(voucher_id))


def test_reconcile_command_refuses_a_pending_age_a_live_request_may_have(
    creds: Credentials, gate: Gate, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    voucher_id, user = make_voucher(stock=2), new_user()
    gate.reserve(voucher_id, user, uuid.uuid4().hex)  # a request still running
    env = service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"])
    done = run_python("-m", "seckill_ops.reconcile", "--voucher", str(voucher_id), "--pending-age", "0", env=env)
    assert done.returncode == 2
    assert "--pending-age must be at least 30" in done.stderr
    assert redis.hexists(keys.pending(voucher_id), str(user))
    assert redis.get(keys.stock(voucher_id)) == "1"


def test_reconciler_function_refuses_a_pending_age_a_live_request_may_have(
    handlers: dict[str, Callable[..., Any]], context: Any
) -> None:
    with pytest.raises(ValueError, match="pendingAgeSeconds must be at least 30"):
        handlers["ReconcilerFunction"]({"pendingAgeSeconds": 5}, context)


def test_reconciler_function_rebuilds_a_voucher_redis_lost_before_it_reconciles(
    handlers: dict[str, Callable[..., Any]],
    context: Any,
    db: Database,
    redis: Any,
    order_queue: str,
    make_voucher: Callable[..., int],
) -> None:
    """The scheduled run is the automatic way back: the pass finds the voucher missing,
    and recovery (the queue is drained) rebuilds it."""
    voucher_id = make_voucher(stock=4)
    redis.delete(*keys.voucher_keys(voucher_id))
    result = handlers["ReconcilerFunction"]({"pendingAgeSeconds": 30}, context)
    assert result["recovery"] == {"lost": True, "blocked": ""}
    assert result["totals"]["missing"] >= 1
    assert result["totals"]["rebuilt"] >= 1
    assert redis.get(keys.stock(voucher_id)) == "4"


def test_reconcile_command_needs_the_queue(creds: Credentials) -> None:
    done = run_python("-m", "seckill_ops.reconcile", env=service_env(creds, ORDER_QUEUE_URL=""))
    assert done.returncode == 2
    assert "ORDER_QUEUE_URL" in done.stderr


def test_recovery_command_rebuilds_a_lost_voucher(
    creds: Credentials, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    voucher_id = make_voucher(stock=4)
    redis.delete(keys.stock(voucher_id), keys.window(voucher_id))
    env = service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"], ORDER_DLQ_URL=queues["OrderDeadLetterQueue"])
    done = run_python("-m", "seckill_ops.recovery", "--wait-for-queue", "5", env=env)
    assert done.returncode == 0, done.stderr
    assert f"voucher {voucher_id}: stock None -> 4" in done.stdout
    assert redis.get(keys.stock(voucher_id)) == "4"
    # The window again, stamped as rebuilt: an order accepted before the loss may be on its way.
    assert sorted(redis.hkeys(keys.window(voucher_id))) == ["begin", "end", "rebuilt"]


def test_recovery_command_sends_the_rebuilt_state_to_the_edge(
    creds: Credentials, sqs: Any, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    """As seckill-reconcile: the edge may hold a state older than the rebuild (a sold-out
    flag over units the rebuild puts back), which no other notice would replace."""
    voucher_id = make_voucher(stock=4)
    redis.delete(*keys.voucher_keys(voucher_id), keys.edge(voucher_id))
    env = service_env(
        creds,
        ORDER_QUEUE_URL=queues["OrderQueue"],
        ORDER_DLQ_URL=queues["OrderDeadLetterQueue"],
        EDGE_STATE_QUEUE_URL=queues["EdgeStateQueue"],
    )
    try:
        done = run_python("-m", "seckill_ops.recovery", "--wait-for-queue", "5", env=env)
        assert done.returncode == 0, done.stderr
        assert edge_states(sqs, queues["EdgeStateQueue"], voucher_id) == [(False, False)]
    finally:
        redis.delete(keys.edge(voucher_id))


def test_recovery_command_counts_dead_lettered_orders_as_sold(
    creds: Credentials, sqs: Any, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    """Orders that ended in the DLQ (MySQL was down) are accepted but not in MySQL: rebuilt
    without them, the gate would sell their units again and the replay would then fail them."""
    voucher_id = make_voucher(stock=4)
    waiting = OrderMessage(next_order_id(redis), new_user(), voucher_id, datetime.now(UTC))
    sqs.send_message(QueueUrl=queues["OrderDeadLetterQueue"], MessageBody=waiting.to_json())
    redis.delete(*keys.voucher_keys(voucher_id))
    env = service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"], ORDER_DLQ_URL=queues["OrderDeadLetterQueue"])
    done = run_python("-m", "seckill_ops.recovery", "--wait-for-queue", "5", env=env)
    assert done.returncode == 0, done.stderr
    assert f"voucher {voucher_id}: stock None -> 3" in done.stdout
    assert "1 orders in the dead-letter queue were counted as sold" in done.stdout
    assert redis.sismember(keys.buyers(voucher_id), waiting.user_id)
    assert queue_depth(sqs, queues["OrderDeadLetterQueue"]) == 1  # read, not consumed


def test_recovery_command_changes_nothing_while_orders_are_on_the_queue(
    creds: Credentials, sqs: Any, redis: Any, make_voucher: Callable[..., int], queues: dict[str, str]
) -> None:
    voucher_id = make_voucher(stock=4)
    on_the_way = OrderMessage(next_order_id(redis), new_user(), voucher_id, datetime.now(UTC))
    sqs.send_message(QueueUrl=queues["OrderQueue"], MessageBody=on_the_way.to_json())
    redis.delete(*keys.voucher_keys(voucher_id))
    env = service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"], ORDER_DLQ_URL=queues["OrderDeadLetterQueue"])
    done = run_python("-m", "seckill_ops.recovery", "--wait-for-queue", "1", env=env)
    assert done.returncode == 1
    assert "1 orders are still on the order queue" in done.stderr
    assert not redis.exists(keys.stock(voucher_id))


def test_recovery_command_needs_the_dead_letter_queue(creds: Credentials, queues: dict[str, str]) -> None:
    done = run_python(
        "-m", "seckill_ops.recovery", env=service_env(creds, ORDER_QUEUE_URL=queues["OrderQueue"], ORDER_DLQ_URL="")
    )
    assert done.returncode == 2
    assert "ORDER_DLQ_URL" in done.stderr


def test_migrate_command_applies_the_schema(creds: Credentials) -> None:
    done = run_python("-m", "seckill.migrate", env=service_env(creds))
    assert done.returncode == 0, done.stderr
    assert f"schema applied to {creds.database}" in done.stdout

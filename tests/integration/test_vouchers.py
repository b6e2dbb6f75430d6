"""Voucher bodies, creation (MySQL + the Redis preload the gate reads) and the shop list."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis as redis_lib

from seckill import vouchers
from seckill.ids import SEQUENCE_MASK, OrderIds
from seckill.infra import keys
from seckill.infra.db import Credentials, Database, connect
from seckill.infra.errors import Refusal, TryAgain
from seckill.infra.lua_scripts import Scripts
from seckill.infra.timeutil import to_db, to_ms
from seckill.messages import OrderQueue
from seckill.migrate import migrate
from seckill.press.gate import Gate, Reservation
from seckill.press.orders import place_order
from seckill.repair.recovery import rebuild
from seckill.vouchers import SeckillVoucherIn, VoucherIn
from tests.helpers import db_rows, new_user, reconcile_voucher, recover

# --- parse_voucher -----------------------------------------------------------------------


# --- create_seckill_voucher ----------------------------------------------------------------


@pytest.fixture
def created(redis: Any) -> Iterator[list[int]]:
    """Voucher ids whose Redis keys this test owns."""
    made: list[int] = []
    yield made
    for voucher_id in made:
        redis.delete(*keys.voucher_keys(voucher_id))


def seckill_voucher(shop_id: int = 1, stock: int = 25, title: str = "flash") -> SeckillVoucherIn:
    begin = datetime(2030, 5, 1, 8, 0, 0, 250000, tzinfo=UTC)
    return SeckillVoucherIn(
        shop_id=shop_id,
        title=title,
        sub_title="sub",
        rules="rules",
        pay_value=8000,
        actual_value=10000,
        stock=stock,
        begin_time=begin,
        end_time=begin + timedelta(hours=2),
    )


def test_create_seckill_voucher_writes_both_tables_and_preloads_redis(
    db: Database, redis: Any, created: list[int]
) -> None:
    voucher = seckill_voucher(stock=25)
    voucher_id = vouchers.create_seckill_voucher(db, redis, voucher)
    created.append(voucher_id)

    [row] = db_rows(db, "SELECT * FROM tb_voucher WHERE id = %s", voucher_id)
    assert (row["shop_id"], row["title"], row["type"], row["status"]) == (1, "flash", 1, 1)
    assert (row["pay_value"], row["actual_value"], row["sub_title"], row["rules"]) == (8000, 10000, "sub", "rules")
    [seckill] = db_rows(db, "SELECT * FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    assert seckill["stock"] == 25
    # Stored as naive UTC, to the millisecond.
    assert seckill["begin_time"] == datetime(2030, 5, 1, 8, 0, 0, 250000)
    assert seckill["end_time"] == datetime(2030, 5, 1, 10, 0, 0, 250000)

    # The gate's view, under the contract's key names.
    assert redis.get(f"seckill:stock:{{{voucher_id}}}") == "25"
    assert redis.hgetall(keys.window(voucher_id)) == {
        "begin": str(to_ms(voucher.begin_time)),
        "end": str(to_ms(voucher.end_time)),
    }
    assert redis.hgetall(keys.window(voucher_id))["begin"] == "1903852800250"
    assert redis.exists(f"seckill:order:{{{voucher_id}}}", keys.pending(voucher_id)) == 0
    # Committed, so final: no provisional mark, nothing set to expire.
    assert (redis.ttl(keys.stock(voucher_id)), redis.ttl(keys.window(voucher_id))) == (-1, -1)


def test_a_preload_whose_creation_never_committed_is_never_sold(
    db: Database, redis: Any, gate: Gate, sqs: Any, queues: dict[str, str], created: list[int]
) -> None:
    """The function died (or its commit was lost) after the Redis preload and before
    MySQL committed: before, that voucher stayed sellable forever, with every order
    failing in MySQL. Now the gate does not know it, and its keys expire."""
    voucher_id = secrets.randbelow(10**12) + 10**13  # MySQL has no such voucher
    created.append(voucher_id)
    now = datetime.now(UTC)
    vouchers.preload(redis, voucher_id, 5, now - timedelta(minutes=1), now + timedelta(hours=1), provisional=True)
    refused = place_order(gate, redis, OrderQueue(sqs, queues["OrderQueue"]), db, voucher_id, new_user(), status_ttl=60)
    assert refused == Refusal(404, "VOUCHER_NOT_FOUND", "voucher not found")
    assert redis.get(keys.stock(voucher_id)) == "5"
    assert 0 < redis.ttl(keys.stock(voucher_id)) <= vouchers.PROVISIONAL_TTL
    assert 0 < redis.ttl(keys.window(voucher_id)) <= vouchers.PROVISIONAL_TTL


def test_a_created_voucher_left_provisional_is_503_until_recovery_puts_it_on_sale(
    db: Database, redis: Any, gate: Gate, sqs: Any, queues: dict[str, str], make_voucher: Callable[..., int]
) -> None:
    """MySQL committed, then Redis could not be told the voucher is final."""
    voucher_id = make_voucher(stock=2)
    redis.hset(keys.window(voucher_id), "provisional", 1)
    queue = OrderQueue(sqs, queues["OrderQueue"])
    with pytest.raises(TryAgain):
        place_order(gate, redis, queue, db, voucher_id, new_user(), status_ttl=60)

    assert reconcile_voucher(db, redis, queue, voucher_id).missing  # left to recovery
    done = recover(db, redis, sqs, queues)
    assert voucher_id in [r.voucher_id for r in done.rebuilt if r.applied], done.blocked
    assert not redis.hexists(keys.window(voucher_id), "provisional")
    assert isinstance(place_order(gate, redis, queue, db, voucher_id, new_user(), status_ttl=60), int)


@pytest.fixture
def loaded_mark(redis: Any) -> Iterator[None]:
    """The test takes the mark away (Redis lost its data); the suite's Redis gets it back after."""
    redis.delete(keys.loaded())
    yield
    redis.set(keys.loaded(), 1)


@pytest.fixture
def own_db(creds: Credentials) -> Iterator[Database]:
    """A database of the test's own: no other test's vouchers in it."""
    own = replace(creds, database=f"{creds.database}_own_{secrets.token_hex(3)}")
    migrate(own)
    database = Database(own)
    db_rows(database, f"ALTER TABLE tb_voucher AUTO_INCREMENT = {secrets.randbelow(10**12) + 10**9}")
    yield database
    database.close()
    conn = connect(own, database=False)
    with conn.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{own.database}`")
    conn.close()


def insert_seckill_row(db: Database, end: datetime) -> int:
    """A seckill voucher straight into MySQL, as an earlier sale left it."""
    db_rows(db, "INSERT INTO tb_voucher (shop_id, title, pay_value, actual_value, type) VALUES (1, 'old', 1, 2, 1)")
    [row] = db_rows(db, "SELECT MAX(id) AS id FROM tb_voucher")
    voucher_id = int(row["id"])
    db_rows(
        db,
        "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (%s, 1, %s, %s)",
        voucher_id,
        to_db(end - timedelta(hours=1)),
        to_db(end),
    )
    return voucher_id


def test_the_only_voucher_of_the_last_day_declares_the_cache_complete(
    own_db: Database, redis: Any, created: list[int], loaded_mark: None
) -> None:
    insert_seckill_row(own_db, datetime.now(UTC) - vouchers.LOADED_HORIZON - timedelta(minutes=1))
    created.append(vouchers.create_seckill_voucher(own_db, redis, seckill_voucher()))
    assert redis.get(keys.loaded()) == "1"  # the gate may trust "not found" again


def test_the_only_voucher_after_a_loss_leases_no_block_a_warm_container_still_holds(
    own_db: Database, redis: Any, created: list[int]
) -> None:
    """Redis lost its data, the day's order-id counter with it, while a warm container
    kept the block it had leased; then the only voucher of the last day is created and
    marks Redis loaded. A container started now leases above that block, as after
    recovery: the counter back at 0 gave it the same block, and both containers made the
    same order id in the same second for two buyers."""
    now = datetime.now(UTC)
    key, second = keys.order_counter(now), now.timestamp()  # every id of the test in one second
    before = int(redis.get(key) or 0)
    try:
        redis.delete(key)  # the day's first block, which a counter back at 0 leases again
        warm = OrderIds(redis, clock=lambda: second)
        warm.give_back(warm.take())  # a refused press: its block is leased
        redis.delete(key, keys.loaded())  # the loss
        created.append(vouchers.create_seckill_voucher(own_db, redis, seckill_voucher()))
        assert redis.get(keys.loaded()) == "1"
        started = OrderIds(redis, clock=lambda: second)
        assert started.take() != warm.take()
        assert started.take() & SEQUENCE_MASK > warm.block
    finally:
        redis.set(keys.loaded(), 1)
        redis.set(key, max(before, int(redis.get(key) or 0)))


@pytest.mark.parametrize("ended_ago", [None, timedelta(hours=12)], ids=["on-sale", "ended-12-hours-ago"])
def test_a_voucher_created_after_redis_lost_its_data_leaves_the_mark_to_recovery(
    own_db: Database, redis: Any, created: list[int], loaded_mark: None, ended_ago: timedelta | None
) -> None:
    now = datetime.now(UTC)
    earlier = insert_seckill_row(own_db, now + timedelta(hours=1) if ended_ago is None else now - ended_ago)
    created.append(earlier)  # its Redis state is gone: never preloaded here, as after a loss
    created.append(vouchers.create_seckill_voucher(own_db, redis, seckill_voucher()))
    assert not redis.exists(keys.loaded())


def test_a_lost_voucher_stays_try_again_after_another_is_created(
    db: Database, redis: Any, gate: Gate, scripts: Scripts, make_voucher: Callable[..., int], loaded_mark: None
) -> None:
    """Redis lost its data mid-sale, then an admin creates a voucher: buyers of the lost
    one are told to try again (not "not found") until recovery has rebuilt it. The new
    voucher sells in a container that holds a block of order ids from before the loss;
    one that needs a new block waits for recovery too (a block leased now could repeat
    ids of blocks leased before the loss: seckill.ids.OrderIds)."""
    lost = make_voucher(stock=3)
    redis.set(keys.loaded(), 1)  # before the loss (the creation sets it only when alone in the cache)
    holder = Gate(redis, scripts, refusal_cache_seconds=0)
    holder.ids.give_back(holder.ids.take())  # its block, leased before the loss
    redis.delete(keys.stock(lost), keys.window(lost), keys.buyers(lost), keys.pending(lost), keys.loaded())

    fresh = make_voucher(stock=3)

    assert not redis.exists(keys.loaded())
    with pytest.raises(TryAgain):
        holder.reserve(lost, new_user(), uuid.uuid4().hex)
    assert isinstance(holder.reserve(fresh, new_user(), uuid.uuid4().hex), Reservation)
    with pytest.raises(TryAgain):
        gate.reserve(fresh, new_user(), uuid.uuid4().hex)
    rebuild(db, redis, scripts, dead_letters=[], hint_ttl=60)
    assert redis.exists(keys.loaded())
    assert isinstance(gate.reserve(lost, new_user(), uuid.uuid4().hex), Reservation)
    assert isinstance(gate.reserve(fresh, new_user(), uuid.uuid4().hex), Reservation)


def test_a_reused_voucher_id_does_not_inherit_old_buyers(db: Database, redis: Any, created: list[int]) -> None:
    # As after the database is recreated: the next voucher gets an id whose Redis keys are still there.
    old_id = vouchers.create_seckill_voucher(db, redis, seckill_voucher(stock=3))
    created.append(old_id)
    redis.sadd(keys.buyers(old_id), "5", "6")
    redis.hset(keys.pending(old_id), "5", "1:tok:99")
    redis.set(keys.stock(old_id), 1)
    db_rows(db, "DELETE FROM tb_seckill_voucher WHERE voucher_id = %s", old_id)
    db_rows(db, "DELETE FROM tb_voucher WHERE id = %s", old_id)
    db_rows(db, f"ALTER TABLE tb_voucher AUTO_INCREMENT = {old_id}")

    new_id = vouchers.create_seckill_voucher(db, redis, seckill_voucher(stock=7))
    created.append(new_id)

    assert new_id == old_id
    assert redis.get(keys.stock(new_id)) == "7"
    assert redis.exists(keys.buyers(new_id), keys.pending(new_id)) == 0


def test_redis_failure_during_preload_commits_nothing(db: Database, redis: Any) -> None:
    title = f"unreachable-{uuid.uuid4().hex}"
    dead = redis_lib.Redis(port=1, socket_connect_timeout=0.2, socket_timeout=0.2, retry=None)
    with pytest.raises(redis_lib.exceptions.ConnectionError):
        vouchers.create_seckill_voucher(db, dead, seckill_voucher(title=title))
    assert db_rows(db, "SELECT id FROM tb_voucher WHERE title = %s", title) == []
    orphans = db_rows(
        db,
        "SELECT sv.voucher_id FROM tb_seckill_voucher sv LEFT JOIN tb_voucher v ON v.id = sv.voucher_id"
        " WHERE v.id IS NULL",
    )
    assert orphans == []
    # The connection is usable afterwards (the transaction was rolled back, not left open).
    assert db_rows(db, "SELECT 1 AS one") == [{"one": 1}]


def test_create_ordinary_voucher_touches_no_redis(db: Database, redis: Any) -> None:
    voucher = VoucherIn(shop_id=2, title="plain", pay_value=100, actual_value=150)
    voucher_id = vouchers.create_voucher(db, voucher)
    [row] = db_rows(db, "SELECT * FROM tb_voucher WHERE id = %s", voucher_id)
    assert (row["type"], row["title"]) == (0, "plain")
    assert db_rows(db, "SELECT * FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id) == []
    assert redis.exists(keys.stock(voucher_id), keys.window(voucher_id)) == 0


# --- list_vouchers -------------------------------------------------------------------------

FIELDS = {
    "admission",
    "admitRate",
    "closesAt",
    "id",
    "shopId",
    "title",
    "subTitle",
    "rules",
    "payValue",
    "actualValue",
    "type",
    "status",
    "stock",
    "beginTime",
    "endTime",
    "holdSeconds",
}


@pytest.fixture
def shop_id() -> int:
    return secrets.randbelow(10**12) + 10**6


def test_list_vouchers_of_a_shop(
    db: Database, redis: Any, shop_id: int, make_voucher: Callable[..., int], created: list[int]
) -> None:
    seckill_id = vouchers.create_seckill_voucher(db, redis, seckill_voucher(shop_id=shop_id, stock=30))
    created.append(seckill_id)
    ordinary_id = vouchers.create_voucher(db, VoucherIn(shop_id=shop_id, title="plain", pay_value=1, actual_value=2))
    make_voucher(shop_id=shop_id + 1)  # another shop's

    listed = vouchers.list_vouchers(db, shop_id).vouchers

    assert [v["id"] for v in listed] == [seckill_id, ordinary_id]
    assert all(set(v) == FIELDS for v in listed)
    seckill, ordinary = listed
    assert seckill == {
        "id": seckill_id,
        "shopId": shop_id,
        "title": "flash",
        "subTitle": "sub",
        "rules": "rules",
        "payValue": 8000,
        "actualValue": 10000,
        "type": 1,
        "status": 1,
        "stock": 30,
        "beginTime": "2030-05-01T08:00:00.250Z",
        "endTime": "2030-05-01T10:00:00.250Z",
        "holdSeconds": 900,
        "admission": "race",
        "closesAt": None,
        "admitRate": None,
    }
    assert (ordinary["type"], ordinary["stock"], ordinary["beginTime"], ordinary["endTime"]) == (0, None, None, None)
    assert (ordinary["holdSeconds"], ordinary["admission"], ordinary["closesAt"]) == (None, None, None)
    # The body is JSON as is.
    json.dumps(listed)


def test_list_shows_the_database_stock_and_hides_withdrawn(
    db: Database, redis: Any, shop_id: int, created: list[int]
) -> None:
    on_sale = vouchers.create_seckill_voucher(db, redis, seckill_voucher(shop_id=shop_id, stock=30))
    withdrawn = vouchers.create_seckill_voucher(db, redis, seckill_voucher(shop_id=shop_id, stock=30))
    created.extend([on_sale, withdrawn])
    db_rows(db, "UPDATE tb_seckill_voucher SET stock = 12 WHERE voucher_id = %s", on_sale)
    db_rows(db, "UPDATE tb_voucher SET status = 2 WHERE id = %s", withdrawn)

    listed = vouchers.list_vouchers(db, shop_id).vouchers

    assert [(v["id"], v["stock"]) for v in listed] == [(on_sale, 12)]


def test_list_of_an_unknown_shop_is_empty(db: Database, shop_id: int) -> None:
    assert vouchers.list_vouchers(db, shop_id).vouchers == []


def test_a_sale_that_ended_long_before_redis_lost_it_is_ended_not_not_found(
    db: Database, redis: Any, gate: Gate, sqs: Any, queues: dict[str, str], make_voucher: Callable[..., int]
) -> None:
    """Rebuilds only cover sales that ended within the last day; a press on an older one
    found nothing in Redis and was told 404, as if the voucher never existed."""
    now = datetime.now(UTC)
    voucher_id = make_voucher(stock=2, begin=now - timedelta(days=3), end=now - timedelta(days=2))
    redis.delete(*keys.voucher_keys(voucher_id))
    queue = OrderQueue(sqs, queues["OrderQueue"])
    ended = place_order(gate, redis, queue, db, voucher_id, new_user(), status_ttl=60)
    assert ended == Refusal(409, "ENDED", "the sale has ended")
    unknown = place_order(gate, redis, queue, db, voucher_id + 10**9, new_user(), status_ttl=60)
    assert unknown == Refusal(404, "VOUCHER_NOT_FOUND", "voucher not found")

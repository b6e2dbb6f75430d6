"""(4) The persister against MySQL's floor, on one hot voucher row.

Contenders, each on a voucher of its own whose stock equals the rows it gets
(every order confirms), in interleaved rounds, one process:

- ``handler``: ``OrderPersisterFunction``'s ``lambda_handler`` on SQS events of
  10 records (the event source mapping's batch size), orders placed by the real
  gate first (pending marks and status hints in Redis, as after a press);
- ``raw_per_row``: PyMySQL, per row INSERT + ``UPDATE ... stock = stock - 1
  WHERE stock > 0`` + COMMIT;
- ``raw_per_batch``: the same statements, one COMMIT per 10 rows;
- ``raw_per_batch_merged``: per 10 rows one multi-row INSERT, one
  ``UPDATE ... stock = stock - 10 WHERE stock >= 10`` and one COMMIT;
- ``raw_per_batch_send``: ``raw_per_batch``, then one bare boto3 (a default client)
  ``SendMessageBatch`` of the batch's 10 delayed expiries to OrderExpiryQueue, as
  the handler sends after COMMIT: the floor of what the handler does.

Then the drain: N placed orders of one voucher stored by ``PersisterMaxConcurrency``
warm ``OrderPersisterFunction`` containers (the local runner's), batches of 10;
the curve is orders stored against time: once handed to the containers from
memory (SQS excluded, labelled), once queued on the SQS stand-in and fed by the
runner's event source mapping, with the pollers' time in SQS measured by
botocore's events. moto's ReceiveMessage slows down with depth (about 2 s per
call at 2,000 messages on this machine), so on moto the second drain is kept
small (``MOTO_DRAIN``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import queue
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import boto3

from benchmarks.counters import Counters
from benchmarks.servers import STAND_INS
from benchmarks.testbed import StackInfo, apply_env, create_voucher, far_id, function_env
from benchmarks.workers import CallTimer
from seckill import hints
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Database, connect
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderMessage
from seckill.press.gate import Gate, Reservation
from seckill_local.feeder import QueueFeeder, sqs_event
from seckill_local.lambdas import FunctionPool, LocalContext, load_handler
from seckill_local.sqs import sqs_client
from seckill_local.template import Template

BATCH = 10
MOTO_DRAIN = 500  # orders; beyond that moto's ReceiveMessage, slower with every queued message, is all one measures
CONTENDERS = ("handler", "raw_per_row", "raw_per_batch", "raw_per_batch_merged", "raw_per_batch_send")
# Every order of a batch gets its expiry: the longest delay SQS takes, as for a hold of 15 minutes.
EXPIRY_DELAY_S = 900


@dataclasses.dataclass(frozen=True)
class Sizes:
    rows: int  # per contender per round
    drain: int  # orders drained from memory (SQS excluded)
    drain_via_sqs: int  # orders drained through the SQS stand-in (at most MOTO_DRAIN on moto)
    rounds: int


def as_record(m: OrderMessage) -> dict[str, Any]:
    """A received SQS message, as ``QueueFeeder`` hands it to ``sqs_event``."""
    body = m.to_json()
    return {
        "MessageId": str(uuid.uuid4()),
        "ReceiptHandle": uuid.uuid4().hex,
        "Body": body,
        "Attributes": {"ApproximateReceiveCount": "1"},
        "MD5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
    }


class Persisting:
    def __init__(self, info: StackInfo) -> None:
        self.info = info
        self.template = Template.load()
        self.fn = self.template.functions["OrderPersisterFunction"]
        self.env = function_env(info, "OrderPersisterFunction", self.template)
        apply_env(self.env)
        self.handler = load_handler(self.fn)
        self.redis = redis_client(Settings.from_env())
        self.gate = Gate(self.redis, Scripts.register(self.redis), refusal_cache_seconds=0)
        self.db = Database(info.creds)
        self.conn = connect(info.creds)
        self.counters = Counters(connect(info.creds), self.redis)
        self.bare_sqs = boto3.client("sqs", endpoint_url=info.sqs_endpoint)
        self.expiry_url = self.env["ORDER_EXPIRY_QUEUE_URL"]

    def placed_orders(self, voucher_id: int, n: int) -> list[OrderMessage]:
        """n orders as the API leaves them: reserved by the gate with their ids, hint written, promised."""
        messages = []
        base = far_id()
        for i in range(n):
            reservation = self.gate.reserve(voucher_id, base + i, uuid.uuid4().hex)
            if not isinstance(reservation, Reservation):
                raise RuntimeError(f"voucher {voucher_id}: the gate refused an order to persist: {reservation}")
            order_id = reservation.order_id
            m = OrderMessage(order_id, base + i, voucher_id, datetime.fromtimestamp(reservation.accepted_ms / 1e3, UTC))
            hints.write_pending(self.redis, m, 900)
            self.gate.promise(voucher_id, m.user_id, order_id)
            messages.append(m)
        return messages

    def contender(self, name: str, voucher_id: int, messages: list[OrderMessage]) -> Callable[[], None]:
        batches = [messages[i : i + BATCH] for i in range(0, len(messages), BATCH)]
        if name == "handler":
            arn = "arn:aws:sqs:us-east-1:123456789012:OrderQueue"
            events = [sqs_event([as_record(m) for m in batch], arn) for batch in batches]
            contexts = [LocalContext(self.fn.logical_id, self.fn.timeout) for _ in events]

            def handle() -> None:
                for event, context in zip(events, contexts, strict=True):
                    failures = self.handler(event, context).get("batchItemFailures")
                    if failures:
                        raise RuntimeError(f"the persister failed {len(failures)} records")

            return handle
        insert = "INSERT INTO tb_voucher_order (id, user_id, voucher_id, create_time) VALUES (%s, %s, %s, %s)"
        decrement = "UPDATE tb_seckill_voucher SET stock = stock - %s WHERE voucher_id = %s AND stock >= %s"

        def rows(batch: list[OrderMessage]) -> list[tuple[Any, ...]]:
            return [(m.order_id, m.user_id, m.voucher_id, m.accepted_at.replace(tzinfo=None)) for m in batch]

        def send_expiries(batch: list[OrderMessage]) -> None:
            entries = [
                {"Id": str(i), "MessageBody": m.to_json(), "DelaySeconds": EXPIRY_DELAY_S} for i, m in enumerate(batch)
            ]
            self.bare_sqs.send_message_batch(QueueUrl=self.expiry_url, Entries=entries)

        def raw() -> None:
            with self.conn.cursor() as cursor:
                for batch in batches:
                    if name == "raw_per_batch_merged":
                        cursor.executemany(insert, rows(batch))
                        cursor.execute(decrement, (len(batch), voucher_id, len(batch)))
                        self.conn.commit()
                        continue
                    for row in rows(batch):
                        cursor.execute(insert, row)
                        cursor.execute(decrement, (1, voucher_id, 1))
                        if name == "raw_per_row":
                            self.conn.commit()
                    if name in {"raw_per_batch", "raw_per_batch_send"}:
                        self.conn.commit()
                    if name == "raw_per_batch_send":
                        send_expiries(batch)

        return raw

    def stored(self, voucher_id: int) -> tuple[int, int]:
        def count(cursor: Any) -> tuple[int, int]:
            cursor.execute("SELECT COUNT(*) AS n FROM tb_voucher_order WHERE voucher_id = %s", (voucher_id,))
            orders = int(cursor.fetchone()["n"])
            cursor.execute("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (voucher_id,))
            return orders, int(cursor.fetchone()["stock"])

        return self.db.run(count, read_only=True)

    def measure(self, name: str, rows: int) -> dict[str, Any]:
        voucher_id = create_voucher(self.db, self.redis, rows)
        messages = self.placed_orders(voucher_id, rows) if name == "handler" else self.unplaced(voucher_id, rows)
        loop = self.contender(name, voucher_id, messages)
        before = self.counters.snapshot()
        started = time.perf_counter()
        loop()
        seconds = time.perf_counter() - started
        after = self.counters.snapshot()
        orders, stock = self.stored(voucher_id)
        if (orders, stock) != (rows, 0):
            raise RuntimeError(f"{name}: {orders} orders stored and {stock} left of {rows}")
        return {"rows_per_s": rows / seconds, "usage": Counters.usage(before, after, rows).to_json()}

    def unplaced(self, voucher_id: int, n: int) -> list[OrderMessage]:
        base, order_base, now = far_id(), far_id(), datetime.now(UTC)
        return [OrderMessage(order_base + i, base + i, voucher_id, now) for i in range(n)]

    def drain(self, n: int, concurrency: int, *, via_sqs: bool) -> dict[str, Any]:
        """n placed orders of one voucher stored by ``concurrency`` warm persister containers,
        batches of 10. ``via_sqs``: queued on the SQS stand-in and fed by the local runner's
        event source mapping; otherwise the same batches are handed to the
        containers straight from memory (SQS excluded, labelled so)."""
        voucher_id = create_voucher(self.db, self.redis, n)
        messages = self.placed_orders(voucher_id, n)
        pool = FunctionPool(self.fn, self.env, concurrency)
        pool.warm()
        if via_sqs:
            sqs = sqs_client(self.info.sqs_endpoint)
            name = f"bench-drain-{uuid.uuid4().hex[:8]}"
            url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "60"})["QueueUrl"]
            for i in range(0, n, BATCH):
                entries = [{"Id": str(j), "MessageBody": m.to_json()} for j, m in enumerate(messages[i : i + BATCH])]
                sqs.send_message_batch(QueueUrl=url, Entries=entries)
            transport = CallTimer("ReceiveMessage", "DeleteMessageBatch").install(sqs.meta.events)
            feeder = QueueFeeder(sqs, url, pool, batch_size=BATCH, concurrency=concurrency)
            done = lambda: feeder.stats.deleted  # noqa: E731
        else:
            batches: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
            arn = "arn:aws:sqs:us-east-1:123456789012:OrderQueue"
            for i in range(0, n, BATCH):
                batches.put(sqs_event([as_record(m) for m in messages[i : i + BATCH]], arn))
            stored = [0]
            lock = threading.Lock()

            def feed() -> None:
                while True:
                    try:
                        event = batches.get_nowait()
                    except queue.Empty:
                        return
                    failed = len(pool.invoke(event).get("batchItemFailures") or [])
                    with lock:
                        stored[0] += len(event["Records"]) - failed

            threads = [threading.Thread(target=feed, daemon=True) for _ in range(concurrency)]
            done = lambda: stored[0]  # noqa: E731
        curve = [(0.0, 0)]
        started = time.perf_counter()
        deadline = started + max(120.0, n / 20)
        in_sqs = 0.0
        try:
            for thread in [feeder] if via_sqs else threads:
                thread.start()
            while done() < n and time.perf_counter() < deadline:
                time.sleep(0.1)
                curve.append((round(time.perf_counter() - started, 3), done()))
            if via_sqs:
                in_sqs = transport.total  # before the idle pollers' long polls add to it
        finally:
            if via_sqs:
                feeder.close()
                sqs.delete_queue(QueueUrl=url)
            else:
                for thread in threads:
                    thread.join(timeout=30)
            pool.close()
        seconds = curve[-1][0]
        orders, stock = self.stored(voucher_id)
        return {
            "orders": n,
            "via": f"SQS ({STAND_INS[self.info.transport]})" if via_sqs else "memory (SQS excluded)",
            "concurrency": concurrency,
            "seconds": seconds,
            "rows_per_s": round(orders / seconds, 1) if seconds else 0.0,
            "stored": orders,
            "stock_left": stock,
            "complete": orders == n and stock == 0,
            # The pollers' time in ReceiveMessage and DeleteMessageBatch, of all their time.
            "transport_share": round(in_sqs / (concurrency * seconds), 4) if seconds else 0.0,
            "curve": curve,
        }


def run(info: StackInfo, sizes: Sizes, concurrency: int) -> dict[str, Any]:
    """In a process of its own (it imports the handler)."""
    persisting = Persisting(info)
    for name in CONTENDERS:  # connections opened, scripts loaded: nothing below pays for them
        persisting.measure(name, 2 * BATCH)
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    for r in range(sizes.rounds):
        order = CONTENDERS[r % len(CONTENDERS) :] + CONTENDERS[: r % len(CONTENDERS)]
        for name in order:
            samples[name].append(persisting.measure(name, sizes.rows))
        print(f"persister: round {r + 1}/{sizes.rounds} done", file=sys.stderr, flush=True)
    rows = [
        {
            "contender": name,
            "rows_per_s": round(statistics.median(e["rows_per_s"] for e in entries), 1),
            "usage": min(entries, key=lambda e: e["usage"]["mysql_statements"])["usage"],
        }
        for name, entries in samples.items()
    ]
    handler = rows[0]["rows_per_s"]
    for row in rows:
        row["handler_share"] = round(handler / row["rows_per_s"], 3) if row["rows_per_s"] else None
    print(f"persister: draining {sizes.drain:,} orders (SQS excluded)", file=sys.stderr, flush=True)
    drain = persisting.drain(sizes.drain, concurrency, via_sqs=False)
    via_sqs = sizes.drain_via_sqs if info.transport == "fauxqs" else min(sizes.drain_via_sqs, MOTO_DRAIN)
    stand_in = STAND_INS[info.transport]
    print(f"persister: draining {via_sqs:,} orders queued on {stand_in}", file=sys.stderr, flush=True)
    drain_sqs = persisting.drain(via_sqs, concurrency, via_sqs=True)
    return {"sizes": dataclasses.asdict(sizes), "results": rows, "drain": drain, "drain_via_sqs": drain_sqs}

"""A chaos run (``seckill-flash-sale --chaos``): every fault of the fault table
injected during the sale, and the table of what absorbed each.

Inside the functions (``seckill_demo.faults``, armed through the local runner's
worker hook): SQS sends refused or their replies lost, the API crashing after the
gate or once its order is queued, the persister crashing mid-batch. From outside,
by this module: Redis answers lost on their way back (a proxy between the
functions and a Redis of the run's own), MySQL connections killed, malformed messages on the queue, the
persister down while half of the waiting orders are dead-lettered, and Redis
restarted empty mid-sale. With holds, the faults of the waves after the first:
expiry messages early, late and deleted, the expiry consumer down, Redis answers
lost while the holds resolve (and the edge's, ``seckill_demo.edge_faults``).
Every draw comes from the run's seed.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pymysql
from rich.progress import Progress

from seckill.expiry import ExpiryMessage, ExpiryQueue
from seckill.infra.db import Credentials
from seckill.repair.reconcile import MIN_PENDING_AGE
from seckill.repair.recovery import recover_if_lost
from seckill.tokens import store_tokens
from seckill_demo.faults import ENV as FAULTS_ENV
from seckill_demo.faults import HOOK, ConnectionKiller, PrivateRedis, read_log, record, rng
from seckill_demo.holds_outcome import Holds
from seckill_demo.load import TOKEN_TTL, Press
from seckill_demo.proxy import LossyProxy
from seckill_demo.report import Fault
from seckill_demo.sale import EXPIRY_QUEUE, LocalSale
from seckill_local.lambdas import WORKER_HOOK
from seckill_local.ports import free_port

# Per function: every fault on, at rates a 1,000-user sale notices.
RATES = {
    "SeckillApiFunction": {"sendFailure": 0.05, "sendReplyLost": 0.05, "sendCrash": 0.02, "queuedCrash": 0.04},
    "OrderPersisterFunction": {"persisterCrash": 0.03},
}
ARMED = "chaos.armed"  # while this file is in the run's folder, the functions' faults fire
RECONCILE_EVERY = 2.0  # seconds, in chaos runs; ReconcilerFunction runs every few minutes in AWS
REPLY_LOSS_EVERY = 0.5  # seconds between bursts of lost Redis replies
REPLY_LOSS_BURST = 4  # replies lost in a row: more than redis-py's retries, so some presses get 503
DELETED_EXPIRY = 0.5  # share of the orders whose expiry messages are deleted while the consumer is down
MALFORMED = ['{"orderId": 17}', "not json", '{"orderId": "1", "userId": "me", "voucherId": 1, "acceptedAt": "x"}']


class Chaos:
    """The run's own Redis (restarted mid-sale), the proxy that loses its answers
    to the functions, and the log every injected fault is written to."""

    def __init__(self, workdir: Path, seed: int) -> None:
        self.seed = seed
        self.private_redis = PrivateRedis(workdir, free_port())
        self.proxy: LossyProxy | None = None
        self.log = workdir / "chaos.jsonl"
        self.log.unlink(missing_ok=True)  # a kept --logs folder may hold an earlier run's
        self.armed = workdir / ARMED
        self.unscheduled = threading.Event()  # stops the reconciliation scheduled for the rest of the run
        self.schedule: threading.Thread | None = None

    def start(self) -> str:
        """Start the Redis; the URL the functions reach it by, through the proxy."""
        self.private_redis.start()
        self.proxy = LossyProxy("127.0.0.1", self.private_redis.port, seed=rng(self.seed, "proxy").getrandbits(64))
        self.proxy.only_after = b"EVALSHA"  # only answers to scripts are lost: connecting goes through
        return f"redis://{self.proxy.url_host}/0"

    def reconcile_from_now(self, sale: LocalSale, totals: Counter[str]) -> None:
        """ReconcilerFunction's schedule (at a chaos run's pace) from now to ``stop_reconciling``,
        whatever phase the run is in: it alone rebuilds what Redis lost and restarts a stalled
        draw clock while nobody presses."""
        self.schedule = threading.Thread(
            target=reconcile_periodically, args=(sale, self.unscheduled, totals), daemon=True
        )
        self.schedule.start()

    def stop_reconciling(self) -> None:
        self.unscheduled.set()
        if self.schedule is not None:
            self.schedule.join()

    def close(self) -> None:
        self.stop_reconciling()
        if self.proxy is not None:
            self.proxy.close()
        self.private_redis.kill()

    def function_env(self) -> dict[str, dict[str, str]]:
        """The env-vars file's sections that arm each function's faults."""
        return {
            function: {
                WORKER_HOOK: HOOK,
                FAULTS_ENV: json.dumps({**rates, "seed": self.seed, "log": str(self.log), "armed": str(self.armed)}),
            }
            for function, rates in RATES.items()
        }

    def fire(
        self,
        sale: LocalSale,
        tokens: dict[int, str],
        progress: Progress,
        creds: Credentials,
        reconciled: Counter[str],
        on_win: Callable[[Press], None],
        on_lost: Callable[[Press], None],
    ) -> tuple[list[Press], float]:
        """The presses, under fire; ``on_win`` is told of each 202, ``on_lost`` of each answer lost."""
        assert self.proxy is not None
        for body in MALFORMED:
            sale.sqs.send_message(QueueUrl=sale.queue_url, MessageBody=body)
            record(self.log, "malformed-message", body=body)
        restart_at = int(len(tokens) * sale.args.presses * 0.4)
        trigger = threading.Event()
        restarter = threading.Thread(target=lambda: trigger.wait() and self.restart_redis(sale, tokens), daemon=True)
        restarter.start()
        self.armed.touch()
        sale.stack.pause_feeder(True)  # until the Redis restart: orders wait on the queue
        spare = {sale.db.connection().thread_id()}
        stop = threading.Event()
        reconciler = threading.Thread(target=reconcile_periodically, args=(sale, stop, reconciled), daemon=True)
        reconciler.start()
        loser = threading.Thread(target=self.lose_redis_replies, args=(stop,), daemon=True)
        loser.start()
        killer = ConnectionKiller(
            creds, self.log, interval=0.5, share=0.5, spare=spare, chance=rng(self.seed, "mysql-connections")
        )
        with killer:
            result = sale.fire(
                tokens,
                progress,
                on_press=lambda done: done == restart_at and trigger.set(),
                on_win=on_win,
                on_lost=on_lost,
            )
            trigger.set()
            restarter.join()
        self.armed.unlink()
        stop.set()
        reconciler.join()
        loser.join()
        self.proxy.drop_replies = 0
        record(self.log, "redis-replies-lost", count=self.proxy.dropped)
        return result

    def lose_redis_replies(self, stop: threading.Event, always: bool = False) -> None:
        """Bursts of Redis answers lost on their way back to the functions (the scripts ran)."""
        assert self.proxy is not None
        while not stop.wait(REPLY_LOSS_EVERY):
            if always or self.armed.exists():
                self.proxy.drop_replies = REPLY_LOSS_BURST

    def send_expiries(self, sale: LocalSale, orders: dict[int, tuple[int, datetime]], fault: str, copies: int) -> None:
        """Extra expiry messages, as SQS may deliver them: ``copies`` of each order's
        (order id -> user id, the payBy the message claims: now or past, so due at once)."""
        url = sale.sqs.get_queue_url(QueueName=EXPIRY_QUEUE)["QueueUrl"]
        messages = [
            ExpiryMessage(order_id, sale.voucher_id, user_id, pay_by)
            for order_id, (user_id, pay_by) in sorted(orders.items())
            for _ in range(copies)
        ]
        ExpiryQueue(sale.sqs, url).send(messages)
        record(self.log, fault, count=len(messages))

    def outage(self, sale: LocalSale, tokens: dict[int, str], seconds: float) -> None:
        """The expiry function's event source mapping stopped (throttled, disabled) for
        ``seconds``, past every deadline of the wave; meanwhile Redis loses its data
        while the holds are outstanding."""
        ends = time.monotonic() + seconds
        sale.stack.pause_feeder(True)
        record(self.log, "expiry-consumer-down", seconds=seconds)
        try:
            self.lose_redis(sale, tokens, "holds outstanding")
            time.sleep(max(0.0, ends - time.monotonic()))
            self.delete_expiries(sale)
        finally:
            sale.stack.pause_feeder(False)

    def delete_expiries(self, sale: LocalSale) -> None:
        """Expiry messages deleted from their queue (as if dead-lettered, then purged), drawn
        per order among those due while the consumer is down (every copy of a drawn order's);
        the rest are visible again at once. Reconciliation must expire those holds."""
        url = sale.sqs.get_queue_url(QueueName=EXPIRY_QUEUE)["QueueUrl"]
        kept, deleted = [], 0
        while batch := sale.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        ):
            for m in batch:
                order_id = ExpiryMessage.from_json(m["Body"]).order_id
                if rng(self.seed, "expiry-deleted", order_id).random() < DELETED_EXPIRY:
                    sale.sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
                    deleted += 1
                else:
                    kept.append(m["ReceiptHandle"])
        for handle in kept:
            sale.sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
        record(self.log, "expiry-deleted", count=deleted)

    def lose_redis(self, sale: LocalSale, tokens: dict[int, str], why: str) -> None:
        """Redis dies and comes back empty while holds are outstanding; users log in
        again and recovery rebuilds the voucher from MySQL, which counts every return."""
        self.private_redis.kill()
        record(self.log, "redis-lost-holds-outstanding", why=why)
        self.private_redis.start()
        store_tokens(sale.redis, tokens, ttl_seconds=TOKEN_TTL)
        self.rebuild(sale)

    def rebuild(self, sale: LocalSale) -> None:
        """Recovery, tried again while the connection killer or a busy queue defers it."""
        for attempt in range(5):  # the connection killer may hit this run's own connections too
            try:
                done = recover_if_lost(sale.db, sale.redis, sale.scripts, sale.sqs, sale.settings(), wait=15)
                if not done.blocked:
                    break
                record(self.log, "redis-rebuild-deferred", why=done.blocked)
            except pymysql.Error:
                sale.db.close()
            time.sleep(0.2 * (attempt + 1))
        else:
            return  # the periodic reconciliation (which recovers first) rebuilds it once it can
        rebuilt = sum(r.applied for r in done.rebuilt)
        record(self.log, "redis-rebuilt", vouchers=rebuilt, deadLetters=done.dead_letters)

    @contextlib.contextmanager
    def losing_replies(self) -> Iterator[None]:
        """While the holds resolve: bursts of Redis answers lost, those to the gives-back among them."""
        assert self.proxy is not None
        stop = threading.Event()
        before = self.proxy.dropped
        loser = threading.Thread(target=self.lose_redis_replies, args=(stop, True), daemon=True)
        loser.start()
        try:
            yield
        finally:
            stop.set()
            loser.join()
            self.proxy.drop_replies = 0
            record(self.log, "return-replies-lost", count=self.proxy.dropped - before)

    def restart_redis(self, sale: LocalSale, tokens: dict[int, str]) -> None:
        """Two incidents at once. The persister has been down since the sale began
        (throttled, or MySQL unreachable) and half of the orders waiting for it have
        been dead-lettered, as SQS does after maxReceiveCount; then Redis dies and comes
        back empty. Then what operations would do: the persister comes back, sessions
        come back as users log in again, and recovery rebuilds the vouchers once the
        queue has drained, counting the dead-lettered orders as sold. The DLQ is
        replayed after the sale."""
        self.private_redis.kill()
        record(self.log, "redis-restart")
        moved = dead_letter_half_of_the_queue(sale)
        record(self.log, "messages-dead-lettered", count=moved)
        sale.stack.pause_feeder(False)
        self.private_redis.start()
        store_tokens(sale.redis, tokens, ttl_seconds=TOKEN_TTL)
        self.rebuild(sale)

    def faults_table(
        self,
        sale: LocalSale,
        presses: list[Press],
        reconciled: dict[str, int],
        dlq: tuple[int, int],
        poisoned: list[str],
        holds: dict[str, int] | None = None,
    ) -> list[Fault]:
        """The faults of the sale and what absorbed each; ``holds``: a holds run's figures, whose
        buyers ask for their order after a lost answer."""
        log = read_log(self.log)
        injected = Counter(line["fault"] for line in log)
        statuses = Counter(p.status for p in presses)

        def total(fault: str, field: str) -> int:
            return sum(line.get(field, 0) for line in log if line["fault"] == fault)

        failed = sale.failed_reasons()
        resumed = sum(n - 1 for n in Counter((p.order_id, p.user_id) for p in presses if p.status == 202).values())
        return [
            Fault(
                "SQS send refused (nothing stored)",
                injected["sqs-send-failure"],
                "reservation released, client told 503 TRY_AGAIN, the app retried",
                f"{statuses[503]} answers 503 (with the outages')",
            ),
            Fault(
                "SQS stored the order, its reply was lost",
                injected["sqs-reply-lost"],
                "send in doubt: answered 202 and promised (re-queued if it never arrives); copies absorbed",
                "see invariants: no order lost, none twice",
            ),
            Fault(
                "Redis answers lost (the scripts ran)",
                total("redis-replies-lost", "count"),
                "redis-py's retry gets its own reservation back; after a 503 the next press takes it over or "
                "resumes its order id",
                f"{resumed} presses answered with the order of an earlier press",
            ),
            Fault(
                "API container crashed after the gate, before the send",
                injected["api-crash-before-send"],
                "no 202 was given: the user's next press resumes the reservation, or reconciliation fails "
                "the order id (NOT_QUEUED) and frees the unit",
                f"reconciliation failed {reconciled.get('failed', 0)}; {statuses[500]} answers 500",
            ),
            Fault(
                "API container crashed after the send, the order queued (before or after its promise)",
                injected["api-crash-after-send"] + injected["api-crash-after-promise"],
                "the order stands though its client saw a 500; its next press resumes it (202, its id) while the "
                "mark is unpromised, else answers DUPLICATE_ORDER with no id: with holds the client asks "
                "GET /voucher-order/seckill/{voucherId}, finds its order (503 while its request may still run, "
                "then PENDING, then stored) and pays it like any winner",
                f"{injected['api-crash-after-send']} before the promise, {injected['api-crash-after-promise']} after"
                + (
                    ""
                    if holds is None
                    else f"; {holds['answers_lost']} answers lost, {holds['orders_found']} orders found through "
                    f"my-order, {holds['found_paid']} paid"
                ),
            ),
            Fault(
                "persister crashed mid-batch",
                injected["persister-crash-mid-batch"],
                "batch redelivered after the visibility timeout; idempotent on order id",
                "see invariants",
            ),
            Fault(
                "MySQL connection killed",
                injected["mysql-connection-killed"],
                "transaction rolled back, batch item failure, SQS retried (DLQ + replay past maxReceiveCount)",
                f"DLQ held {dlq[0]} before replay",
            ),
            Fault(
                "malformed message",
                injected["malformed-message"],
                "moved unchanged to the poison queue with its reason, acknowledged; never dead-lettered",
                f"poison queue holds {len(set(poisoned))} distinct ({len(poisoned)} with the copies a crash "
                f"mid-batch moved twice); DLQ holds {dlq[1]} after replay",
            ),
            Fault(
                "Redis restarted empty, orders waiting in the DLQ",
                injected["redis-restart"],
                "(the persister was down until then, and half the waiting orders were dead-lettered) 503 until "
                "the queue drained; vouchers rebuilt from MySQL with the dead-lettered orders counted as sold "
                "(no false 404, no unit sold twice); sessions restored",
                f"{total('messages-dead-lettered', 'count')} messages dead-lettered, "
                f"{total('redis-rebuilt', 'deadLetters')} orders counted at the rebuild; "
                f"{injected['redis-rebuild-deferred']} rebuilds deferred; {statuses[404]} answers 404; "
                f"FAILED: {', '.join(f'{k} {v}' for k, v in sorted(failed.items())) or 'none'}",
            ),
        ]

    def holds_faults(self, holds: Holds, answers: Counter[str]) -> list[Fault]:
        """The faults of a chaos run with holds, and what absorbed each; ``answers``: the
        payments' and cancels' answers by action and code."""
        log = read_log(self.log)
        injected = Counter(line["fault"] for line in log)

        def total(fault: str, field: str) -> int:
            return sum(line.get(field, 0) for line in log if line["fault"] == fault)

        return [
            Fault(
                "expiry messages early and duplicated",
                total("expiry-early", "count"),
                "the order is not overdue in MySQL: sent again with the time left (or nothing, not stored yet)",
                "see invariants: no order expired before its deadline",
            ),
            Fault(
                "expiry messages late and duplicated",
                total("expiry-late", "count"),
                "the order is paid or closed already: nothing changes, its unit is not given back again",
                "see invariants: returned set = closed orders",
            ),
            Fault(
                "payment racing its deadline",
                holds.fates["pay at the deadline"],
                "one transaction under the voucher row lock decides by the database's clock: paid, or 409 EXPIRED",
                f"payments answered PAID {answers['pay PAID']}, EXPIRED {answers['pay EXPIRED']}",
            ),
            Fault(
                "cancel racing an expiry",
                holds.fates["cancel at the deadline"],
                "the same lock: cancelled or expired, the unit given back once",
                f"cancels answered CANCELLED {answers['cancel CANCELLED']}, EXPIRED {answers['cancel EXPIRED']}",
            ),
            Fault(
                "Redis answers lost while the holds resolve (gives-back among them)",
                total("return-replies-lost", "count"),
                "the route answers what committed; the expiry retries (the returned set makes it a no-op); "
                "reconciliation repairs the stock",
                "see invariants: Redis stock = MySQL stock",
            ),
            Fault(
                "expiry consumer down past every deadline of a wave",
                injected["expiry-consumer-down"],
                "payments after the deadline are refused 409 EXPIRED and expire the order; the rest expire "
                "when the consumer is back",
                f"{total('expiry-consumer-down', 'seconds'):.0f} s down",
            ),
            Fault(
                "expiry messages deleted from their queue",
                total("expiry-deleted", "count"),
                "reconciliation expires every hold past its deadline by the expiry function's own decision: "
                f"its unit is back within one pass (every {RECONCILE_EVERY:.0f} s here, ReconcileSchedule in AWS)",
                "see invariants: every unit ends paid or back on sale",
            ),
            Fault(
                "Redis lost its data while holds were outstanding",
                injected["redis-lost-holds-outstanding"],
                "recovery rebuilds stock from MySQL (which counts every return) and the returned set",
                "see invariants",
            ),
        ]


def dead_letter_half_of_the_queue(sale: LocalSale) -> int:
    """Move every other message of OrderQueue to its DLQ; the rest are visible again
    after the visibility timeout."""
    moved = seen = 0
    while batch := sale.sqs.receive_message(QueueUrl=sale.queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
        "Messages", []
    ):
        for m in batch:
            seen += 1
            if seen % 2:
                sale.sqs.send_message(QueueUrl=sale.dlq_url, MessageBody=m["Body"])
                sale.sqs.delete_message(QueueUrl=sale.queue_url, ReceiptHandle=m["ReceiptHandle"])
                moved += 1
    return moved


def reconcile_periodically(sale: LocalSale, stop: threading.Event, totals: Counter[str]) -> None:
    """What ReconcilerFunction's schedule does in AWS, at a pace that fits a short sale."""
    while not stop.wait(RECONCILE_EVERY):
        try:
            totals.update(sale.reconcile(pending_age=MIN_PENDING_AGE))
        except Exception:  # a failed scheduled run; the next one tries again
            sale.db.close()

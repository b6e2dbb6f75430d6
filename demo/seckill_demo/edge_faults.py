"""The edge's faults in a chaos run with holds through the local edge: in the
waves after the first, Redis forgets its last writes to the voucher's edge
record, and a press's send is refused after the sell-out was published; each
leaves units on sale while the edge's store says sold out, which only
ReconcilerFunction's edge notice or sweep clears (docs/edge.md). Written to the
chaos run's log (``seckill_demo.chaos``), with the table of what absorbed them."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

from redis.exceptions import RedisError

from seckill.infra import keys
from seckill.infra.errors import TryAgain
from seckill.messages import OrderQueue
from seckill.press.gate import Gate
from seckill.press.orders import place_order
from seckill_demo.faults import read_log, record
from seckill_demo.report import Fault
from seckill_demo.sale import LocalSale
from seckill_local.sqs import sqs_client

# The edge's faults, with holds: each waits for the moment it needs in the waves after the
# first (units back, then sold out again), and gives up at the run's end.
EDGE_FAULT_POLL = 0.02  # seconds between two looks at the store and at Redis stock
FIRST_TICKET = "0" * 17  # below every cursor


def _store_sold_out(sale: LocalSale) -> Callable[[], bool | None]:
    """What the edge's store says of the sale: sold out, not, or None (no entry)."""
    assert sale.stack.edge is not None
    read = sale.stack.edge.reader(sale.voucher_id)

    def sold_out() -> bool | None:
        entry = read()
        return None if entry is None else bool(json.loads(entry)["soldOut"])

    return sold_out


def forget_edge_records(sale: LocalSale, log: Path, stop: threading.Event) -> None:
    """Redis forgets its last writes to the voucher's edge record (a failover to a replica
    that had not received them, a restore from a backup): the record as it was while the
    store said the sale was open, put back once the store says sold out again. A unit
    back then matches what Redis remembers, so no notice publishes it; only the sweep,
    comparing with the store, clears the flag (docs/edge.md, "What Redis forgets")."""
    key, sold_out = keys.edge(sale.voucher_id), _store_sold_out(sale)
    backup: dict[str, str] = {}
    while not stop.wait(EDGE_FAULT_POLL):
        try:
            if not backup:
                record_now = sale.redis.hgetall(key)
                if sold_out() is False and '"soldOut":false' in record_now.get("state", ""):
                    backup = record_now
            elif sold_out():
                sale.redis.delete(key)
                sale.redis.hset(key, mapping=backup)
                record(log, "redis-forgot-edge-records", version=int(backup["v"]))
                return
        except RedisError:
            continue  # Redis restarted in a chaos run


def fail_send_after_sellout(sale: LocalSale, log: Path, stop: threading.Event, user_id: int) -> None:
    """A press whose send fails after the sell-out (``seckill.press.orders.place_order``):
    it reserves a unit while units are back on sale, its SQS send stalls until the store
    says sold out (the other units sold meanwhile), then is refused; the press gives its
    unit back and answers 503, and nothing tells the edge (ReconcilerFunction's edge
    notice does, docs/edge.md)."""
    sold_out = _store_sold_out(sale)
    stalled = sqs_client(sale.stack.sqs_endpoint)
    sent: list[bool] = []

    def stall(**_: object) -> None:
        sent.append(True)
        while not stop.is_set() and not sold_out():
            time.sleep(EDGE_FAULT_POLL)

    stalled.meta.events.register("before-call.sqs.SendMessage", stall, unique_id="stall-until-sold-out")
    # A queue that does not exist: SQS refuses the send (400), so nothing was stored.
    refused = OrderQueue(stalled, f"{sale.queue_url}-refused")
    gate = Gate(sale.redis, sale.scripts, refusal_cache_seconds=0)
    # On a draw the gate reads the ticket of the press's verified pass: one any move admits.
    ticket = FIRST_TICKET if sale.args.admission == "draw" else ""
    while not stop.wait(EDGE_FAULT_POLL):
        try:
            if sold_out() is not False or int(sale.redis.get(keys.stock(sale.voucher_id)) or 0) <= 0:
                continue
            place_order(gate, sale.redis, refused, sale.db, sale.voucher_id, user_id, status_ttl=60, ticket=ticket)
        except TryAgain:
            if sent:  # else Redis was out of reach before the send: try again later
                record(log, "send-failed-after-sell-out", user=user_id)
                return
        except RedisError:
            continue  # Redis restarted in a chaos run


@contextlib.contextmanager
def edge_faults(sale: LocalSale, log: Path, user_id: int) -> Iterator[None]:
    """Both edge faults, each in a thread of its own, while the waves run."""
    stop = threading.Event()
    threads = [
        threading.Thread(target=forget_edge_records, args=(sale, log, stop), daemon=True),
        threading.Thread(target=fail_send_after_sellout, args=(sale, log, stop, user_id), daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def edge_faults_table(log: Path, refused: str) -> list[Fault]:
    """The edge's faults and what absorbed them; ``refused``: the check's figures."""
    injected = Counter(line["fault"] for line in read_log(log))
    return [
        Fault(
            "Redis forgot its edge record (restored from before the sell-out)",
            injected["redis-forgot-edge-records"],
            "a unit back matches what Redis remembers, so no notice is sent; the sweep claims every state "
            "anew and the publisher writes where the store differs",
            refused,
        ),
        Fault(
            "a press's send refused after the sell-out was published",
            injected["send-failed-after-sell-out"],
            "the press gives its unit back and answers 503; ReconcilerFunction's edge notice publishes the "
            "unit back (or the sweep, if Redis forgot)",
            refused,
        ),
    ]

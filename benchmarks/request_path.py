"""(3) The request path against its floor, in one process, one request at a time.

Three contenders per kind of press:

- ``handler``: ``SeckillApiFunction``'s ``lambda_handler``, imported as the runtime
  does, on an API Gateway event (Powertools as deployed, tracing off);
- ``resolver`` (the sold-out cache warm, and duplicates): the same handler with the press
  routed through the Powertools resolver, as every other route is, instead of its own
  path (docs/architecture.md, "The fast path of a press");
- ``place_order``: ``seckill.press.orders.place_order`` on the same clients the
  handler builds (Gate, OrderQueue, Database), without the HTTP layer;
- ``evalsha``: a bare redis-py ``EVALSHA`` of the same gate script on a plain
  client: the floor, one Redis round trip;
- ``id_before_gate`` (refusals only): an order id made by an INCR of its own before
  the gate (not from the container's block), so that every press pays for it.

Kinds of press: refused with the refusal cache off (SOLD_OUT from Redis),
refused with the sold-out cache warm (no Redis at all), duplicate (the user
already holds an order), accepted (a fresh user; SQS included for the handler
and place_order, and shown without it, measured by botocore's events).
Contenders run side by side: in every round, those of a kind of press take turns
of a twentieth of their requests each; each figure is the median of rounds. The
clock covers the requests alone: their answers are checked once it has stopped
(parsing the handler's JSON body is the client's work, not the handler's).
Each contender's Redis round trips per request are counted in this process, where
redis-py writes to its socket (``RoundTrips``: a pipeline is one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis as redis_py
from botocore import auth

from benchmarks.counters import Counters, RoundTrips
from benchmarks.testbed import StackInfo, apply_env, create_voucher, far_id, function_env
from benchmarks.workers import CallTimer, outcome, press_event
from seckill.ids import next_order_id
from seckill.infra import keys
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database, connect
from seckill.infra.errors import Refusal
from seckill.infra.lua_scripts import Scripts, read_script
from seckill.messages import OrderQueue
from seckill.press import orders
from seckill.press.gate import DUPLICATE, OK, SOLD_OUT, Gate
from seckill_local.checkout import ROOT
from seckill_local.lambdas import LocalContext, load_handler
from seckill_local.template import Template

KINDS = {
    "refused_cache_off": "409 SOLD_OUT",
    "refused_cache_warm": "409 SOLD_OUT",
    "duplicate": "409 DUPLICATE_ORDER",
    "accepted": "202",
}
CONTENDERS = ("handler", "place_order", "evalsha")
TURNS = 20  # a contender's requests of a round come in this many turns, alternating with the others'
GATE_REPLIES = {OK: "202", SOLD_OUT: "409 SOLD_OUT", DUPLICATE: "409 DUPLICATE_ORDER"}


@dataclasses.dataclass(frozen=True)
class Sizes:
    refusals: int  # requests per contender per round, for the refusals and duplicates
    accepted: int  # requests per contender per round, accepted
    rounds: int


class Paths:
    def __init__(self, info: StackInfo) -> None:
        template = Template.load()
        fn = template.functions["SeckillApiFunction"]
        env = function_env(info, "SeckillApiFunction", template)
        self.timer = CallTimer().install()
        self.round_trips = RoundTrips()
        # The same module twice, under two names: one with the refusal cache off, one as deployed.
        apply_env({**env, "SECKILL_REFUSAL_CACHE_SECONDS": "0"})
        self.handler_cold = load_handler(dataclasses.replace(fn, logical_id="SeckillApiFunctionCacheOff"))
        os.environ.pop("SECKILL_REFUSAL_CACHE_SECONDS")
        apply_env(env)
        self.handler_warm = load_handler(fn)
        self.handler_resolver = load_handler(dataclasses.replace(fn, logical_id="SeckillApiFunctionResolver"))
        sys.modules[self.handler_resolver.__module__].PRESS = None  # no route key matches: the resolver's
        self.fn = fn
        settings = Settings.from_env()
        self.redis = redis_client(settings)
        scripts = Scripts.register(self.redis)
        self.gate_cold = Gate(self.redis, scripts, refusal_cache_seconds=0)
        self.gate_warm = Gate(self.redis, scripts, settings.refusal_cache_seconds)
        self.queue = OrderQueue(sqs_client(), settings.order_queue_url)
        self.db = Database.from_settings(settings)
        self.ttl = settings.status_ttl_seconds
        self.bare = redis_py.Redis.from_url(settings.redis_url, decode_responses=True)
        self.gate_sha = self.bare.script_load(read_script("gate"))
        self.event = json.loads((ROOT / "events" / "seckill_api_seckill.json").read_text(encoding="utf-8"))
        self.counters = Counters(connect(info.creds), self.redis)
        db = Database(info.creds)
        self.sold_out = create_voucher(db, self.redis, 1)
        self.open_sale = create_voucher(db, self.redis, 10_000_000)
        self.buyer = far_id()
        self.empty_queue()
        # One real sale each: the sold-out voucher's only unit, and the duplicate's first order.
        orders.place_order(
            self.gate_cold, self.redis, self.queue, self.db, self.sold_out, far_id(), status_ttl=self.ttl
        )
        orders.place_order(
            self.gate_cold, self.redis, self.queue, self.db, self.open_sale, self.buyer, status_ttl=self.ttl
        )

    def each_timed(
        self, handler: Callable[[dict[str, Any], Any], Any], events: list[dict[str, Any]]
    ) -> tuple[list[float], list[float], list[Any]]:
        """``events`` through ``handler`` one at a time, each call timed alone: its seconds,
        the same less the time inside SendMessage, and the answers (checked by the caller,
        after the clock)."""
        contexts = [LocalContext(self.fn.logical_id, 30) for _ in events]
        seconds, without, answers = [], [], []
        for event, context in zip(events, contexts, strict=True):
            sent = self.timer.total
            started = time.perf_counter()
            answers.append(handler(event, context))
            took = time.perf_counter() - started
            seconds.append(took)
            without.append(took - (self.timer.total - sent))
        return seconds, without, answers

    def requests(self, kind: str, contender: str, n: int) -> Callable[[], list[Any]]:
        """A loop of n requests of this kind; returns each answer as it came (``label``
        reads them once the clock has stopped: reading an answer is the client's work)."""
        voucher = self.open_sale if kind in {"duplicate", "accepted"} else self.sold_out
        users = [far_id() if kind == "accepted" else self.buyer for _ in range(n)]
        if contender in ("handler", "resolver"):
            handler = self.handler_warm if kind == "refused_cache_warm" else self.handler_cold
            handler = self.handler_resolver if contender == "resolver" else handler
            events = [press_event(self.event, voucher, u, i) for i, u in enumerate(users)]
            contexts = [LocalContext(self.fn.logical_id, self.fn.timeout) for _ in users]
            return lambda: [handler(e, c) for e, c in zip(events, contexts, strict=True)]
        if contender == "place_order":
            gate = self.gate_warm if kind == "refused_cache_warm" else self.gate_cold
            return lambda: [
                orders.place_order(gate, self.redis, self.queue, self.db, voucher, u, status_ttl=self.ttl)
                for u in users
            ]
        names = keys.gate_keys(voucher)
        tokens = [uuid.uuid4().hex for _ in users]
        id_first = contender == "id_before_gate"  # an INCR of its own per press
        block = self.gate_cold.ids

        def evalsha() -> list[Any]:
            answers = []
            for u, t in zip(users, tokens, strict=True):
                order_id = next_order_id(self.bare) if id_first else block.take()
                try:
                    answers.append(self.bare.evalsha(self.gate_sha, len(names), *names, u, t, order_id, ""))
                except redis_py.exceptions.NoScriptError:  # another client of the shared Redis flushed it
                    self.bare.script_load(read_script("gate"))
                    answers.append(self.bare.evalsha(self.gate_sha, len(names), *names, u, t, order_id, ""))
            return answers

        return evalsha

    def empty_queue(self) -> None:
        """Receive and delete what the accepted presses queued (PurgeQueue: once a minute)."""
        sqs, url = self.queue.sqs, self.queue.queue_url
        while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            entries = [{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
            sqs.delete_message_batch(QueueUrl=url, Entries=entries)

    def measure(self, kind: str, contenders: list[str], n: int) -> dict[str, dict[str, Any]]:
        """n requests of this kind for each contender, side by side: they take turns of
        n / TURNS requests, in an order that rotates, so that the machine's load, which
        moves over seconds, weighs on each alike. The servers' counters are read around
        each contender's first turn."""
        size = max(1, n // TURNS)
        seconds = dict.fromkeys(contenders, 0.0)
        sends = dict.fromkeys(contenders, 0.0)
        trips = dict.fromkeys(contenders, 0)
        usage: dict[str, dict[str, Any]] = {}
        for turn, start in enumerate(range(0, n, size)):
            count = min(size, n - start)
            for contender in contenders[turn % len(contenders) :] + contenders[: turn % len(contenders)]:
                loop = self.requests(kind, contender, count)
                if kind == "refused_cache_warm":  # each has just seen SOLD_OUT
                    for warm in (self.handler_warm, self.handler_resolver):
                        warm(press_event(self.event, self.sold_out, self.buyer, 0), LocalContext("warm", 30))
                    orders.place_order(
                        self.gate_warm, self.redis, self.queue, self.db, self.sold_out, self.buyer, status_ttl=self.ttl
                    )
                sent = self.timer.total
                before = None if contender in usage else self.counters.snapshot()
                tripped = self.round_trips.count
                started = time.perf_counter()
                answers = loop()
                seconds[contender] += time.perf_counter() - started
                trips[contender] += self.round_trips.count - tripped
                sends[contender] += self.timer.total - sent
                if before is not None:
                    usage[contender] = Counters.usage(before, self.counters.snapshot(), count).to_json()
                wrong = [a for a in (label(contender, answer) for answer in answers) if a != KINDS[kind]]
                if wrong:
                    raise RuntimeError(
                        f"{contender} on {kind}: expected {KINDS[kind]}, got {wrong[0]} ({len(wrong)} of {count})"
                    )
            if kind == "accepted":
                self.empty_queue()  # every turn starts on an empty queue (moto slows down with depth)
        return {
            c: {
                "us": seconds[c] / n * 1e6,
                "us_without_transport": (seconds[c] - sends[c]) / n * 1e6,
                "redis_round_trips": trips[c] / n,
                "usage": usage[c],
            }
            for c in contenders
        }


def label(contender: str, answer: Any) -> str:
    """An answer as ``KINDS`` names it: the handler's HTTP answer, place_order's order id
    or refusal, the gate script's reply."""
    if contender in ("handler", "resolver"):
        return outcome(answer)[0]
    if contender == "place_order":
        return f"{answer.status} {answer.code}" if isinstance(answer, Refusal) else "202"
    return GATE_REPLIES.get(int(answer[0]), "?")


def run(info: StackInfo, sizes: Sizes) -> dict[str, Any]:
    """In a process of its own (it imports the handler)."""
    paths = Paths(info)
    plan = {kind: [c for c in CONTENDERS if not (kind == "refused_cache_warm" and c == "evalsha")] for kind in KINDS}
    plan["refused_cache_off"].append("id_before_gate")
    plan["refused_cache_warm"].append("resolver")
    plan["duplicate"].append("resolver")
    samples: dict[tuple[str, str], list[dict[str, Any]]] = {(k, c): [] for k, cs in plan.items() for c in cs}
    kinds = list(plan)
    for r in range(sizes.rounds):
        for kind in kinds[r % len(kinds) :] + kinds[: r % len(kinds)]:
            n = sizes.accepted if kind == "accepted" else sizes.refusals
            contenders = plan[kind][r % len(plan[kind]) :] + plan[kind][: r % len(plan[kind])]
            for contender, sample in paths.measure(kind, contenders, n).items():
                samples[(kind, contender)].append(sample)
        print(f"request path: round {r + 1}/{sizes.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for (kind, contender), entries in samples.items():
        rows.append(
            {
                "kind": kind,
                "contender": contender,
                "us": round(statistics.median(e["us"] for e in entries), 2),
                "us_without_transport": round(statistics.median(e["us_without_transport"] for e in entries), 2),
                "redis_round_trips": round(max(e["redis_round_trips"] for e in entries), 3),
                "usage": min(entries, key=lambda e: e["usage"]["redis_commands"])["usage"],
            }
        )
    floor = {row["kind"]: row["us"] for row in rows if row["contender"] == "evalsha"}
    for row in rows:
        base = floor.get(row["kind"]) or floor.get("refused_cache_off")
        row["vs_evalsha"] = round(row["us"] / base, 3) if base else None
    # What signed the handler's SendMessage (seckill_local.lambdas.sign_as_deployed).
    return {"sizes": dataclasses.asdict(sizes), "sigv4_signer": auth.AUTH_TYPE_MAPS["v4"].__name__, "results": rows}

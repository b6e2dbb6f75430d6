"""(6) The edge: refused presses of a sold-out voucher, and the state's way to the edge.

Four contenders answer the same press (``POST /voucher-order/seckill/<id>`` with a
login token) over HTTP, from client processes holding ``concurrency`` keep-alive
connections, taking turns of a twentieth of their presses each in a rotating order
(a turn's clock includes handing it to the clients, which weighs most on the fastest):

- ``edge``: the local edge (``seckill_local.edge.EdgeServer``: ``edge/press.js`` on
  Node.js) in front of the local API, its store saying ``soldOut`` for the voucher:
  the function answers 409 SOLD_OUT itself;
- ``api``: the same press to the local API without the edge, the design the edge
  replaces: the authorizer, then a warm ``SeckillApiFunction`` container, whose
  sold-out cache (as deployed) answers without Redis;
- ``api_cache_off``: the same with that cache off, so that every refusal runs the
  gate script in Redis too (a second local API, its own containers);
- ``floor``: the same request to a Node.js server answering the same status and body
  with no work at all (``edge_floor.mjs``): what one HTTP round trip to Node.js costs
  here, below which no edge on this machine can answer.

The state's way: a voucher's last unit sold (the gate, through ``place_order``) or a
unit given back (``holds.give_back``), then the notice the functions send after such a
change (``StateQueue.notice``: the claim in Redis, SendMessage to EdgeStateQueue),
``EdgePublisherFunction`` run by the local runner's feeder (``QueueFeeder``, the
template's batch size and concurrency) writing the edge's store, until a probe press
through the edge is answered differently (by the edge, or forwarded). Timed from the
moment the change returned from Redis; the probes come every ``PROBE_PAUSE`` seconds.
The notice is sent at once, as a return's is (``holds``); a sell-out's, deployed, also
waits for the persister's batch that stores the order (``order_persister``).

Everything is local: the edge's store and function share a Node.js process (no
propagation to edge locations), the local API is a Python HTTP server calling warm
containers (no API Gateway, no Lambda service), and all share the machine's cores.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from multiprocessing import get_context
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.stats import latency_ms, ratio
from benchmarks.testbed import HINT_TTL, StackInfo, create_voucher, far_id, function_env
from seckill.edge.state import StateQueue
from seckill.holds import give_back
from seckill.infra import keys, results
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderQueue
from seckill.press import orders
from seckill.press.gate import REFUSALS, SOLD_OUT, Gate
from seckill.tokens import mint_tokens
from seckill_local.api import LocalHttpApi, make_server
from seckill_local.edge import EdgeServer, kvs_environment
from seckill_local.feeder import QueueFeeder
from seckill_local.lambdas import FunctionPool
from seckill_local.node import MISSING, node
from seckill_local.runner import EDGE_QUEUE, EDGE_QUEUE_VARIABLE
from seckill_local.sqs import sqs_client
from seckill_local.template import Template

CONTENDERS = ("edge", "api", "api_cache_off", "floor")
TURNS = 20  # a contender's presses of a round come in this many turns, alternating with the others'
API_CONTAINERS = 4  # as `seckill-local start-api` (its --containers default)
PROBE_PAUSE = 0.005  # between probe presses while a state change travels
FLOOR = Path(__file__).resolve().parent / "edge_floor.mjs"


@dataclasses.dataclass(frozen=True)
class Sizes:
    presses: int  # per contender per round
    concurrency: int  # presses in flight (client processes, one keep-alive connection each)
    rounds: int
    changes: int  # state changes timed, sell-outs and returns alternating


# In each client process: its connection to each server, kept alive across turns.
_connections: dict[str, http.client.HTTPConnection] = {}


def _connection(base: str) -> http.client.HTTPConnection:
    if base not in _connections:
        parts = urlsplit(base)
        _connections[base] = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    return _connections[base]


def _press(base: str, path: str, token: str) -> tuple[int, bool, bytes]:
    """One press on the kept-alive connection (again on a fresh one if the server had
    closed it): the status, whether the edge answered it, the body."""
    headers = {"authorization": f"Bearer {token}"}
    try:
        _connection(base).request("POST", path, body=b"", headers=headers)
        answer = _connection(base).getresponse()
    except (http.client.HTTPException, ConnectionError):
        _connections.pop(base).close()
        _connection(base).request("POST", path, body=b"", headers=headers)
        answer = _connection(base).getresponse()
    return answer.status, answer.getheader("x-seckill-edge") == "1", answer.read()


def _presses(base: str, path: str, token: str, count: int) -> tuple[list[float], dict[str, int], list[bytes]]:
    """count presses one after another: seconds each, the answers by label, their bodies."""
    seconds: list[float] = []
    answers: list[tuple[int, bool, bytes]] = []
    for _ in range(count):
        started = time.perf_counter()
        answers.append(_press(base, path, token))
        seconds.append(time.perf_counter() - started)
    labels = Counter(label(*a) for a in answers)
    return seconds, dict(labels), sorted({a[2] for a in answers})


def label(status: int, by_edge: bool, body: bytes) -> str:
    code = json.loads(body).get("code") if body.startswith(b"{") else None
    return f"{status} {code}" + (" (edge)" if by_edge else "")


class Floor:
    """``edge_floor.mjs`` as a child process, answering ``status`` and ``body``."""

    def __init__(self, status: int, body: str) -> None:
        path = node()
        if path is None:
            raise RuntimeError(MISSING)
        # Our own script; its stdin, a pipe only we hold, ends it if we die.
        self.process = subprocess.Popen(  # noqa: S603
            [str(path), str(FLOOR), str(status), body], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("floor listening on "):
            self.stop()
            raise RuntimeError(f"the floor server did not start (said {line.strip()!r})")
        self.url = f"http://127.0.0.1:{int(line.rsplit(' ', 1)[1])}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


class EdgeBench:
    """The local API (in this process, its functions in warm containers), the edge in
    front of it, the floor, and EdgeStateQueue fed to EdgePublisherFunction."""

    def __init__(self, info: StackInfo) -> None:
        self.info = info
        self.teardown = ExitStack()  # what was started, stopped in reverse
        self.tokens: dict[int, str] = {}
        self.vouchers: list[int] = []
        try:
            self._start(info)
        except BaseException:
            self.teardown.close()
            raise

    def _start(self, info: StackInfo) -> None:
        template = Template.load()
        self.redis = redis_client(Settings.from_env({"REDIS_URL": info.redis_url}))
        self.teardown.callback(self._forget)
        self.scripts = Scripts.register(self.redis)
        self.db = Database(info.creds)
        sqs = sqs_client(info.sqs_endpoint)
        self.orders = OrderQueue(sqs, info.queues["OrderQueue"])
        self.gate = Gate(self.redis, self.scripts, refusal_cache_seconds=0)
        self.notices = StateQueue(sqs, info.queues[EDGE_QUEUE])
        self.api_url = self.serve_api(template, {})
        # The same API, every refusal reaching the gate in Redis: no container remembers a sold-out voucher.
        self.api_cache_off_url = self.serve_api(template, {"SECKILL_REFUSAL_CACHE_SECONDS": "0"})
        self.edge = self.teardown.enter_context(EdgeServer(self.api_url))
        refusal = REFUSALS[SOLD_OUT]
        self.sold_out_body = results.fail(refusal.status, refusal.code, refusal.message).body
        self.floor = Floor(refusal.status, self.sold_out_body)
        self.teardown.callback(self.floor.stop)
        publisher = template.functions["EdgePublisherFunction"]
        source = next(s for s in publisher.sqs_events if s["Queue"]["Fn::GetAtt"][0] == EDGE_QUEUE)
        concurrency = int(template.resolve((source.get("ScalingConfig") or {}).get("MaximumConcurrency"), {}) or 2)
        batch = int(template.resolve(source.get("BatchSize"), {}) or 10)
        env = {**self.env(template, publisher.logical_id), **kvs_environment(self.edge.kvs_endpoint)}
        pool = FunctionPool(publisher, env, concurrency)
        self.teardown.callback(pool.close)
        pool.warm()
        self.feeder = QueueFeeder(sqs, info.queues[EDGE_QUEUE], pool, batch_size=batch, concurrency=concurrency)
        self.feeder.start()
        self.teardown.callback(self.feeder.close)

    def serve_api(self, template: Template, overrides: dict[str, str]) -> str:
        """The local API as `seckill-local start-api` serves it, on a port of its own; its URL."""
        pools: dict[str, FunctionPool] = {}
        for _, fn in template.routes():
            if fn.logical_id not in pools:
                env = {**self.env(template, fn.logical_id), **overrides}
                pools[fn.logical_id] = FunctionPool(fn, env, API_CONTAINERS)
        authorizer = template.authorizer()
        if authorizer and authorizer[0] not in pools:
            fn = template.functions[authorizer[0]]
            pools[fn.logical_id] = FunctionPool(fn, self.env(template, fn.logical_id), API_CONTAINERS // 2)
        for pool in pools.values():
            self.teardown.callback(pool.close)
        for pool in pools.values():
            pool.warm()
        server = make_server(LocalHttpApi(template, pools), "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.teardown.callback(server.shutdown)
        return f"http://127.0.0.1:{server.server_port}"

    def env(self, template: Template, logical_id: str) -> dict[str, str]:
        """As `seckill-local start-api --edge` gives it: the functions notice EdgeStateQueue."""
        env = function_env(self.info, logical_id, template)
        if EDGE_QUEUE_VARIABLE in template.functions[logical_id].environment:
            env[EDGE_QUEUE_VARIABLE] = self.info.queues[EDGE_QUEUE]
        return env

    def token(self, user_id: int) -> str:
        self.tokens.update(mint_tokens(self.redis, [user_id], HINT_TTL))
        return self.tokens[user_id]

    def voucher(self, stock: int) -> int:
        voucher = create_voucher(self.db, self.redis, stock)
        self.vouchers.append(voucher)
        return voucher

    def sell(self, voucher: int, user: int | None = None) -> int:
        """A unit sold by the gate, as the press does (its order queued); the order id."""
        answer = orders.place_order(
            self.gate, self.redis, self.orders, self.db, voucher, user or far_id(), status_ttl=HINT_TTL
        )
        if not isinstance(answer, int):
            raise RuntimeError(f"voucher {voucher}: expected a sale, got {answer}")
        return answer

    def until_edge(self, voucher: int, token: str, *, answers: bool, timeout: float = 30) -> tuple[float, int]:
        """Probe presses through the edge until it answers (or forwards, answers=False):
        seconds from now, and how many probes it took."""
        started = time.perf_counter()
        path = f"/voucher-order/seckill/{voucher}"
        probes = 0
        while time.perf_counter() - started < timeout:
            probes += 1
            if _press(self.edge.url, path, token)[1] is answers:
                return time.perf_counter() - started, probes
            time.sleep(PROBE_PAUSE)
        raise RuntimeError(f"voucher {voucher}: the edge did not {'answer' if answers else 'forward'} in {timeout} s")

    def _forget(self) -> None:
        """The run's login tokens and edge claims leave the shared Redis (the vouchers'
        own keys go with the run's database, ``BenchStack.close``)."""
        if self.tokens:
            self.redis.delete(*(keys.login_token(t) for t in self.tokens.values()))
        if self.vouchers:
            self.redis.delete(*(keys.edge(v) for v in self.vouchers))

    def close(self) -> None:
        self.teardown.close()


def refusals(bench: EdgeBench, clients: ProcessPoolExecutor, sizes: Sizes) -> dict[str, Any]:
    """The sold-out voucher's refused presses, the contenders taking turns."""
    voucher = bench.voucher(1)
    bench.sell(voucher)
    bench.notices.notice(bench.scripts, voucher)
    token = bench.token(far_id())
    bench.until_edge(voucher, token, answers=True)
    urls = {
        "edge": bench.edge.url,
        "api": bench.api_url,
        "api_cache_off": bench.api_cache_off_url,
        "floor": bench.floor.url,
    }
    path = f"/voucher-order/seckill/{voucher}"
    for url in urls.values():  # the client processes start and connect before the clock does
        list(clients.map(_presses, *zip(*[(url, path, token, 20)] * sizes.concurrency, strict=True)))
    before = bench.edge.stats()
    rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in CONTENDERS}
    labels: dict[str, Counter[str]] = {c: Counter() for c in CONTENDERS}
    bodies: dict[str, set[bytes]] = {c: set() for c in CONTENDERS}
    turn_size = max(sizes.concurrency, sizes.presses // TURNS)
    for r in range(sizes.rounds):
        seconds = dict.fromkeys(CONTENDERS, 0.0)
        latencies: dict[str, list[float]] = {c: [] for c in CONTENDERS}
        for turn, start in enumerate(range(0, sizes.presses, turn_size)):
            count = min(turn_size, sizes.presses - start)
            shares = [count // sizes.concurrency + (i < count % sizes.concurrency) for i in range(sizes.concurrency)]
            order = CONTENDERS[(turn + r) % len(CONTENDERS) :] + CONTENDERS[: (turn + r) % len(CONTENDERS)]
            for contender in order:
                jobs = [(urls[contender], path, token, n) for n in shares if n]
                started = time.perf_counter()
                done = list(clients.map(_presses, *zip(*jobs, strict=True)))
                seconds[contender] += time.perf_counter() - started
                for each, counted, seen in done:
                    latencies[contender].extend(each)
                    labels[contender].update(counted)
                    bodies[contender].update(seen)
        for c in CONTENDERS:
            rounds[c].append({"throughput": sizes.presses / seconds[c], "latency": latency_ms(latencies[c])})
        print(f"edge: round {r + 1}/{sizes.rounds} done", file=sys.stderr, flush=True)
    after = bench.edge.stats()
    for c in CONTENDERS:
        wanted = "409 SOLD_OUT (edge)" if c == "edge" else "409 SOLD_OUT"
        if set(labels[c]) != {wanted}:
            raise RuntimeError(f"{c}: expected only {wanted}, got {dict(labels[c])}")
    results_ = []
    for c in CONTENDERS:
        results_.append(
            {
                "contender": c,
                "throughput": round(statistics.median(e["throughput"] for e in rounds[c]), 1),
                "latency": {
                    q: round(statistics.median(e["latency"][q] for e in rounds[c]), 3)
                    for q in ("p50", "p95", "p99", "mean")
                },
                "answers": dict(labels[c]),
            }
        )

    def per_round(a: str, b: str, field: str) -> float:
        """The median over rounds of a's figure over b's, each pair from the same round."""
        pairs = zip(rounds[a], rounds[b], strict=True)
        if field == "throughput":
            return round(statistics.median(ratio(x["throughput"], y["throughput"]) for x, y in pairs), 3)
        return round(statistics.median(ratio(x["latency"][field], y["latency"][field]) for x, y in pairs), 3)

    expected = bench.sold_out_body.encode()
    return {
        "voucher": voucher,
        "results": results_,
        "ratios": {
            "edge_vs_api_throughput": per_round("edge", "api", "throughput"),
            "api_vs_edge_p50": per_round("api", "edge", "p50"),
            "api_vs_edge_p99": per_round("api", "edge", "p99"),
            "edge_vs_api_cache_off_throughput": per_round("edge", "api_cache_off", "throughput"),
            "api_cache_off_vs_edge_p50": per_round("api_cache_off", "edge", "p50"),
            "edge_vs_floor_throughput": per_round("edge", "floor", "throughput"),
            "edge_vs_floor_p50": per_round("edge", "floor", "p50"),
        },
        "bodies_equal": all(bodies[c] == {expected} for c in CONTENDERS),
        "edge_counted": {"answered": after.answered - before.answered, "forwarded": after.forwarded - before.forwarded},
    }


def state_path(bench: EdgeBench, changes: int) -> dict[str, Any]:
    """Sell-outs and returns of one voucher, alternating, each timed to the edge's new answer.
    The probe holds an order of the voucher: a forwarded probe is a DUPLICATE, never a sale."""
    voucher = bench.voucher(2)
    prober = far_id()
    bench.sell(voucher, prober)
    token = bench.token(prober)
    bench.notices.notice(bench.scripts, voucher)  # on sale, one unit left: the edge forwards
    bench.until_edge(voucher, token, answers=False)
    timed: list[dict[str, Any]] = []
    order_id = 0
    for i in range(changes):
        sold_out = i % 2 == 0
        if sold_out:
            order_id = bench.sell(voucher)
        elif give_back(bench.scripts, voucher, order_id) != 1:
            raise RuntimeError(f"order {order_id}'s unit was not given back")
        changed = time.perf_counter()
        bench.notices.notice(bench.scripts, voucher)
        _, probes = bench.until_edge(voucher, token, answers=sold_out)
        ms = round((time.perf_counter() - changed) * 1e3, 2)
        timed.append({"change": "sold out" if sold_out else "given back", "ms": ms, "probes": probes})
    lags = [t["ms"] / 1e3 for t in timed]
    return {
        "voucher": voucher,
        "changes": timed,
        "lag": latency_ms(lags),
        "sold_out": latency_ms([t["ms"] / 1e3 for t in timed if t["change"] == "sold out"]),
        "given_back": latency_ms([t["ms"] / 1e3 for t in timed if t["change"] == "given back"]),
        "probe_pause_ms": PROBE_PAUSE * 1e3,
        "feeder": {"batches": bench.feeder.stats.batches, "failed": bench.feeder.stats.failed},
    }


def run(info: StackInfo, sizes: Sizes) -> dict[str, Any]:
    """In a process of its own (it starts the functions' containers)."""
    bench = EdgeBench(info)
    try:
        with ProcessPoolExecutor(sizes.concurrency, mp_context=get_context("spawn")) as clients:
            refused = refusals(bench, clients, sizes)
        state = state_path(bench, sizes.changes)
    finally:
        bench.close()
    return {"sizes": dataclasses.asdict(sizes), **refused, "state": state}

"""Long-lived worker processes, each calling one Lambda handler in-process, one
request at a time, as a warm Lambda container serves invocations.

Each worker imports the handler once (``seckill_local.lambdas.load_handler``,
with the function's environment), so module-level clients and caches live
across requests. For a phase, every worker is handed its share of the presses
and builds their events; then all start together and time each handler call
alone. A storm (``Storm``) is timed by the clock instead: each worker presses
until its seconds are up. Their stdout (Powertools' metrics and logs) goes to /dev/null.

The time each request spent in SQS SendMessage is measured by botocore's own
``before-call``/``after-call`` events, registered on the default session before
the handler is imported (its clients are made from it): nothing in the handler
is replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing import get_context
from multiprocessing.connection import Connection
from typing import Any

from seckill_local.lambdas import LocalContext, load_handler
from seckill_local.template import Function

Press = tuple[int, int]  # (voucher id, user id)
RING = 256  # a storm's events per worker, reused with a fresh user id each time


@dataclass(frozen=True)
class Storm:
    """Fresh users pressing one voucher for ``seconds``, as fast as the worker can: a phase
    timed by the clock rather than by a count, so that the side answering in microseconds
    is measured over as long as the other. Worker ``k`` of ``n`` presses as users
    ``first_user + k``, ``first_user + k + n``, ..."""

    voucher_id: int
    first_user: int
    seconds: float


# What a worker is handed for a phase: its presses, or its place in a storm (the storm,
# its number, the number of workers).
Share = list[Press] | tuple[Storm, int, int]


def press_event(template: dict[str, Any], voucher_id: int, user_id: int, n: int) -> dict[str, Any]:
    """``POST /voucher-order/seckill/{voucherId}`` as API Gateway sends it, the authorizer's user id inside."""
    event = json.loads(json.dumps(template))
    path = f"/voucher-order/seckill/{voucher_id}"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event["pathParameters"] = {"voucherId": str(voucher_id)}
    event["requestContext"]["authorizer"] = {"lambda": {"userId": str(user_id)}}
    event["requestContext"]["requestId"] = f"bench-{os.getpid()}-{n}"
    return event


def entry_event(template: dict[str, Any], voucher_id: int, user_id: int, n: int) -> dict[str, Any]:
    """``POST /voucher-order/seckill/{voucherId}/entry`` (``template`` the entry route's
    event), the user logged in with ``bench_token(user_id)``."""
    event = press_event(template, voucher_id, user_id, n)
    path = f"/voucher-order/seckill/{voucher_id}/entry"
    event["rawPath"] = event["requestContext"]["http"]["path"] = path
    event.setdefault("headers", {})["authorization"] = f"Bearer {bench_token(user_id)}"
    return event


def bench_token(user_id: int) -> str:
    """The login token a benchmark's user shows (a pass is bound to it)."""
    return f"bench-token-{user_id}"


MakeEvent = Callable[[dict[str, Any], int, int, int], dict[str, Any]]


class CallTimer:
    """Seconds spent inside the named SQS calls, from botocore's own events (thread-safe)."""

    def __init__(self, *operations: str) -> None:
        self.operations = operations or ("SendMessage",)
        self.total = 0.0
        self._started = threading.local()
        self._lock = threading.Lock()

    def install(self, events: Any = None) -> CallTimer:
        """On a client's events, or by default on boto3's default session, so that every
        client made from it afterwards (the handler's, at import) is timed."""
        if events is None:
            import boto3

            boto3.setup_default_session()
            events = boto3.DEFAULT_SESSION.events
        for operation in self.operations:
            events.register(f"before-call.sqs.{operation}", self._before)
            events.register(f"after-call.sqs.{operation}", self._after)
            events.register(f"after-call-error.sqs.{operation}", self._after)
        return self

    def _before(self, **_: Any) -> None:
        self._started.at = time.perf_counter()

    def _after(self, **_: Any) -> None:
        elapsed = time.perf_counter() - self._started.at
        with self._lock:
            self.total += elapsed


@dataclass
class WorkerResult:
    started: float
    ended: float
    latencies: array  # seconds, per request
    sends: array  # seconds in SQS SendMessage, per request
    outcomes: Counter[str]  # "202", "409 SOLD_OUT", ...
    ok: array = field(default_factory=lambda: array("B"))  # 1 where the press was answered 2xx
    accepted: list[tuple[int, str]] = field(default_factory=list)  # (user id, order id)


def outcome(response: dict[str, Any]) -> tuple[str, Any]:
    status = int(response["statusCode"])
    body = json.loads(response["body"])
    if status < 300:
        return str(status), body.get("data")
    return f"{status} {body.get('code')}", None


def _serve(
    conn: Connection, fn: Function, env: dict[str, str], go: Any, pool: Any, event_template: Any, make_event: MakeEvent
) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.environ.update(env)
    timer = CallTimer().install()
    handler = load_handler(fn)
    if pool is not None:
        import sys

        sys.modules[handler.__module__].use_pool(pool)
    conn.send(os.getpid())
    while (work := conn.recv()) is not None:
        if isinstance(work, tuple):
            storm, k, n = work
            ring = [press_event(event_template, storm.voucher_id, storm.first_user + k, i) for i in range(RING)]
            conn.send("ready")
            go.wait()
            conn.send(_storm(handler, fn, timer, ring, storm, k, n))
            continue
        presses = work
        events = [make_event(event_template, v, u, n) for n, (v, u) in enumerate(presses)]
        contexts = [LocalContext(fn.logical_id, fn.timeout) for _ in events]
        latencies, sends = array("d"), array("d")
        responses = []
        conn.send("ready")
        go.wait()
        started = time.perf_counter()
        for event, context in zip(events, contexts, strict=True):
            sent_before = timer.total
            t0 = time.perf_counter()
            response = handler(event, context)
            latencies.append(time.perf_counter() - t0)
            sends.append(timer.total - sent_before)
            responses.append(response)
        ended = time.perf_counter()
        conn.send(_result(started, ended, latencies, sends, [u for _, u in presses], responses))


def _result(
    started: float,
    ended: float,
    latencies: array[float],
    sends: array[float],
    users: Sequence[int],
    responses: list[dict[str, Any]],
) -> WorkerResult:
    """A worker's phase, its answers read once the clock has stopped."""
    result = WorkerResult(started, ended, latencies, sends, Counter())
    for user_id, response in zip(users, responses, strict=True):
        name, order_id = outcome(response)
        result.outcomes[name] += 1
        result.ok.append(order_id is not None)
        if order_id is not None:
            result.accepted.append((user_id, str(order_id)))
    return result


def _storm(
    handler: Any, fn: Function, timer: CallTimer, ring: list[dict[str, Any]], storm: Storm, k: int, n: int
) -> WorkerResult:
    """Presses until the storm's time is up. Its events were made before the clock started
    and are reused (only the user id changes, in the authorizer's context), so what is
    timed is the handler, not the making of events."""
    context = LocalContext(fn.logical_id, fn.timeout)
    latencies, sends = array("d"), array("d")
    responses = []
    started = time.perf_counter()
    deadline = started + storm.seconds
    t1 = started
    while t1 < deadline:
        event = ring[len(latencies) % RING]
        event["requestContext"]["authorizer"]["lambda"]["userId"] = str(storm.first_user + k + n * len(latencies))
        sent_before = timer.total
        t0 = time.perf_counter()
        responses.append(handler(event, context))
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        sends.append(timer.total - sent_before)
    users = range(storm.first_user + k, storm.first_user + k + n * len(latencies), n)
    return _result(started, t1, latencies, sends, users, responses)


def storm_shares(storm: Storm, workers: int) -> list[tuple[Storm, int, int]]:
    """A storm's shares for ``WorkerPool.prepare``, one per worker."""
    return [(storm, k, workers) for k in range(workers)]


class WorkerPool:
    """``size`` processes serving one function; ``pool`` bounds the baseline's MySQL use;
    ``make_event`` builds a request's event from ``event_template`` (a press's by default)."""

    def __init__(
        self,
        fn: Function,
        env: dict[str, str],
        size: int,
        event_template: dict[str, Any],
        pool: Any = None,
        make_event: MakeEvent = press_event,
    ):
        ctx = get_context("spawn")
        self.go = ctx.Event()
        self.conns: list[Connection] = []
        self.processes = []
        for _ in range(size):
            parent, child = ctx.Pipe()
            process = ctx.Process(
                target=_serve, args=(child, fn, env, self.go, pool, event_template, make_event), daemon=True
            )
            process.start()
            self.conns.append(parent)
            self.processes.append(process)
        for conn in self.conns:
            conn.recv()  # loaded

    def prepare(self, shares: Sequence[Share]) -> None:
        """Hand each of the first len(shares) workers its share (``storm_shares`` makes a
        storm's); they build their events and wait."""
        if len(shares) > len(self.conns):
            raise ValueError(f"{len(shares)} shares for {len(self.conns)} workers")
        self.go.clear()
        self._busy = self.conns[: len(shares)]
        for conn, share in zip(self._busy, shares, strict=True):
            conn.send(share)
        for conn in self._busy:
            conn.recv()  # ready

    def run(self) -> list[WorkerResult]:
        """Start the prepared workers together; their results once all are done."""
        self.go.set()
        return [conn.recv() for conn in self._busy]

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()

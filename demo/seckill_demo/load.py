"""The load generator: every user's presses, shuffled, fired with a bounded number
in flight, each press as the client app makes it (a 503 TRY_AGAIN is pressed
again after a short pause; a press whose answer was lost is reported, so that the
app can ask for its order), with the latency of every answer."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import urllib3
from rich.progress import Progress

from seckill_demo.faults import rng

TRY_AGAIN_RETRIES = 10  # how often the client app repeats a press answered 503 TRY_AGAIN
TOKEN_TTL = 3600  # seconds the users' login tokens live: longer than any sale
PASS_HEADER = "x-seckill-pass"  # noqa: S105 (a header's name): a draw sale's pass, sent with every press


@dataclass
class Press:
    """One button press as the client saw it."""

    user_id: int
    status: int
    code: str | None
    order_id: str | None
    latency_ms: float
    sent: float = 0.0  # time.monotonic() as the press left the client
    edge: bool = False  # answered at the edge (x-seckill-edge: 1), not by the function
    body: bytes = b""  # the answer's body, as sent: the edge's must equal the function's


def fire(
    http: urllib3.PoolManager,
    api_url: str,
    voucher_id: int,
    tokens: dict[int, str],
    presses: int,
    concurrency: int,
    progress: Progress,
    seed: int,
    on_press: Callable[[int], None] = lambda done: None,
    on_win: Callable[[Press], None] = lambda press: None,
    passes: Mapping[int, str] | None = None,
    on_lost: Callable[[Press], None] = lambda press: None,
    timed: list[tuple[float, int]] | None = None,
) -> tuple[list[Press], float]:
    """Every press of every user, in an order drawn from ``seed``; (the answers, seconds taken).
    ``on_win`` is told of every press answered 202 as soon as it is, ``on_lost`` of every press
    whose answer was lost. A user with a pass in ``passes`` (a draw sale's) sends it with each press.
    ``timed`` (epoch seconds, user), by time: the presses instead, each sent no earlier than its time."""
    if timed is None:
        users = [user for user in tokens for _ in range(presses)]
        rng(seed, "plan").shuffle(users)
        timed = [(0.0, user) for user in users]
    plan = [user for _, user in timed]
    url = f"{api_url}/voucher-order/seckill/{voucher_id}"
    task = progress.add_task("firing presses", total=len(plan))
    done = iter(range(1, len(plan) + 1))  # next() on a shared iterator is atomic under the GIL

    def attempt(user_id: int) -> Press:
        return press_once(http, url, user_id, tokens[user_id], (passes or {}).get(user_id))

    def press(index: int) -> list[Press]:
        """One press, as the app would make it: 503 TRY_AGAIN is retried after a short pause."""
        user_id = plan[index]
        time.sleep(max(0.0, timed[index][0] - time.time()))
        attempts = [attempt(user_id)]
        pauses = rng(seed, "pauses", index)
        while attempts[-1].code == "TRY_AGAIN" and len(attempts) <= TRY_AGAIN_RETRIES:
            time.sleep(pauses.uniform(0.1, 0.4))
            attempts.append(attempt(user_id))
        if attempts[-1].status == 202:
            on_win(attempts[-1])
        elif lost(attempts[-1]):
            on_lost(attempts[-1])
        progress.advance(task)
        on_press(next(done))
        return attempts

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = [a for attempts in pool.map(press, range(len(plan))) for a in attempts]
    return results, time.perf_counter() - started


def press_once(http: urllib3.PoolManager, url: str, user_id: int, token: str, pass_: str | None = None) -> Press:
    """One press of the button at ``url`` (POST /voucher-order/seckill/{voucherId}), with the
    user's pass if it has one; an answer that never came is status 0."""
    sent, started = time.monotonic(), time.perf_counter()
    try:
        headers = {"authorization": token}
        if pass_ is not None:
            headers[PASS_HEADER] = pass_
        response = http.request("POST", url, headers=headers)
        elapsed = (time.perf_counter() - started) * 1000
        payload = json.loads(response.data) if response.data else {}
        order = payload.get("data") if response.status == 202 else None
        code = payload.get("code") or payload.get("message")
        edge = response.headers.get("x-seckill-edge") == "1"
        return Press(user_id, response.status, code, order, elapsed, sent, edge, response.data)
    except Exception as exc:
        return Press(user_id, 0, type(exc).__name__, None, (time.perf_counter() - started) * 1000, sent)


def lost(press: Press) -> bool:
    """No answer, or a 5xx that is not TRY_AGAIN (which promises that no order exists): the
    press may have placed an order its client holds no id for (a function that died after
    queueing it, a timeout)."""
    return press.status == 0 or (press.status >= 500 and press.code != "TRY_AGAIN")


def promised(presses: list[Press]) -> set[tuple[int, int]]:
    """(order id, user id) of every order a client was answered 202 with (a retry
    that resumed its order is answered with the same id)."""
    return {(int(p.order_id), p.user_id) for p in presses if p.status == 202 and p.order_id}


def percentiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"p50": values[0] if values else 0.0, "p95": 0.0, "p99": 0.0, "max": max(values, default=0.0)}
    q = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": q[49], "p95": q[94], "p99": q[98], "max": max(values)}

"""What one seckill request costs in Redis, by path, measured side by side.

Whether the order id is made before the gate or only for the requests it lets
through is a design choice. This measures both on the real Redis, with the
real scripts, in interleaved rounds (the machine is shared and noisy: compare
the ratios, not the absolute figures):

- refused, id after the gate (what Seckill does): one EVALSHA;
- refused, id before the gate: INCR, then EVALSHA;
- refused from the warm function's memory (sold out seen < 1 s ago): no Redis;
- accepted: EVALSHA, INCR, attach, status hint, promise (the SQS send is not included).

    .venv/bin/python benchmarks/gate_paths.py [--requests 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import secrets
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from seckill import keys
from seckill.clients import redis_client
from seckill.config import Settings
from seckill.errors import SeckillError
from seckill.gate import Gate
from seckill.ids import next_order_id
from seckill.scripts import Scripts
from seckill.timeutil import to_ms


def setup_voucher(redis: Any, stock: int) -> int:
    voucher_id = secrets.randbelow(10**12) + 10**12
    now = datetime.now(UTC)
    redis.set(keys.stock(voucher_id), stock)
    redis.hset(
        keys.window(voucher_id),
        mapping={"begin": to_ms(now - timedelta(hours=1)), "end": to_ms(now + timedelta(hours=1))},
    )
    return voucher_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000, help="requests per path per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    redis = redis_client(Settings.from_env())
    scripts = Scripts.register(redis)
    cold = Gate(redis, scripts, refusal_cache_seconds=0)
    warm = Gate(redis, scripts, refusal_cache_seconds=3600)
    sold_out = setup_voucher(redis, 0)
    open_sale = setup_voucher(redis, 10**9)
    users = iter(range(1, 10**12))

    def refuse(gate: Gate) -> None:
        with contextlib.suppress(SeckillError):
            gate.reserve(sold_out, 1, "t")

    def id_before_gate() -> None:
        next_order_id(redis)
        refuse(cold)

    def accept() -> None:
        reservation = cold.reserve(open_sale, next(users), uuid.uuid4().hex)
        order_id = next_order_id(redis)
        cold.attach(reservation, order_id)
        redis.set(keys.order_status(order_id), "{}", ex=60)
        cold.promise(open_sale, reservation.user_id, order_id)

    paths: dict[str, Callable[[], None]] = {
        "refused, id after the gate (ours)": lambda: refuse(cold),
        "refused, id before the gate": id_before_gate,
        "refused from memory (warm)": lambda: refuse(warm),
        "accepted (no SQS)": accept,
    }
    refuse(warm)  # the warm gate has seen SOLD_OUT once
    timings: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, path in paths.items():
            started = time.perf_counter()
            for _ in range(args.requests):
                path()
            timings[name].append((time.perf_counter() - started) / args.requests * 1e6)

    base = statistics.median(timings["refused, id after the gate (ours)"])
    print(f"{'path':<36} {'µs/request':>11} {'requests/s':>11} {'vs ours':>8}")
    for name, values in timings.items():
        us = statistics.median(values)
        print(f"{name:<36} {us:>11.1f} {1e6 / us:>11,.0f} {us / base:>7.2f}x")
    print(f"(median of {args.rounds} interleaved rounds of {args.requests:,} requests each)")

    for voucher_id in (sold_out, open_sale):
        redis.delete(*keys.voucher_keys(voucher_id))


if __name__ == "__main__":
    main()

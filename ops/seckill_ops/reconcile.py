"""seckill-reconcile: one reconciliation pass (``seckill.repair.reconcile``), as
ReconcilerFunction runs on its schedule."""

from __future__ import annotations

import argparse
import json
import sys

from seckill.edge.state import StateQueue
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderQueue, queue_depth
from seckill.repair.reconcile import DEFAULT_PENDING_AGE, MIN_PENDING_AGE, operator_pending_age, reconcile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-reconcile",
        description="Resolve stale pending reservations (re-queue or release), expire holds past their "
        "deadline, give back units Redis missed, and repair Redis/MySQL drift once the order queue is "
        "drained. Safe to run at any time and repeatedly. Exit 0 when nothing is left drifting, 1 when "
        "drift remains (e.g. the queue was not drained).",
    )
    parser.add_argument(
        "--pending-age",
        type=float,
        default=DEFAULT_PENDING_AGE.total_seconds(),
        metavar="SECONDS",
        help=f"age at which a reservation is stale (default %(default).0f, at least {MIN_PENDING_AGE.seconds})",
    )
    parser.add_argument(
        "--no-repair",
        action="store_true",
        help="report drift without repairing it (nor expiring holds, nor giving units back)",
    )
    parser.add_argument("--voucher", type=int, action="append", help="only this voucher (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    args = parser.parse_args(argv)
    try:
        pending_age = operator_pending_age(args.pending_age, "--pending-age")
    except ValueError as exc:
        parser.error(str(exc))
    settings = Settings.from_env()
    if not settings.order_queue_url:
        parser.error("ORDER_QUEUE_URL must name the order queue")
    redis = redis_client(settings)
    scripts = Scripts.register(redis)
    sqs = sqs_client()
    result = reconcile(
        Database.from_settings(settings),
        redis,
        scripts,
        OrderQueue(sqs, settings.order_queue_url),
        drained=queue_depth(sqs, settings.order_queue_url) == 0,
        pending_age=pending_age,
        repair=not args.no_repair,
        voucher_ids=args.voucher,
    )
    # As ReconcilerFunction: the states this pass may have changed, to the edge (with EDGE_STATE_QUEUE_URL).
    if StateQueue(sqs, settings.edge_state_queue_url).sweep(scripts, [v.voucher_id for v in result.vouchers]):
        print("some sales' states could not be sent to the edge; the next pass sends them", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        totals = result.totals()
        print(", ".join(f"{k} {v}" for k, v in totals.items()) + f"; queue drained: {result.queue_drained}")
    for v in result.vouchers:
        if v.missing:
            print(
                f"voucher {v.voucher_id}: lost from Redis; the gate answers 503 for it until seckill-recovery "
                "(or ReconcilerFunction's next run) rebuilds it",
                file=sys.stderr,
            )
    remaining = [v for v in result.vouchers if (v.drift and v.drift.drifted and not v.repaired) or v.missing]
    return 1 if remaining else 0


if __name__ == "__main__":
    sys.exit(main())

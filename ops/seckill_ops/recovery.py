"""seckill-recovery: rebuild the gate's Redis state from MySQL after Redis lost its data
(``seckill.repair.recovery``)."""

from __future__ import annotations

import argparse
import sys

from seckill.edge.state import StateQueue
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.repair.recovery import recover_if_lost


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-recovery",
        description="Rebuild the Redis state (stock, buyers, sale window) of every voucher on sale from MySQL, "
        "after Redis lost its data. It first waits for the order queue (ORDER_QUEUE_URL) to drain and reads "
        "the dead-letter queue (ORDER_DLQ_URL) without consuming it: orders still waiting count as sold. "
        "Vouchers whose state is present are left alone unless --force. Exit 0 when rebuilt, 1 when it "
        "could not be done yet (nothing is changed), 2 on a usage or configuration error.",
    )
    parser.add_argument("--force", action="store_true", help="overwrite present state too (repairs drift)")
    parser.add_argument(
        "--wait-for-queue",
        type=float,
        default=30,
        metavar="SECONDS",
        help="wait up to this long for the order queue to drain (default 30)",
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    if not settings.order_queue_url or not settings.order_dlq_url:
        parser.error("ORDER_QUEUE_URL and ORDER_DLQ_URL must name the order queue and its dead-letter queue")
    redis = redis_client(settings)
    scripts = Scripts.register(redis)
    sqs = sqs_client()
    done = recover_if_lost(
        Database.from_settings(settings), redis, scripts, sqs, settings, wait=args.wait_for_queue, force=args.force
    )
    if done.blocked:
        print(
            f"not rebuilt: {done.blocked}. Nothing was changed; the gate answers 503 TRY_AGAIN for lost vouchers "
            "until this succeeds. Let the persister drain the queue (is MySQL up?), let any replay finish, "
            "then run this again.",
            file=sys.stderr,
        )
        return 1
    if not done.lost:
        print("nothing to rebuild: Redis holds every voucher on sale (--force rebuilds them anyway)")
        return 0
    for r in done.rebuilt:
        if r.applied:
            print(
                f"voucher {r.voucher_id}: stock {r.redis_stock} -> {r.expected_stock}, "
                f"buyers +{r.buyers_added} -{r.buyers_removed}, returned units recorded {r.returns_recorded}"
            )
    # As ReconcilerFunction after its rebuild: the edge may hold a state the rebuild changed
    # (a sold-out flag over units back on sale), with EDGE_STATE_QUEUE_URL.
    if StateQueue(sqs, settings.edge_state_queue_url).sweep(scripts, [r.voucher_id for r in done.rebuilt]):
        print(
            "some sales' states could not be sent to the edge; ReconcilerFunction's next pass sends them",
            file=sys.stderr,
        )
    rebuilt = sum(r.applied for r in done.rebuilt)
    print(f"{rebuilt} of {len(done.rebuilt)} vouchers on sale rebuilt")
    if done.dead_letters:
        print(
            f"{done.dead_letters} orders in the dead-letter queue were counted as sold; "
            "replay them (seckill-dlq-replay) once their cause is fixed"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

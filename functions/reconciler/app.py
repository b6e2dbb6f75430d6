"""ReconcilerFunction: runs reconciliation on a schedule (and on demand).

A scheduled event carries no options; an operator may invoke it with
``{"pendingAgeSeconds": 120, "repair": false}``. Its second schedule, every minute,
sends ``{"edgeOnly": true}``: only the edge's notice of each sale it looks after, which
publishes a unit given back unnoticed (a press's release before its 503) within that
minute, and costs nothing at the store when nothing changed (docs/edge.md).
"""

from __future__ import annotations

import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.draw.moves import ClockQueue, restart_stalled
from seckill.edge.state import StateQueue
from seckill.infra import tracing
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lazy import OnFirstUse
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderQueue, queue_depth
from seckill.repair.reconcile import DEFAULT_PENDING_AGE, operator_pending_age, reconcile
from seckill.repair.recovery import recover_if_lost
from seckill.repair.restore import voucher_ids_on_sale

logger = Logger()
tracer = tracing.tracer()
metrics = Metrics(namespace="Seckill")
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)

settings = Settings.from_env()
redis = redis_client(settings)
scripts = Scripts.register(redis)
# The SQS client (boto3's service model, most of an init) is made at the first run, as elsewhere.
sqs = OnFirstUse(sqs_client)
queue = OrderQueue(sqs, settings.order_queue_url)
edge = StateQueue(sqs, settings.edge_state_queue_url, metrics)
clock = ClockQueue(sqs, settings.draw_clock_queue_url)
db = Database.from_settings(settings)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if event.get("edgeOnly") is True:
        sent = edge.notice_each(scripts, voucher_ids_on_sale(db)) if settings.edge_state_queue_url else 0
        logger.info("edge noticed", extra={"edgeStatesSent": sent})
        return {"edgeStatesSent": sent}
    seconds = float(event.get("pendingAgeSeconds", DEFAULT_PENDING_AGE.total_seconds()))
    pending_age = operator_pending_age(seconds, "pendingAgeSeconds")
    result = reconcile(
        db,
        redis,
        scripts,
        queue,
        drained=queue_depth(sqs, settings.order_queue_url) == 0,
        pending_age=pending_age,
        repair=bool(event.get("repair", True)),
    )
    # If Redis lost data (all of it, or the vouchers the pass found missing), rebuild
    # once the queue has drained, so the rebuilt stock counts every accepted order; the
    # gate answers 503 for them meanwhile, and the next pass reconciles them.
    wait = max(0.0, context.get_remaining_time_in_millis() / 1000 - 20)
    recovery = recover_if_lost(db, redis, scripts, sqs, settings, wait=wait, missing=result.totals()["missing"] > 0)
    # Every sale's state claimed anew and sent to the edge in one message, after this pass's
    # releases, repairs and rebuilds; the publisher writes where the store differs: bounds
    # how long a lost update, or one Redis forgot, lasts (docs/edge.md).
    edge_not_sent = edge.sweep(scripts, [v.voucher_id for v in result.vouchers])
    # A draw clock whose next message is overdue (a send lost, a message dead-lettered) goes on.
    clocks_restarted = restart_stalled(db, clock)
    if clocks_restarted:
        metrics.add_metric(name="DrawClocksRestarted", unit=MetricUnit.Count, value=len(clocks_restarted))
        logger.warning("draw clocks restarted", extra={"voucherIds": clocks_restarted})
    totals = {**result.totals(), "rebuilt": sum(r.applied for r in recovery.rebuilt)}
    for name, value in totals.items():
        if value and name != "vouchers":  # every count of what the pass did, by name
            metrics.add_metric(name=f"Reconcile{name.title()}", unit=MetricUnit.Count, value=value)
    logger.info(
        "reconciled", extra={"totals": totals, "queueDrained": result.queue_drained, "edgeStateNotSent": edge_not_sent}
    )
    if recovery.blocked:
        logger.warning("Redis lost data and it is not rebuilt yet", extra={"why": recovery.blocked})
    return {
        **result.to_dict(),
        "totals": totals,
        "recovery": {"lost": recovery.lost, "blocked": recovery.blocked},
        "drawClocksRestarted": clocks_restarted,
    }

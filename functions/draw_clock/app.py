"""DrawClockFunction: DrawClockQueue's consumer, the draw clock (docs/draw.md).

Each record names a draw and the ``at`` of a move; ``seckill.draw.moves.tick``
decides it if it is due and the draw's next, records it in MySQL, sends the
clock's next message and publishes every recorded move to Redis, with how far the
moves are decided. Every tick but an early one then goes to the edge
(``StateQueue.notice``), so the edge tells "no move" from "not heard yet", and a
stale message republishes moves whose publish failed. A malformed record or a failed
tick is a batch item failure: it comes back within seconds (``ClockQueue.retry_soon``),
and after maxReceiveCount SQS moves it to DrawClockDeadLetterQueue (the reconciler
restarts a clock whose message is overdue).
"""

from __future__ import annotations

import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.draw.moves import CLOSE_BOUND_MS, ClockMessage, ClockQueue, Tick, tick
from seckill.edge.state import StateQueue
from seckill.infra import tracing, warmup
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lazy import OnFirstUse
from seckill.infra.lua_scripts import Scripts

logger = Logger()
tracer = tracing.tracer(patch_modules=["pymysql", "botocore"])
metrics = Metrics(namespace="Seckill")
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

settings = Settings.from_env()
redis = redis_client(settings)
scripts = Scripts.register(redis)
db = Database.from_settings(settings)
sqs = OnFirstUse(sqs_client)
clock = ClockQueue(sqs, settings.draw_clock_queue_url)
edge = StateQueue(sqs, settings.edge_state_queue_url, metrics)
warmup.prepare(warmup.Connections(redis, db, [sqs]))

# Moves made, and waves whose message came too late to be decided before they took effect.
COUNTED = {Tick.MOVED: "DrawMoves", Tick.MISSED: "DrawWavesMissed"}


@tracer.capture_method
def handle(record: SQSRecord) -> None:
    """One clock message; raises to make the record a batch item failure, which comes
    back within seconds, not after the queue's visibility timeout."""
    try:
        decide(ClockMessage.from_json(record.body))
    except Exception:
        try:
            clock.retry_soon(record.receipt_handle, int(record.attributes.approximate_receive_count))
        except Exception:
            logger.warning("a failed clock message waits out its visibility timeout", exc_info=True)
        raise


def decide(message: ClockMessage) -> None:
    decided = tick(db, redis, clock, message)
    if decided.tick is not Tick.EARLY:
        # A stale message republishes the moves (say, after a failed publish): the edge
        # hears of them too; a notice of an unchanged state sends nothing.
        edge.notice(scripts, message.voucher_id)
    if decided.tick in COUNTED:
        metrics.add_metric(name=COUNTED[decided.tick], unit=MetricUnit.Count, value=1)
    if decided.close_lag_ms is not None:
        metrics.add_metric(name="DrawCloseMoveLagMs", unit=MetricUnit.Milliseconds, value=decided.close_lag_ms)
        if decided.close_lag_ms > CLOSE_BOUND_MS:
            # The alarm DrawCloseMoveLateAlarm: admission waited on it.
            logger.error("draw %s: the close's move recorded late", message.voucher_id)
            metrics.add_metric(name="DrawCloseMoveLate", unit=MetricUnit.Count, value=1)
    logger.info(
        "draw clock",
        extra={
            "voucherId": message.voucher_id,
            "at": message.at_ms,
            "tick": decided.tick.value,
            "admitted": decided.admitted,
            "cursor": decided.cursor,
            "closeLagMs": decided.close_lag_ms,
        },
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=handle, processor=processor)

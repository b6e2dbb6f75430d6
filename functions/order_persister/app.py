"""OrderPersisterFunction: OrderQueue's consumer (docs/contract.md).

The batch's orders are decided together, in one transaction (seckill.persist.persistence);
Powertools' batch processing then reports each record's own outcome, its failures
as ``batchItemFailures``, so SQS retries only those, and after maxReceiveCount
moves them to the dead-letter queue. A record that can never be stored goes to
the poison queue instead when ``ORDER_POISON_QUEUE_URL`` is set (seckill.persist.poison).
Once the batch has committed, each order it holds unpaid gets its expiry message on
OrderExpiryQueue (seckill.persist.expiries); a record whose expiry was not sent fails.
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.draw.admission import NOT_ADMITTED
from seckill.edge.state import StateQueue
from seckill.expiry import ExpiryQueue
from seckill.infra import tracing, warmup
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lazy import OnFirstUse
from seckill.infra.lua_scripts import Scripts
from seckill.persist.expiries import send_expiries
from seckill.persist.poison import Decided, Failed, Poisoned, PoisonQueue, Taken, take_batch

logger = Logger()
# The SQL statements and the poison queue's sends show as subsegments.
tracer = tracing.tracer(patch_modules=["pymysql", "botocore"])
metrics = Metrics(namespace="Seckill")
# Routes that count nothing (reads, refusals cached locally) are normal, not a warning.
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
# A batch whose every record failed is still answered with batchItemFailures, not an exception.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

settings = Settings.from_env()
redis = redis_client(settings)
scripts = Scripts.register(redis)
db = Database.from_settings(settings)
sqs = OnFirstUse(sqs_client)
poison = PoisonQueue(sqs, settings.order_poison_queue_url) if settings.order_poison_queue_url else None
expiries = ExpiryQueue(sqs, settings.order_expiry_queue_url)
edge = StateQueue(sqs, settings.edge_state_queue_url, metrics)
warmup.prepare(warmup.Connections(redis, db, [sqs]))


@tracer.capture_method
def take(records: list[dict[str, Any]]) -> dict[str, Taken]:
    """Every record's outcome, by message id; counted once for the whole batch."""
    decided = take_batch(db, redis, scripts, poison, [(r["body"], r.get("messageAttributes")) for r in records])
    # Counted as decided: a record failed for its expiry alone is stored all the same.
    counts = Counter(kind(outcome) for outcome in decided)
    # The gate let through a press its user's stored ticket did not admit: a pass signed
    # with a leaked key, most likely (docs/draw.md, "Admission re-checked").
    counts["OrdersNotAdmitted"] = sum(
        isinstance(o, Decided) and o.decision.changed and o.decision.reason == NOT_ADMITTED for o in decided
    )
    if counts["OrdersNotAdmitted"]:
        logger.warning("draw orders failed NOT_ADMITTED", extra={"orders": counts["OrdersNotAdmitted"]})
    outcomes = send_expiries(expiries, decided)
    counts["ExpiriesNotSent"] = sum(after is not before for before, after in zip(decided, outcomes, strict=True))
    for name in ("OrdersConfirmed", "OrdersFailed", "OrdersNotAdmitted", "OrdersPoisoned", "ExpiriesNotSent"):
        if counts[name]:
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=counts[name])
    logger.info("batch decided", extra={"records": len(outcomes), **counts})
    # The gate sold these units already; once their orders are stored is when the edge
    # learns of a sale that sold out (one claim per voucher, usually answered "unchanged").
    edge.notice_each(scripts, (o.order.voucher_id for o in decided if isinstance(o, Decided)))
    return {r["messageId"]: outcome for r, outcome in zip(records, outcomes, strict=True)}


def kind(outcome: Taken) -> str:
    if isinstance(outcome, Decided):
        return f"Orders{outcome.decision.status.title()}" if outcome.decision.changed else "OrdersUnchanged"
    return "OrdersPoisoned" if isinstance(outcome, Poisoned) else "RecordsFailed"


def report(outcomes: dict[str, Taken], record: SQSRecord) -> None:
    """The record handler: the record's outcome, raised if it failed (a batch item failure)."""
    outcome = outcomes[record.message_id]
    if isinstance(outcome, Failed):
        raise outcome.error
    if isinstance(outcome, Poisoned):
        logger.warning(
            "record moved to the poison queue",
            extra={"messageId": record.message_id, "poisonMessageId": outcome.message_id, "reason": outcome.reason},
        )
        return
    decision = outcome.decision
    logger.debug(
        "order decided",
        extra={
            "orderId": str(outcome.order.order_id),
            "status": decision.status,
            "reason": decision.reason,
            "changed": decision.changed,
        },
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    outcomes = take(event["Records"])
    # No context passed on: the record handler does not take it, and Powertools would
    # inspect the partial's signature at every invocation to find out.
    return process_partial_response(
        event=event, record_handler=functools.partial(report, outcomes), processor=processor
    )

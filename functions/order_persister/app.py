"""OrderPersisterFunction: OrderQueue's consumer (docs/contract.md).

Each record is decided on its own; failures are reported per record
(``batchItemFailures``) so SQS retries only those, and after maxReceiveCount
moves them to the dead-letter queue. A record that can never be stored goes to
the poison queue instead when ``ORDER_POISON_QUEUE_URL`` is set (seckill.poison).
"""

from __future__ import annotations

import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill import warmup
from seckill.clients import OnFirstUse, redis_client, sqs_client
from seckill.config import Settings
from seckill.db import Database
from seckill.gate import Gate
from seckill.poison import Poisoned, PoisonQueue, take_record
from seckill.scripts import Scripts

logger = Logger()
# The SQL statements and the poison queue's sends show as subsegments.
tracer = Tracer(patch_modules=["pymysql", "botocore"])
metrics = Metrics(namespace="Seckill")
# Routes that count nothing (reads, refusals cached locally) are normal, not a warning.
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
# A batch whose every record failed is still answered with batchItemFailures, not an exception.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

settings = Settings.from_env()
redis = redis_client(settings)
gate = Gate(redis, Scripts.register(redis))
db = Database.from_settings(settings)
# boto3 is imported and the client made only when a record is first moved there.
sqs = OnFirstUse(sqs_client)
poison = PoisonQueue(sqs, settings.order_poison_queue_url) if settings.order_poison_queue_url else None
warmup.prepare(warmup.Connections(redis, db, [sqs] if poison else []))


@tracer.capture_method
def record_handler(record: SQSRecord) -> None:
    outcome = take_record(db, redis, gate, poison, record.body, record.raw_event.get("messageAttributes"))
    if isinstance(outcome, Poisoned):
        logger.warning(
            "record moved to the poison queue",
            extra={"messageId": record.message_id, "poisonMessageId": outcome.message_id, "reason": outcome.reason},
        )
        metrics.add_metric(name="OrdersPoisoned", unit=MetricUnit.Count, value=1)
        return
    decision = outcome.decision
    logger.info(
        "order decided",
        extra={
            "orderId": str(outcome.order.order_id),
            "status": decision.status,
            "reason": decision.reason,
            "changed": decision.changed,
        },
    )
    if decision.changed:
        metrics.add_metric(name=f"Orders{decision.status.title()}", unit=MetricUnit.Count, value=1)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)

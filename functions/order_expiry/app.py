"""OrderExpiryFunction: OrderExpiryQueue's consumer (docs/holds.md).

Each record is one order's expiry, decided on its own by ``seckill.holds.expire``:
an unpaid order past its deadline expires and its unit goes back on sale. A
message that came early (SQS delays one at most 15 minutes) is sent again with
the time left, then acknowledged. A malformed record, a failed re-send or a unit
not yet given back to Redis is a batch item failure: SQS retries it, and after
maxReceiveCount moves it to OrderExpiryDeadLetterQueue.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import replace
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.edge.state import StateQueue
from seckill.expiry import ExpiryMessage, ExpiryNotSent, ExpiryQueue
from seckill.holds import Expiry, expire
from seckill.infra import tracing, warmup
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.lazy import OnFirstUse
from seckill.infra.lua_scripts import Scripts
from seckill.messages import Sent

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
queue = ExpiryQueue(sqs, settings.order_expiry_queue_url)
edge = StateQueue(sqs, settings.edge_state_queue_url, metrics)
warmup.prepare(warmup.Connections(redis, db, [sqs]))

# Orders expired now, and messages that came before their deadline.
COUNTED = {Expiry.EXPIRED: "OrdersExpired", Expiry.NOT_YET: "ExpiriesEarly"}


@tracer.capture_method
def handle(record: SQSRecord) -> None:
    """One expiry; raises to make the record a batch item failure."""
    message = ExpiryMessage.from_json(record.body)
    expired = expire(db, redis, scripts, message.order_id, edge=edge)
    if expired.outcome is Expiry.NOT_YET:
        assert expired.order is not None  # NOT_YET names the order it found
        # The database's clock says how long is left: never sooner than that, whatever this clock says.
        left = max(1, math.ceil(expired.order.seconds_left))
        (sent,) = queue.send([replace(message, pay_by=expired.order.pay_by)], at_least=left)
        if sent is not Sent.SENT:
            raise ExpiryNotSent(f"order {message.order_id} came early and could not be sent again ({sent.value})")
    if expired.outcome in COUNTED:
        metrics.add_metric(name=COUNTED[expired.outcome], unit=MetricUnit.Count, value=1)
    logger.debug(
        "expiry decided",
        extra={"orderId": str(message.order_id), "outcome": expired.outcome.value, "givenBack": expired.given_back},
    )


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=handle, processor=processor)

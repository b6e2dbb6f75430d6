"""EdgePublisherFunction: EdgeStateQueue's consumer, outside the VPC (docs/edge.md).

Each record is one sale's state, written to the KeyValueStore unless the store holds
that version or a newer one (seckill.edge.publisher). A malformed record, and one
whose write failed, is a batch item failure: SQS retries it, and after maxReceiveCount
moves it to EdgeStateDeadLetterQueue; the reconciler's sweep sends the state again.
Each invocation (a batch, or the PassKeys schedule's, every minute) first copies the
draw's pass keys to the store's `pass-keys` when they changed (seckill.edge.passkeys).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.edge import passkeys
from seckill.edge.publisher import Published, Publisher, kvs_client
from seckill.edge.state import EdgeState
from seckill.infra.config import Settings

logger = Logger()
metrics = Metrics(namespace="Seckill")
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

settings = Settings.from_env()
publisher = Publisher(kvs_client(), settings.edge_kvs_arn)

COUNTED = {Published.WRITTEN: "EdgeStatesWritten", Published.STALE: "EdgeStatesStale"}
ring = passkeys.ring_source(os.environ)
# The `pass-keys` value this container last found or wrote in the store: a batch skips
# the store's calls while the ring has not changed; the schedule's run always asks it.
confirmed: dict[str, str] = {}


def publish_pass_keys(*, ask_store: bool) -> None:
    """The ring's keys to the store if they changed; never fails the batch (logged and
    counted: the next invocation tries again)."""
    if ring is None:
        return
    try:
        text = passkeys.value(ring())
        if not ask_store and confirmed.get(passkeys.KEY) == text:
            return
        published = passkeys.publish(publisher, text)
        confirmed[passkeys.KEY] = text
        if published is Published.WRITTEN:
            logger.info("pass keys published", extra={"bytes": len(text)})
    except Exception:
        logger.exception("the pass keys could not be published")
        metrics.add_metric(name="PassKeysNotPublished", unit=MetricUnit.Count, value=1)


def handle(record: SQSRecord) -> None:
    """One state; raises to make the record a batch item failure."""
    state = EdgeState.from_message(record.body)
    published = publisher.publish(state)
    metrics.add_metric(name=COUNTED[published], unit=MetricUnit.Count, value=1)
    logger.info("edge state", extra={"voucherId": state.voucher_id, "v": state.v, "published": published.value})


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    records = "Records" in event
    publish_pass_keys(ask_store=not records)
    if not records:
        return {"batchItemFailures": []}
    return process_partial_response(event=event, record_handler=handle, processor=processor)

"""EdgePublisherFunction: EdgeStateQueue's consumer, outside the VPC (docs/edge.md).

Each record is one sale's state, written to the KeyValueStore unless the store holds
that version or a newer one (seckill.edge.publisher). A malformed record, and one
whose write failed, is a batch item failure: SQS retries it, and after maxReceiveCount
moves it to EdgeStateDeadLetterQueue; the reconciler's sweep sends the state again.
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

from seckill.edge.publisher import Published, Publisher, kvs_client
from seckill.edge.state import EdgeState
from seckill.infra import warmup
from seckill.infra.config import Settings
from seckill.infra.lazy import OnFirstUse

logger = Logger()
metrics = Metrics(namespace="Seckill")
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)

settings = Settings.from_env()
# Made at the first record, not at import: a boto3 session and this client (the service's
# model, its endpoint rules, the SigV4A signer) were a quarter of the cold import
# (benchmarks/README.md); provisioned and SnapStart containers make it at init.
kvs = OnFirstUse(kvs_client)
publisher = Publisher(kvs, settings.edge_kvs_arn)
warmup.prepare(warmup.Connections(clients=[kvs]))

COUNTED = {Published.WRITTEN: "EdgeStatesWritten", Published.STALE: "EdgeStatesStale"}


def handle(record: SQSRecord) -> None:
    """One state; raises to make the record a batch item failure."""
    state = EdgeState.from_message(record.body)
    published = publisher.publish(state)
    metrics.add_metric(name=COUNTED[published], unit=MetricUnit.Count, value=1)
    logger.info("edge state", extra={"voucherId": state.voucher_id, "v": state.v, "published": published.value})


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=handle, processor=processor)

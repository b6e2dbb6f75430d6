"""EdgePublisherFunction: EdgeStateQueue's consumer, outside the VPC (docs/edge.md).

Each record is one sale's state, or the reconciler's sweep of every sale's state. The
batch is written in one go (seckill.edge.publisher): one read of the store, one write
of what it lacks. A malformed record is a batch item failure, and so is every record
of a batch whose write failed: SQS retries them, and after maxReceiveCount moves them
to EdgeStateDeadLetterQueue; the reconciler's next sweep sends every state again.
Each invocation (a batch, or the PassKeys schedule's) first copies the draw's pass keys
to the store's `pass-keys` when they changed, and confirms what the store holds in
PASS_KEYS_HELD_SECRET_ARN, for the functions to sign only with a key the edge holds
(seckill.edge.passkeys).
"""

from __future__ import annotations

import os
import time
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill.edge import passkeys
from seckill.edge.publisher import Publisher, kvs_client
from seckill.edge.state import EdgeState, MalformedState, Sweep, parse_message
from seckill.infra import warmup
from seckill.infra.config import Settings
from seckill.infra.lazy import OnFirstUse
from seckill.infra.secrets import secretsmanager_client

logger = Logger()
metrics = Metrics(namespace="Seckill")
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)

settings = Settings.from_env()
# Made at the first record, not at import: a boto3 session and this client (the service's
# model, its endpoint rules, the SigV4A signer) were a quarter of the cold import
# (benchmarks/README.md); provisioned and SnapStart containers make it at init.
kvs = OnFirstUse(kvs_client)
publisher = Publisher(kvs, settings.edge_kvs_arn)
# The pass key ring read afresh with its version, and what the edge holds written back.
secretsmanager = OnFirstUse(secretsmanager_client)
warmup.prepare(warmup.Connections(clients=[kvs]))

# The `pass-keys` value this container last wrote or found in the store and confirmed: a
# batch skips the store's calls while the ring has not changed; the schedule's run always asks it.
confirmed: dict[str, str] = {}


def publish_pass_keys(*, ask_store: bool) -> None:
    """The ring's keys to the store if they changed, then what the store holds confirmed;
    never fails the batch (logged and counted: the next invocation tries again)."""
    try:
        current = passkeys.current_ring(secretsmanager)
        if current is None:
            return
        text = passkeys.value(*current)
        if not ask_store and confirmed.get(passkeys.KEY) == text:
            return
        written, stored = passkeys.publish(publisher, text)
        if written:
            logger.info("pass keys published", extra={"bytes": len(text)})
        held_arn = os.environ.get("PASS_KEYS_HELD_SECRET_ARN", "")
        held = passkeys.confirm(secretsmanager, held_arn, stored, time.time()) if held_arn else None
        if held is not None:
            logger.info("pass keys held by the edge", extra={"held": held.keys})
        confirmed[passkeys.KEY] = text
    except Exception:
        logger.exception("the pass keys could not be published")
        metrics.add_metric(name="PassKeysNotPublished", unit=MetricUnit.Count, value=1)


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    records = "Records" in event
    publish_pass_keys(ask_store=not records)
    failed: list[str] = []
    messages: list[EdgeState | Sweep] = []
    ids: list[str] = []
    for record in event.get("Records", []):
        try:
            messages.append(parse_message(record["body"]))
            ids.append(record["messageId"])
        except MalformedState:
            logger.exception("not an edge state", extra={"messageId": record["messageId"]})
            failed.append(record["messageId"])
    try:
        published = publisher.publish(messages)
    except Exception:
        logger.exception("the store was not written", extra={"records": len(ids)})
        failed.extend(ids)
    else:
        if records:
            metrics.add_metric(name="EdgeStatesWritten", unit=MetricUnit.Count, value=len(published.written))
            metrics.add_metric(name="EdgeStatesStale", unit=MetricUnit.Count, value=published.stale)
            logger.info("edge states", extra={"written": published.written, "stale": published.stale})
    return {"batchItemFailures": [{"itemIdentifier": i} for i in failed]}

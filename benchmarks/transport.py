"""(2) The queue transport, measured honestly: what one SendMessage costs on each
SQS stand-in, by queue depth, with the client Seckill's handler uses
(``seckill.infra.clients.sqs_client``: its timeouts and retries), and whether each
stand-in keeps the SQS behaviours Seckill relies on (``conformance``).

The stand-ins are moto behind three HTTP servers and fauxqs (``benchmarks.servers``).
The share of an accepted press spent in SQS is measured where presses are made
(the experiment and the request path, by botocore's events), and every figure
that excludes it says so.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from benchmarks.servers import SERVERS, SqsServer, unavailable
from benchmarks.stats import latency_ms
from seckill.messages import OrderMessage, queue_depth
from seckill_local.ports import free_port
from seckill_local.sqs import LOCAL_AWS, ensure_queues
from seckill_local.template import Template

BODY = OrderMessage(1234567890123456789, 1000001, 1000000001, datetime(2026, 11, 30, 12, tzinfo=UTC)).to_json()

# Checked, and why they are not among the contenders (the registries this machine reaches).
NOT_USABLE = {
    "sqslite (npm)": "speaks only SQS's query protocol: boto3 sends the JSON protocol and gets 415",
    "local-aws-sqs (npm)": "decodes only the query protocol (aws-query-decoder), like sqslite; not tried",
    "LocalStack (localstack-core, PyPI)": "its runtime would not start outside its Docker image (no components found)",
    "ElasticMQ": "ships as a JAR or a Docker image, neither in the registries reached here",
}


def conformance(sqs: Any, template: Template) -> dict[str, bool]:
    """The SQS behaviours Seckill's queue relies on, on the template's own queues: a
    received message hides for the visibility timeout and counts its receives; after
    maxReceiveCount receives it moves to the dead-letter queue, unchanged; batches
    send and delete; the approximate counts the reconciler's drained check reads."""
    queues = ensure_queues(sqs, template, prefix=f"conf{uuid.uuid4().hex[:8]}-", visibility_timeout=30)
    url, dlq = queues["OrderQueue"], queues["OrderDeadLetterQueue"]
    max_receives = int(template.resource("OrderQueue")["Properties"]["RedrivePolicy"]["maxReceiveCount"])
    attribute = {"reason": {"DataType": "String", "StringValue": "conformance"}}
    sent = sqs.send_message(QueueUrl=url, MessageBody=BODY, MessageAttributes=attribute)["MessageId"]

    def receive(queue: str, **extra: Any) -> list[dict[str, Any]]:
        return sqs.receive_message(
            QueueUrl=queue, AttributeNames=["All"], MessageAttributeNames=["All"], WaitTimeSeconds=0, **extra
        ).get("Messages", [])

    first = receive(url)
    checks = {
        "receive returns the message with its attributes": bool(first)
        and first[0]["Body"] == BODY
        and first[0].get("MessageAttributes", {}).get("reason", {}).get("StringValue") == "conformance",
        "a received message is invisible until its timeout": not receive(url),
        "the approximate counts include it while it is in flight": queue_depth(sqs, url) == 1,
    }
    if first:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"], VisibilityTimeout=0)
    counts = [int(first[0]["Attributes"]["ApproximateReceiveCount"])] if first else []
    for _ in range(max_receives - 1):
        again = receive(url, VisibilityTimeout=0)
        counts += [int(m["Attributes"]["ApproximateReceiveCount"]) for m in again]
    checks["ApproximateReceiveCount counts every receive"] = counts == list(range(1, max_receives + 1))
    beyond = receive(url, VisibilityTimeout=0)
    dead = receive(dlq)
    checks["after maxReceiveCount receives it is on the dead-letter queue, unchanged"] = (
        not beyond and len(dead) == 1 and dead[0]["MessageId"] == sent and dead[0]["Body"] == BODY
    )
    sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": BODY} for i in range(10)])
    batch = receive(url, MaxNumberOfMessages=10)
    deleted = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
    )
    checks["batches of 10 send, receive and delete"] = len(batch) == 10 and len(deleted.get("Successful", [])) == 10
    checks["the queue reads as drained after the deletes"] = queue_depth(sqs, url) == 0
    for queue in queues.values():
        sqs.delete_queue(QueueUrl=queue)
    return checks


def measure_server(server: str, depths: list[int], sends: int) -> dict[str, Any]:
    sqs_server = SqsServer(server, free_port())
    try:
        os.environ.update({**LOCAL_AWS, "AWS_ENDPOINT_URL_SQS": sqs_server.endpoint})
        from seckill.infra.clients import sqs_client

        sqs = sqs_client()
        checks = conformance(sqs, Template.load())
        url = sqs.create_queue(QueueName=f"bench-transport-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        queued, points = 0, []
        for depth in depths:
            while queued < depth:
                batch = min(10, depth - queued)
                sqs.send_message_batch(
                    QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": BODY} for i in range(batch)]
                )
                queued += batch
            latencies = []
            for _ in range(sends):
                started = time.perf_counter()
                sqs.send_message(QueueUrl=url, MessageBody=BODY)
                latencies.append(time.perf_counter() - started)
            queued += sends
            points.append({"depth": depth, **latency_ms(latencies)})
        return {"server": server, "points": points, "conformance": checks}
    finally:
        sqs_server.stop()


def run(depths: list[int], sends: int, progress: Callable[[str], None]) -> dict[str, Any]:
    results, not_usable = [], dict(NOT_USABLE)
    for server in SERVERS:
        problem = unavailable(server)
        if problem:
            not_usable[server] = problem
            continue
        progress(f"transport: SQS behaviours and SendMessage on {server}, depths {depths}")
        results.append(measure_server(server, depths, sends))
    return {"depths": depths, "sends_per_point": sends, "results": results, "not_usable": not_usable}

"""(2) The queue transport, measured honestly: what one SendMessage costs on each
SQS stand-in, by queue depth, with the client Seckill's handler uses
(``seckill.clients.sqs_client``: its timeouts and retries).

Every stand-in is moto behind a different HTTP server (``benchmarks.servers``).
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

from benchmarks.servers import SERVERS, SqsServer
from benchmarks.stats import latency_ms
from seckill.messages import OrderMessage
from seckill_demo.stack import free_port
from seckill_local.sqs import LOCAL_AWS

BODY = OrderMessage(1234567890123456789, 1000001, 1000000001, datetime(2026, 11, 30, 12, tzinfo=UTC)).to_json()

# Checked, and why they are not among the contenders (the registries this machine reaches).
NOT_USABLE = {
    "fauxqs (npm)": "needs Node 22's built-in node:sqlite; Debian's Node is 20, so it does not start",
    "sqslite (npm)": "speaks only SQS's query protocol: boto3 sends the JSON protocol and gets 415",
    "local-aws-sqs (npm)": "decodes only the query protocol (aws-query-decoder), like sqslite; not tried",
    "LocalStack (localstack-core, PyPI)": "its runtime would not start outside its Docker image (no components found)",
    "ElasticMQ": "ships as a JAR or a Docker image, neither in the registries reached here",
}


def measure_server(server: str, depths: list[int], sends: int) -> dict[str, Any]:
    sqs_server = SqsServer(server, free_port())
    try:
        os.environ.update({**LOCAL_AWS, "AWS_ENDPOINT_URL_SQS": sqs_server.endpoint})
        from seckill.clients import sqs_client

        sqs = sqs_client()
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
        return {"server": server, "points": points}
    finally:
        sqs_server.stop()


def run(depths: list[int], sends: int, progress: Callable[[str], None]) -> dict[str, Any]:
    results = []
    for server in SERVERS:
        progress(f"transport: SendMessage on moto behind {server}, depths {depths}")
        results.append(measure_server(server, depths, sends))
    return {"depths": depths, "sends_per_point": sends, "results": results, "not_usable": NOT_USABLE}

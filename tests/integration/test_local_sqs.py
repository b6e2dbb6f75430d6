"""``seckill-local start-sqs``: moto's SQS as seckill_local.moto_sqs patches it, in a
server process of its own (the patch applies to that process only, not to the suite's
moto server): the approximate counts and the long poll as SQS gives them, with the
visibility and delay read by the patch."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from seckill_local.checkout import ROOT
from seckill_local.ports import free_port
from seckill_local.processes import stop_group
from seckill_local.sqs import LOCAL_AWS
from tests.helpers import wait_for


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("start-sqs") / "sqs.log"
    command = [sys.executable, "-m", "seckill_local.runner", "start-sqs", "--port", str(port)]
    # Our own runner; the template's queues are made under a prefix nobody else uses.
    process = subprocess.Popen(  # noqa: S603
        [*command, "--queue-prefix", f"q{uuid.uuid4().hex[:8]}-"],
        cwd=ROOT,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: "moto SQS listening" in log.read_text(errors="replace"), "start-sqs", timeout=60)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_group(process)
    assert "Traceback" not in log.read_text(errors="replace")


@pytest.fixture
def sqs(endpoint: str) -> Any:
    """A client that tries once: a request the server fails shows, not retried away."""
    config = Config(retries={"max_attempts": 1, "mode": "standard"})
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name=LOCAL_AWS["AWS_DEFAULT_REGION"],
        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"],
        config=config,
    )


def new_queue(sqs: Any, **attributes: str) -> str:
    url: str = sqs.create_queue(QueueName=f"t{uuid.uuid4().hex[:12]}", Attributes=attributes)["QueueUrl"]
    return url


def send(sqs: Any, url: str, count: int) -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 10):
        entries = [{"Id": str(i), "MessageBody": f"m{start + i}"} for i in range(min(10, count - start))]
        ids += [s["MessageId"] for s in sqs.send_message_batch(QueueUrl=url, Entries=entries)["Successful"]]
    return ids


def test_the_approximate_counts_are_sqss(sqs: Any) -> None:
    url = new_queue(sqs)
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": "later", "DelaySeconds": 600} for i in range(2)]
    )
    send(sqs, url, 3)
    assert len(sqs.receive_message(QueueUrl=url, VisibilityTimeout=600)["Messages"]) == 1
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    assert [counts[n] for n in names] == ["2", "1", "2"]


def test_a_long_poll_gets_a_message_whose_delay_ends_within_it(sqs: Any) -> None:
    url = new_queue(sqs)
    sent = sqs.send_message(QueueUrl=url, MessageBody="soon", DelaySeconds=1)["MessageId"]
    messages = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10).get("Messages", [])
    assert [m["MessageId"] for m in messages] == [sent]

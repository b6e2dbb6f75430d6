"""SQS for local runs: a moto server, and the template's queues created on it."""

from __future__ import annotations

import json
import os
from typing import Any

import boto3

from seckill_local.template import Template

DEFAULT_ENDPOINT = "http://127.0.0.1:4566"
LOCAL_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def local_region() -> str:
    """The region every local endpoint stands in for: the environment's AWS_DEFAULT_REGION
    (what boto3 signs for), else LOCAL_AWS's."""
    return os.environ.get("AWS_DEFAULT_REGION") or LOCAL_AWS["AWS_DEFAULT_REGION"]


def sqs_client(endpoint: str) -> Any:
    for name, value in LOCAL_AWS.items():
        os.environ.setdefault(name, value)
    return boto3.client("sqs", endpoint_url=endpoint, region_name=os.environ["AWS_DEFAULT_REGION"])


def ensure_queues(
    sqs: Any, template: Template, *, prefix: str = "", visibility_timeout: int | None = None
) -> dict[str, str]:
    """Create (or find, leaving it as it is) every AWS::SQS::Queue of the template, named ``<prefix><LogicalId>``,
    with its visibility timeout, retention and redrive policy. Returns logical id -> URL.

    The redrive itself is the queue's own (moto moves a message to the DLQ after
    maxReceiveCount receives), not ours.
    """
    urls: dict[str, str] = {}
    arns: dict[str, str] = {}
    pending = template.queues()
    # Dead-letter queues first: the queues that redrive to them need their ARNs.
    pending.sort(key=lambda q: "RedrivePolicy" in template.resource(q).get("Properties", {}))
    for logical_id in pending:
        props = template.resource(logical_id).get("Properties", {})
        attributes: dict[str, str] = {}
        timeout = props.get("VisibilityTimeout")
        if visibility_timeout is not None:
            timeout = visibility_timeout
        if timeout is not None:
            attributes["VisibilityTimeout"] = str(timeout)
        if "MessageRetentionPeriod" in props:
            attributes["MessageRetentionPeriod"] = str(props["MessageRetentionPeriod"])
        redrive = props.get("RedrivePolicy")
        if redrive:
            target = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": arns[target], "maxReceiveCount": int(redrive["maxReceiveCount"])}
            )
        name = f"{prefix}{logical_id}"
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            # Found: it is whoever created it's queue; only an explicit override changes it.
            if visibility_timeout is not None:
                sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": str(visibility_timeout)})
        except sqs.exceptions.QueueDoesNotExist:
            url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        urls[logical_id] = url
        arns[logical_id] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return urls

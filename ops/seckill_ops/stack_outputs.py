"""The outputs of a deployed stack that the tools read, named once (template.yaml's Outputs)."""

from __future__ import annotations

from typing import Any

ORDER_QUEUE_URL = "OrderQueueUrl"
DLQ_URL = "OrderDeadLetterQueueUrl"
POISON_QUEUE_URL = "OrderPoisonQueueUrl"
EXPIRY_QUEUE_URL = "OrderExpiryQueueUrl"
EXPIRY_DLQ_URL = "OrderExpiryDeadLetterQueueUrl"
MINTER_FUNCTION_NAME = "TokenMinterFunctionName"  # present only with EnableTestTokens=true

# A queue's logical id in the template -> the output holding its URL.
QUEUE_URLS = {
    "OrderQueue": ORDER_QUEUE_URL,
    "OrderDeadLetterQueue": DLQ_URL,
    "OrderPoisonQueue": POISON_QUEUE_URL,
    "OrderExpiryQueue": EXPIRY_QUEUE_URL,
    "OrderExpiryDeadLetterQueue": EXPIRY_DLQ_URL,
}

# seckill-dlq-replay --queues: the outputs naming (the queue, its dead-letter queue).
REPLAYABLE = {
    "orders": (ORDER_QUEUE_URL, DLQ_URL),
    "expiries": (EXPIRY_QUEUE_URL, EXPIRY_DLQ_URL),
}


def read(cfn: Any, stack_name: str) -> dict[str, str]:
    """A deployed stack's outputs by key (CloudFormation's DescribeStacks); botocore's
    errors are left to the caller to word."""
    stacks = cfn.describe_stacks(StackName=stack_name)["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}

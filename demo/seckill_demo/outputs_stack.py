"""A CloudFormation stack for moto that stands in for a deployed one: it holds
nothing but the outputs ``seckill-flash-sale --stack-name`` reads (the real
template cannot be deployed into moto), naming local queues and functions."""

from __future__ import annotations

import json

from seckill_ops.stack_outputs import MINTER_FUNCTION_NAME, QUEUE_URLS

MINTER = "TokenMinterFunction"


def outputs_template(queues: dict[str, str], minter: bool = True) -> str:
    """The stack's template: the queues' URLs (by logical id) and, with ``minter``,
    TokenMinterFunction's name as a local Invoke API knows it."""
    outputs = {output: queues[queue] for queue, output in QUEUE_URLS.items()}
    if minter:
        outputs[MINTER_FUNCTION_NAME] = MINTER
    return json.dumps(
        {
            "Resources": {"Alarms": {"Type": "AWS::SNS::Topic"}},
            "Outputs": {key: {"Value": value} for key, value in outputs.items()},
        }
    )

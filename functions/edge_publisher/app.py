"""EdgePublisherFunction: EdgeStateQueue's consumer.

Placeholder for the template's wiring (sam build needs the code directory): it
acknowledges nothing, so every state stays on the queue (and after maxReceiveCount
reaches EdgeStateDeadLetterQueue) until the publisher itself replaces this file.
"""

from __future__ import annotations

from typing import Any


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
    return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event.get("Records", [])]}

"""OrderQueue's records that can never be stored, and the poison queue that keeps them apart.

A malformed message never succeeds, and neither does an order whose id already
belongs to another order. Neither is ever silently dropped: without a poison
queue (``ORDER_POISON_QUEUE_URL`` unset) the record fails, SQS retries it and
then dead-letters it. With one, the record is sent there unchanged (same body,
same message attributes, plus ``reason``) and acknowledged; if that send fails,
the record fails as before. So the dead-letter queue holds only orders a replay
can store, and SQS's own redrive can move all of it back.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from seckill.infra.clients import RedisClient
from seckill.infra.db import Database
from seckill.infra.lua_scripts import Scripts
from seckill.messages import MalformedMessage, OrderMessage
from seckill.persist.persistence import Decision, OrderIdConflict, persist_orders

REASON_ATTRIBUTE = "reason"
MAX_REASON = 1024  # characters of the reason kept in the attribute
MAX_ATTRIBUTES = 10  # SQS's limit of message attributes per message


class PoisonMoveFailed(Exception):
    """The record could not be sent to the poison queue: it fails, and SQS retries it."""


@dataclass(frozen=True)
class Decided:
    """An order the database decided (or had decided at an earlier delivery)."""

    order: OrderMessage
    decision: Decision


@dataclass(frozen=True)
class Failed:
    """A record left undecided: a batch item failure, which SQS retries and in the end
    dead-letters."""

    error: Exception


@dataclass(frozen=True)
class Poisoned:
    """A record sent to the poison queue and acknowledged."""

    reason: str
    message_id: str  # of the copy on the poison queue


# What became of one record.
Taken = Decided | Poisoned | Failed


def send_attributes(record_attributes: dict[str, Any] | None, reason: str) -> dict[str, Any]:
    """A Lambda SQS record's ``messageAttributes`` as SendMessage takes them, with the reason added."""
    attributes: dict[str, Any] = {}
    for name, value in (record_attributes or {}).items():
        if name == REASON_ATTRIBUTE:
            continue
        data_type = value.get("dataType") or value.get("DataType")
        if value.get("stringValue") is not None:
            attributes[name] = {"DataType": data_type, "StringValue": value["stringValue"]}
        elif value.get("binaryValue") is not None:
            attributes[name] = {"DataType": data_type, "BinaryValue": base64.b64decode(value["binaryValue"])}
    if len(attributes) >= MAX_ATTRIBUTES:  # keep room for the reason; the body is what matters
        attributes = dict(list(attributes.items())[: MAX_ATTRIBUTES - 1])
    attributes[REASON_ATTRIBUTE] = {"DataType": "String", "StringValue": reason[:MAX_REASON] or "unknown"}
    return attributes


class PoisonQueue:
    def __init__(self, sqs: Any, queue_url: str) -> None:
        self.sqs = sqs
        self.queue_url = queue_url

    def send(self, body: str, reason: str, record_attributes: dict[str, Any] | None = None) -> str:
        """Sends the body unchanged; returns the new message id. Raises PoisonMoveFailed."""
        try:
            response = self.sqs.send_message(
                QueueUrl=self.queue_url,
                MessageBody=body,
                MessageAttributes=send_attributes(record_attributes, reason),
            )
        except Exception as exc:
            raise PoisonMoveFailed(f"could not move the record to the poison queue: {exc}") from exc
        return str(response["MessageId"])


def unstorable_reason(exc: Exception) -> str | None:
    """Why a record can never be stored, or None when a retry may succeed."""
    if isinstance(exc, MalformedMessage):
        return str(exc)
    if isinstance(exc, OrderIdConflict):
        return f"order id conflict: {exc}"
    return None


def take_batch(
    db: Database,
    redis: RedisClient,
    scripts: Scripts,
    poison: PoisonQueue | None,
    records: Sequence[tuple[str, dict[str, Any] | None]],
) -> list[Taken]:
    """Decide a batch of OrderQueue records (body, message attributes): one outcome per
    record, in order. Its orders are decided together (seckill.persist.persistence). A record
    that can never be stored goes to the poison queue when there is one; otherwise (or
    when that send fails) it fails, as does every record a retry may yet store."""
    parsed: list[OrderMessage | MalformedMessage] = []
    for body, _ in records:
        try:
            parsed.append(OrderMessage.from_json(body))
        except MalformedMessage as exc:
            parsed.append(exc)
    orders = [p for p in parsed if isinstance(p, OrderMessage)]
    decisions = iter(persist_orders(db, redis, scripts, orders))
    taken: list[Taken] = []
    for (body, attributes), order in zip(records, parsed, strict=True):
        outcome = order if isinstance(order, MalformedMessage) else next(decisions)
        if isinstance(outcome, Exception):
            taken.append(_set_aside(poison, body, attributes, outcome))
        else:  # a decision: the record is an order
            taken.append(Decided(cast(OrderMessage, order), outcome))
    return taken


def _set_aside(
    poison: PoisonQueue | None, body: str, attributes: dict[str, Any] | None, error: Exception
) -> Poisoned | Failed:
    reason = unstorable_reason(error)
    if poison is None or reason is None:
        return Failed(error)
    try:
        return Poisoned(reason=reason, message_id=poison.send(body, reason, attributes))
    except PoisonMoveFailed as exc:
        return Failed(exc)

"""The expiry message: what OrderExpiryQueue carries, what is malformed, and its delay."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber

from seckill.expiry import MAX_DELAY_SECONDS, ExpiryMessage, ExpiryQueue
from seckill.messages import MalformedMessage, Sent

GOOD = {"orderId": "123456789012345678", "voucherId": 9, "userId": 7, "payBy": "2026-11-30T12:15:00.123Z"}
PAY_BY = datetime(2026, 11, 30, 12, 15, 0, 123000, tzinfo=UTC)


def test_from_json_reads_a_good_body() -> None:
    assert ExpiryMessage.from_json(json.dumps(GOOD)) == ExpiryMessage(123456789012345678, 9, 7, PAY_BY)


def test_round_trip_keeps_the_order_id_a_string() -> None:
    order_id = (2**31 - 5) << 32 | 123  # far beyond JavaScript's safe integers
    message = ExpiryMessage(order_id, 9, 7, PAY_BY)
    assert json.loads(message.to_json()) == dict(GOOD, orderId=str(order_id))
    assert ExpiryMessage.from_json(message.to_json()) == message


def test_an_offset_deadline_is_the_same_instant_in_utc() -> None:
    message = ExpiryMessage.from_json(json.dumps(dict(GOOD, payBy="2026-11-30T20:15:00.123+08:00")))
    assert message.pay_by == PAY_BY
    assert message.pay_by.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("not json", id="not-json"),
        pytest.param("[]", id="array"),
        pytest.param(json.dumps({k: v for k, v in GOOD.items() if k != "orderId"}), id="missing-orderId"),
        pytest.param(json.dumps({k: v for k, v in GOOD.items() if k != "payBy"}), id="missing-payBy"),
        pytest.param(json.dumps(dict(GOOD, orderId=123456789012345678)), id="orderId-number"),
        pytest.param(json.dumps(dict(GOOD, orderId="0")), id="orderId-zero"),
        pytest.param(json.dumps(dict(GOOD, voucherId="9")), id="voucherId-string"),
        pytest.param(json.dumps(dict(GOOD, userId=True)), id="userId-bool"),
        pytest.param(json.dumps(dict(GOOD, payBy="soon")), id="payBy-bad"),
        pytest.param(json.dumps(dict(GOOD, payBy=1796040000)), id="payBy-number"),
        pytest.param(json.dumps(dict(GOOD, payBy="2026-11-30T12:15:00")), id="payBy-naive"),
        # An order message on the wrong queue is not an expiry.
        pytest.param(
            json.dumps({"orderId": "1", "userId": 7, "voucherId": 9, "acceptedAt": "2026-11-30T12:00:00Z"}),
            id="order-message",
        ),
    ],
)
def test_malformed_bodies_are_refused(body: str) -> None:
    with pytest.raises(MalformedMessage, match="malformed expiry message"):
        ExpiryMessage.from_json(body)


@pytest.mark.parametrize(
    ("left", "at_least", "delay"),
    [
        pytest.param(timedelta(seconds=42), 0, 42, id="before-the-deadline"),
        pytest.param(timedelta(seconds=41, milliseconds=1), 0, 42, id="rounded-up-never-early"),
        pytest.param(timedelta(0), 0, 0, id="at-the-deadline"),
        pytest.param(timedelta(seconds=-30), 0, 0, id="past-the-deadline"),
        pytest.param(timedelta(hours=2), 0, MAX_DELAY_SECONDS, id="beyond-what-sqs-delays"),
        pytest.param(timedelta(seconds=-30), 5, 5, id="at-least-as-asked"),
        pytest.param(timedelta(seconds=3), 7, 7, id="the-longer-of-both"),
        pytest.param(timedelta(seconds=3), 5000, MAX_DELAY_SECONDS, id="at-least-within-sqs"),
    ],
)
def test_delay_runs_until_the_deadline_within_sqs_limits(left: timedelta, at_least: int, delay: int) -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    assert ExpiryMessage(1, 9, 7, now + left).delay_seconds(now, at_least) == delay


def test_a_batch_says_which_entries_sqs_stored_refused_or_may_have_stored() -> None:
    """SendMessageBatch answers per entry: stored, refused as the sender's fault (nothing
    stored), or failed on SQS's side (maybe stored)."""
    sqs = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/OrderExpiryQueue"
    now = datetime.now(UTC)
    messages = [ExpiryMessage(10**17 + i, 9, 7, now + timedelta(seconds=60 * i)) for i in range(12)]
    failed = [
        {"Id": "1", "SenderFault": True, "Code": "InvalidParameterValue", "Message": "no"},
        {"Id": "2", "SenderFault": False, "Code": "InternalError", "Message": "maybe"},
    ]
    entries: list[dict[str, object]] = []
    sqs.meta.events.register(
        "provide-client-params.sqs.SendMessageBatch", lambda params, **_: entries.extend(params["Entries"])
    )
    with Stubber(sqs) as stub:
        first = [{"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "x"} for i in range(10) if i not in (1, 2)]
        stub.add_response("send_message_batch", {"Successful": first, "Failed": failed})
        second = [{"Id": str(i), "MessageId": f"n{i}", "MD5OfMessageBody": "x"} for i in range(2)]
        stub.add_response("send_message_batch", {"Successful": second, "Failed": []})
        sent = ExpiryQueue(sqs, url).send(messages)
        stub.assert_no_pending_responses()
    assert sent == [Sent.SENT, Sent.REFUSED, Sent.IN_DOUBT] + [Sent.SENT] * 9
    # Ten to a call, each delayed until its own deadline.
    assert [e["Id"] for e in entries] == [str(i) for i in range(10)] + ["0", "1"]
    assert [e["DelaySeconds"] for e in entries] == [60 * i for i in range(12)]

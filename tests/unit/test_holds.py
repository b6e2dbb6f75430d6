"""The payment route's body: a payment id the order table can hold, named in every 400."""

from __future__ import annotations

import json

import pytest

from seckill.holds import PaymentIn
from seckill.infra.errors import BadRequest
from seckill.vouchers import parse_model
from tests.helpers import load_event


def test_the_sample_payment_is_valid() -> None:
    payment = parse_model(load_event("seckill_api_payment.json")["body"], PaymentIn)
    assert payment.payment_id == "pay-20261130-0001"


@pytest.mark.parametrize("payment_id", ["p", "x" * 64, "ch_3MmlLrLkdIwHu7ix0snN0B15", "!~#-_.:/"])
def test_a_payment_id_of_1_to_64_printable_characters(payment_id: str) -> None:
    assert parse_model(json.dumps({"paymentId": payment_id}), PaymentIn).payment_id == payment_id


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"paymentId": ""},
        {"paymentId": "x" * 65},
        {"paymentId": 12345},
        {"paymentId": None},
        {"paymentId": "two words"},
        {"paymentId": "tab\there"},
        {"paymentId": "paiement-été"},
        {"payment_id": "snake case is not the field"},
    ],
)
def test_a_bad_payment_id_is_a_400_naming_it(body: dict[str, object]) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_model(json.dumps(body), PaymentIn)
    assert caught.value.refusal.status == 400
    assert caught.value.refusal.message.startswith("paymentId:"), caught.value.refusal.message


@pytest.mark.parametrize("body", [None, "", "not json", "[]", '"pay-1"'])
def test_a_body_that_is_not_a_json_object_is_a_400(body: str | None) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_model(body, PaymentIn)
    assert caught.value.refusal.status == 400

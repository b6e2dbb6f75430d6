"""The payment service and the winners of a sale with holds: payments signed like
the admin calls, cancels, status reads and the lookup of one's order with the user's
token, the deadline raced on purpose in a chaos run, and what each was answered."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3

from seckill_demo.admin_client import AdminClient
from seckill_demo.faults import rng


@dataclass
class Answer:
    """What a payment or a cancel was answered."""

    order_id: int
    action: str  # pay | cancel
    status: int
    code: str | None  # the order's status on 200, the refusal's code otherwise


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Payer:
    """The payment service and the winners: payments signed like the admin calls, cancels
    and status reads with the user's token at ``user_url`` (the edge's, when the sale has one)."""

    def __init__(self, http: urllib3.PoolManager, user_url: str, admin: AdminClient, seed: int) -> None:
        self.http = http
        self.user_url = user_url
        self.admin = admin
        self.ids = rng(seed, "payment-ids")
        self.lock = threading.Lock()

    def payment_id(self, order_id: int) -> str:
        """An order's payment id: opaque, drawn from the seed, and prefixed by the order id, since
        one payment pays one order and a run with the same seed may use the same database."""
        with self.lock:
            return f"{order_id}-{uuid.UUID(int=self.ids.getrandbits(128), version=4)}"

    def pay(self, order_id: int, payment_id: str) -> Answer:
        status, body = self.admin.post(f"/voucher-order/{order_id}/payment", {"paymentId": payment_id})
        return answer(order_id, "pay", status, body)

    def cancel(self, order_id: int, token: str) -> Answer:
        url = f"{self.user_url}/voucher-order/{order_id}/cancel"
        response = self.http.request("POST", url, headers={"authorization": token})
        return answer(order_id, "cancel", response.status, json.loads(response.data) if response.data else None)

    def find_order(self, voucher_id: int, token: str, *, patience: float) -> dict[str, Any] | None:
        """The user's own order on the voucher (``GET /voucher-order/seckill/{voucherId}``), as the
        app asks for it after a press's answer was lost; 503 TRY_AGAIN (a press still being
        placed, a dependency down, or an order maybe still on its way for a while after Redis
        lost its data) is asked again for ``patience`` seconds. None: none found."""
        url = f"{self.user_url}/voucher-order/seckill/{voucher_id}"
        deadline = time.monotonic() + patience
        while True:
            response = self.http.request("GET", url, headers={"authorization": token})
            if response.status == 200:
                order: dict[str, Any] = json.loads(response.data)["data"]
                return order
            if response.status != 503 or time.monotonic() > deadline:
                return None
            time.sleep(0.2)

    def at_deadline(self, order_id: int, action: str, token: str, *, patience: float, late: float) -> list[Answer]:
        """Pay or cancel ``late`` seconds after the order's payBy (before it, if negative):
        racing the deadline, and the expiry running at it."""
        url = f"{self.user_url}/voucher-order/{order_id}"
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            response = self.http.request("GET", url, headers={"authorization": token})
            data = json.loads(response.data).get("data") if response.status == 200 else None
            if isinstance(data, dict) and data.get("payBy"):
                wait = (parse_time(data["payBy"]) - datetime.now(UTC)).total_seconds() + late
                time.sleep(max(0.0, wait))
                break
            if isinstance(data, dict) and data.get("status") != "PENDING":
                break  # decided otherwise (failed): the action is answered so
            time.sleep(0.2)
        return self.settle(order_id, action, token, patience=patience)

    def settle(self, order_id: int, action: str, token: str, *, patience: float, again: bool = False) -> list[Answer]:
        """Pay (``again``: twice with the same paymentId) or cancel; 503 TRY_AGAIN and 409
        PENDING (the order is still on its way) are tried again for ``patience`` seconds."""
        payment_id = self.payment_id(order_id)
        deadline = time.monotonic() + patience
        while True:
            got = self.pay(order_id, payment_id) if action == "pay" else self.cancel(order_id, token)
            if (got.status != 503 and got.code != "PENDING") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        answers = [got]
        if again and got.status == 200:
            answers.append(self.pay(order_id, payment_id))
        return answers


def answer(order_id: int, action: str, status: int, body: Any) -> Answer:
    body = body if isinstance(body, dict) else {}
    data = body.get("data")
    code = data.get("status") if status == 200 and isinstance(data, dict) else body.get("code")
    return Answer(order_id, action, status, code)

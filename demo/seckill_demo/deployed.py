"""The same sale against a deployed stack (``seckill-flash-sale --endpoint URL
--stack-name NAME``).

The caller's AWS credentials (environment, profile or role, as boto3 finds them)
sign the admin calls with SigV4, invoke the stack's TokenMinterFunction for the
users' tokens (the stack must be deployed with EnableTestTokens=true), and read
the stack's queues, which its CloudFormation outputs name. Presses and status
polls go through the endpoint like any client's. Only what a client outside the
VPC can see is checked, and the report names the invariants that cannot be.
Nothing is replayed or reconciled here: the stack's schedule reconciles, and
``seckill-dlq-replay --stack-name`` replays what the report shows in the DLQ.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from typing import Any

import boto3
import urllib3
from botocore.exceptions import BotoCoreError, ClientError
from rich.progress import Progress

from seckill.messages import queue_depth
from seckill_demo.admin_client import AdminClient
from seckill_demo.load import TOKEN_TTL, Press, promised
from seckill_demo.report import NOT_CHECKED_FROM_OUTSIDE, Check, Report, check_from_outside
from seckill_demo.sale import Sale, console, finish, progress_bars
from seckill_ops.stack_outputs import MINTER_FUNCTION_NAME, QUEUE_URLS
from seckill_ops.stack_outputs import read as stack_outputs_of

MINT_BATCH = 10_000  # the most users TokenMinterFunction takes per invocation
DECIDED = {"CONFIRMED", "FAILED"}
ENDED_WITHIN = 10.0  # seconds: a warm API function repeats a cached SOLD_OUT for a while after the stop


class StackError(Exception):
    """The stack cannot be used as asked: unreadable, or without an output the sale needs."""


def stack_outputs(cfn: Any, stack_name: str) -> dict[str, str]:
    try:
        return stack_outputs_of(cfn, stack_name)
    except (ClientError, BotoCoreError) as exc:
        raise StackError(f"cannot read stack {stack_name!r}: {exc}") from exc


class DeployedSale(Sale):
    def __init__(self, args: argparse.Namespace, http: urllib3.PoolManager, session: boto3.Session) -> None:
        outputs = stack_outputs(session.client("cloudformation"), args.stack_name)
        missing = [key for key in (*QUEUE_URLS.values(), MINTER_FUNCTION_NAME) if key not in outputs]
        if missing:
            hint = " (deploy it with EnableTestTokens=true)" if MINTER_FUNCTION_NAME in missing else ""
            raise StackError(f"stack {args.stack_name!r} has no output {', '.join(missing)}{hint}")
        queues = {queue: outputs[key] for queue, key in QUEUE_URLS.items()}
        api_url = args.endpoint.rstrip("/")
        super().__init__(args, api_url, http, AdminClient(http, api_url, session), session.client("sqs"), queues)
        self.lambda_client = session.client("lambda")
        self.minter = outputs[MINTER_FUNCTION_NAME]

    def mint(self, user_ids: range) -> dict[int, str]:
        """Login tokens from the stack's TokenMinterFunction."""
        tokens: dict[int, str] = {}
        for start in range(0, len(user_ids), MINT_BATCH):
            payload = {"userIds": list(user_ids[start : start + MINT_BATCH]), "ttlSeconds": TOKEN_TTL}
            answer = self.lambda_client.invoke(FunctionName=self.minter, Payload=json.dumps(payload))
            result = json.loads(answer["Payload"].read())
            if "FunctionError" in answer or "tokens" not in result:
                raise RuntimeError(f"{self.minter} minted no tokens: {result}")
            tokens.update({int(user): token for user, token in result["tokens"].items()})
        return tokens

    def letters(self) -> tuple[int, int]:
        """(dead-letter queue depth, poison queue depth)."""
        return queue_depth(self.sqs, self.dlq_url), queue_depth(self.sqs, self.poison_url)

    def wait_decided(
        self, progress: Progress, what: str, presses: list[Press], tokens: dict[int, str]
    ) -> tuple[bool, dict[int, tuple[str, str | None]]]:
        """Until OrderQueue is empty and the status route calls every order id answered
        202 CONFIRMED or FAILED; (whether it came to that in time, the statuses)."""
        owners = dict(promised(presses))
        task = progress.add_task(what, total=len(owners))
        statuses: dict[int, tuple[str, str | None]] = {}
        deadline = time.monotonic() + self.args.drain_timeout
        while True:
            for order_id, user_id in owners.items():
                if statuses.get(order_id, ("",))[0] not in DECIDED:
                    statuses[order_id] = self.status(order_id, tokens[user_id])
            decided = sum(status in DECIDED for status, _ in statuses.values())
            progress.update(task, completed=decided)
            if decided == len(owners) and queue_depth(self.sqs, self.queue_url) == 0:
                return True, statuses
            if time.monotonic() >= deadline:
                return False, statuses
            time.sleep(0.5)

    def listed_stock(self) -> int | None:
        """The voucher's stock in MySQL, as the public voucher list shows it (None: not listed)."""
        url = f"{self.user_url}/voucher/list/{self.args.shop_id}?after={self.voucher_id - 1}&limit=1"
        response = self.http.request("GET", url)
        listed = json.loads(response.data).get("data") if response.status == 200 else None
        return int(listed[0]["stock"]) if listed and listed[0]["id"] == self.voucher_id else None

    def stop_ends_the_sale(self, token: str) -> Check:
        """Stop the voucher (signed), then press: 409 ENDED."""
        self.admin.stop(self.voucher_id)
        url = f"{self.api_url}/voucher-order/seckill/{self.voucher_id}"
        deadline = time.monotonic() + ENDED_WITHIN
        while True:
            response = self.http.request("POST", url, headers={"authorization": token})
            code = json.loads(response.data).get("code") if response.data else None
            if code == "ENDED" or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        outcome = f"a press after the stop: {response.status} {code}"
        return Check("the stop ends the sale", (response.status, code) == (409, "ENDED"), outcome)


def run_deployed_sale(args: argparse.Namespace) -> int:
    http = urllib3.PoolManager(maxsize=args.concurrency + 4, block=True, retries=False, timeout=30)
    try:
        sale = DeployedSale(args, http, boto3.Session(region_name=args.region))
        letters_before = sale.letters()
    except (StackError, BotoCoreError, ClientError) as exc:
        console.print(f"[bold red]{exc}")
        return 2
    console.print(f"stack {args.stack_name}: queues and {sale.minter} from its outputs; seed {args.seed}")
    sale.create_voucher("load test")
    tokens = sale.mint(range(args.first_user, args.first_user + args.users))
    console.print(f"voucher {sale.voucher_id} on sale at {sale.api_url} with stock {args.stock}; {len(tokens):,} users")

    with progress_bars() as progress:
        presses, wall = sale.fire(tokens, progress)
        drained, statuses = sale.wait_decided(progress, "persisting orders", presses, tokens)
        stock_before = sale.listed_stock()
        redelivered = sale.redeliver(presses)
        drained_again, statuses_after = sale.wait_decided(progress, "re-delivered", presses, tokens)
    stock_after = sale.listed_stock()
    ended = sale.stop_ends_the_sale(next(iter(tokens.values())))
    letters_after = sale.letters()

    checks = [Check("queue drained", drained and drained_again, f"within {args.drain_timeout:.0f} s per phase")]
    checks += check_from_outside(presses, statuses_after, stock_after, stock=args.stock, users=args.users)
    checks += [
        Check(
            "re-delivery changes nothing",
            stock_before == stock_after and statuses == statuses_after,
            f"{redelivered} re-sent; MySQL stock {stock_before} -> {stock_after}, "
            f"{sum(statuses[i] != statuses_after.get(i) for i in statuses)} statuses changed",
        ),
        Check(
            "nothing dead-lettered or poisoned",
            letters_after == letters_before,
            f"DLQ {letters_before[0]} -> {letters_after[0]}, poison queue {letters_before[1]} -> {letters_after[1]}"
            + ("" if letters_after == letters_before else f"; see seckill-dlq-replay --stack-name {args.stack_name}"),
        ),
        ended,
    ]
    seen = Counter(status for status, _ in statuses_after.values())
    report = Report(
        **sale.figures(presses, wall),
        confirmed=seen["CONFIRMED"],
        failed=seen["FAILED"],
        failed_reasons=dict(Counter(reason or "" for status, reason in statuses_after.values() if status == "FAILED")),
        redis_stock=None,
        mysql_stock=stock_after,
        redelivered=redelivered,
        reconciliation=None,
        checks=checks,
        endpoint=sale.api_url,
        not_checked=NOT_CHECKED_FROM_OUTSIDE,
    )
    return finish(report, args)

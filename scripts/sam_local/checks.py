"""What a run checks: every function invoked with its events/ file, then the HTTP API
served by ``sam local start-api``; each answer, and its effect in Redis, MySQL and SQS.

Each event is the shipped file with the run's own ids put in (voucher, users,
tokens, order, database), so that the files themselves are what gets tried.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scripts.sam_local.docker_host import DockerHost
from scripts.sam_local.progress import CheckFailed, Progress
from scripts.sam_local.sam import SamCli, SamServer
from scripts.sam_local.sandbox import Sandbox
from seckill.infra import keys
from seckill.migrate import statements
from seckill_local.checkout import ROOT
from seckill_local.ports import free_port

EVENTS = ROOT / "events"
API = "SeckillApiFunction"
# A body the persister can never store: it goes to the poison queue, not back to SQS.
MALFORMED_BODY = '{"orderId": "not-a-number"}'


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def schema_tables() -> set[str]:
    """The tables the schema makes: what the migrator must leave, at creation and at deletion."""
    return {m.group(1) for s in statements() if (m := re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", s))}


def event_file(name: str) -> dict[str, Any]:
    return json.loads((EVENTS / name).read_text(encoding="utf-8"))


def response(answer: Any) -> tuple[int, dict[str, str], Any]:
    """An API Gateway proxy answer: status, headers, the parsed body."""
    expect(isinstance(answer, dict) and "statusCode" in answer, f"not an API Gateway answer: {answer!r:.300}")
    return int(answer["statusCode"]), answer.get("headers") or {}, json.loads(answer.get("body") or "null")


def on_route(event: dict[str, Any], path: str, **parameters: str) -> dict[str, Any]:
    """The event with its path and path parameters set to the run's ids."""
    event["rawPath"] = path
    event["requestContext"]["http"]["path"] = path
    event["pathParameters"] = {**event.get("pathParameters", {}), **parameters}
    return event


def as_user(event: dict[str, Any], user_id: int) -> dict[str, Any]:
    """As API Gateway hands it over after the authorizer said yes for this user."""
    event["requestContext"]["authorizer"] = {"lambda": {"userId": str(user_id)}}
    return event


class Scenario:
    def __init__(
        self, sam: SamCli, box: Sandbox, docker: DockerHost, progress: Progress, work: Path, reply_url: str
    ) -> None:
        self.sam = sam
        self.box = box
        self.docker = docker
        self.progress = progress
        self.work = work
        self.reply_url = reply_url
        self.users = [secrets.randbelow(10**12) + 10**6 for _ in range(3)]
        self.tokens: dict[int, str] = {}
        self.voucher = 0
        self.plain_voucher = 0
        self.stock = 0
        self.order = ""
        self._events = itertools.count(1)

    # --- plumbing ------------------------------------------------------------------------

    def invoke(self, function: str, name: str, event: dict[str, Any]) -> tuple[Any, float]:
        """``sam local invoke`` with the run's copy of events/<name>."""
        path = self.work / f"{next(self._events):02d}-{name}"
        path.write_text(json.dumps(event, indent=2, ensure_ascii=False), encoding="utf-8")
        started = time.monotonic()
        answer = self.sam.invoke(function, path)
        return answer, time.monotonic() - started

    def redis_stock(self) -> int:
        return int(self.box.redis.get(keys.stock(self.voucher)) or -1)

    def mysql_stock(self) -> int:
        rows = self.box.query("SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", (self.voucher,))
        return int(rows[0]["stock"]) if rows else -1

    def order_message(self, order_id: str, *, visibility: int = 0) -> dict[str, Any]:
        """The order's message on OrderQueue; left visible unless ``visibility`` is given."""
        for message in self.box.messages("OrderQueue", visibility=visibility):
            if json.loads(message["Body"]).get("orderId") == order_id:
                return message
        raise CheckFailed(f"no message for order {order_id} on OrderQueue")

    # --- sam local invoke ----------------------------------------------------------------

    @staticmethod
    def together(*steps: Callable[[], None]) -> None:
        """Steps that need none of one another's effects, at once: an invoke is mostly a
        container's start. The first failure is raised once all have ended."""
        with ThreadPoolExecutor(len(steps)) as pool:
            for future in [pool.submit(step) for step in steps]:
                future.result()

    def invokes_before_the_api(self) -> None:
        self.migrator_create()
        self.together(self.add_seckill_voucher, self.add_voucher)
        self.together(self.list_vouchers, self.mint_tokens)
        self.authorize()
        self.press()
        self.status("PENDING", "seckill_api_order_status.json")
        self.persist()
        self.expire()
        self.reconcile()

    def invokes_after_the_api(self) -> None:
        self.stop_voucher()
        self.migrator_delete()

    def migrator_create(self) -> None:
        event = event_file("migrator_create.json")
        event["ResponseURL"] = self.reply_url
        event["ResourceProperties"]["DatabaseName"] = self.box.db_name
        answer, took = self.invoke("MigratorFunction", "migrator_create.json", event)
        physical = f"seckill-schema-{self.box.db_name}"
        expect(answer == {"Status": "SUCCESS", "PhysicalResourceId": physical}, f"MigratorFunction answered {answer}")
        self.expect_reply(event, "SUCCESS")
        tables, wanted = self.tables(), schema_tables()
        expect(tables == wanted, f"the migrator made tables {sorted(tables)}, not {sorted(wanted)}")
        self.box.start_ids_far_apart()
        self.progress.passed(
            f"MigratorFunction  migrator_create.json: SUCCESS replied to CloudFormation's URL; "
            f"{len(tables)} tables in {self.box.db_name}, made by a user granted only on it",
            took,
        )

    def tables(self) -> set[str]:
        rows = self.box.query(
            "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = %s", (self.box.db_name,)
        )
        return {r["t"] for r in rows}

    def expect_reply(self, event: dict[str, Any], status: str) -> None:
        replies = [r for r in self.box.replies if r.get("RequestId") == event["RequestId"]]
        expect(len(replies) == 1, f"{len(replies)} replies to CloudFormation for request {event['RequestId']}, not 1")
        expect(replies[0].get("Status") == status, f"the reply to CloudFormation was {replies[0]}")

    def add_seckill_voucher(self) -> None:
        event = event_file("seckill_api_add_seckill_voucher.json")
        body = json.loads(event["body"])
        # The file's sale lies in the future; this one is open now (times without an offset are UTC).
        now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
        body["beginTime"] = (now - timedelta(minutes=1)).isoformat()
        body["endTime"] = (now + timedelta(hours=1)).isoformat()
        event["body"] = json.dumps(body, ensure_ascii=False)
        answer, took = self.invoke(API, "seckill_api_add_seckill_voucher.json", event)
        status, _, result = response(answer)
        expect(
            status == 201 and result["success"] and isinstance(result["data"], int),
            f"POST /voucher/seckill: {status} {result}",
        )
        self.voucher, self.stock = result["data"], int(body["stock"])
        window = self.box.redis.hgetall(keys.window(self.voucher))
        expect(
            self.redis_stock() == self.stock,
            f"Redis stock of voucher {self.voucher} is {self.redis_stock()}, not {self.stock}",
        )
        expect(set(window) == {"begin", "end"}, f"Redis window of voucher {self.voucher} is {window}")
        expect(self.mysql_stock() == self.stock, f"MySQL stock of voucher {self.voucher} is {self.mysql_stock()}")
        self.progress.passed(
            f"{API}  seckill_api_add_seckill_voucher.json: 201 voucher {self.voucher}; "
            f"stock {self.stock} and window in Redis and MySQL",
            took,
        )

    def add_voucher(self) -> None:
        event = event_file("seckill_api_add_voucher.json")
        answer, took = self.invoke(API, "seckill_api_add_voucher.json", event)
        status, _, result = response(answer)
        expect(status == 201 and isinstance(result["data"], int), f"POST /voucher: {status} {result}")
        rows = self.box.query("SELECT type FROM tb_voucher WHERE id = %s", (result["data"],))
        expect(rows == [{"type": 0}], f"tb_voucher holds {rows} for voucher {result['data']}")
        self.plain_voucher = result["data"]
        self.progress.passed(
            f"{API}  seckill_api_add_voucher.json: 201 voucher {result['data']}, an ordinary one in MySQL", took
        )

    def list_vouchers(self) -> None:
        event = event_file("seckill_api_list_vouchers.json")
        shop = event["pathParameters"]["shopId"]
        answer, took = self.invoke(API, "seckill_api_list_vouchers.json", event)
        status, _, result = response(answer)
        expect(status == 200, f"GET /voucher/list/{shop}: {status} {result}")
        listed = {v["id"]: v for v in result["data"]}
        expect(set(listed) == {self.voucher, self.plain_voucher}, f"shop {shop} lists {sorted(listed)}")
        expect(listed[self.voucher]["stock"] == self.stock, f"the list shows stock {listed[self.voucher]['stock']}")
        self.progress.passed(f"{API}  seckill_api_list_vouchers.json: 200, both vouchers, stock {self.stock}", took)

    def mint_tokens(self) -> None:
        event = event_file("token_minter.json")
        event["userIds"] = self.users
        answer, took = self.invoke("TokenMinterFunction", "token_minter.json", event)
        tokens = answer.get("tokens", {}) if isinstance(answer, dict) else {}
        expect(set(tokens) == {str(u) for u in self.users}, f"TokenMinterFunction answered {answer}")
        self.tokens = {int(u): t for u, t in tokens.items()}
        self.box.tokens.extend(self.tokens.values())
        for user, token in self.tokens.items():
            held = self.box.redis.hget(keys.login_token(token), "id")
            expect(held == str(user), f"login:token:{token} holds user {held}, not {user}")
        self.progress.passed(
            f"TokenMinterFunction  token_minter.json: {len(tokens)} tokens, each in Redis for its user", took
        )

    def authorize(self) -> None:
        user = self.users[0]
        allowed = {"isAuthorized": True, "context": {"userId": str(user)}}
        self.together(
            lambda: self.authorizer(self.tokens[user], allowed, f"user {user}'s token: allowed as {user}"),
            lambda: self.authorizer(secrets.token_hex(16), {"isAuthorized": False}, "an unknown token: denied"),
        )

    def authorizer(self, token: str, wanted: dict[str, Any], what: str) -> None:
        event = on_route(
            event_file("authorizer.json"), f"/voucher-order/seckill/{self.voucher}", voucherId=str(self.voucher)
        )
        event["headers"]["authorization"] = f"Bearer {token}"
        event["identitySource"] = [f"Bearer {token}"]
        answer, took = self.invoke("AuthorizerFunction", "authorizer.json", event)
        expect(answer == wanted, f"AuthorizerFunction answered {answer}, not {wanted}")
        self.progress.passed(f"AuthorizerFunction  authorizer.json with {what}", took)

    def press(self) -> None:
        user = self.users[0]
        event = on_route(
            event_file("seckill_api_seckill.json"),
            f"/voucher-order/seckill/{self.voucher}",
            voucherId=str(self.voucher),
        )
        event["headers"]["authorization"] = f"Bearer {self.tokens[user]}"
        answer, took = self.invoke(API, "seckill_api_seckill.json", as_user(event, user))
        status, headers, result = response(answer)
        expect(
            status == 202 and isinstance(result["data"], str),
            f"POST /voucher-order/seckill/{self.voucher}: {status} {result}",
        )
        self.order = result["data"]
        expect(headers.get("Location") == f"/voucher-order/{self.order}", f"Location is {headers.get('Location')}")
        expect(
            self.redis_stock() == self.stock - 1,
            f"Redis stock is {self.redis_stock()} after the press, not {self.stock - 1}",
        )
        expect(
            self.box.redis.sismember(keys.buyers(self.voucher), str(user)),
            f"user {user} is not among the buyers in Redis",
        )
        body = json.loads(self.order_message(self.order)["Body"])
        expect((body["userId"], body["voucherId"]) == (user, self.voucher), f"the message on OrderQueue is {body}")
        self.progress.passed(
            f"{API}  seckill_api_seckill.json: 202 order {self.order}; "
            f"Redis stock {self.stock} -> {self.redis_stock()}, its message on OrderQueue",
            took,
        )

    def status(self, wanted: str, name: str) -> None:
        user = self.users[0]
        event = on_route(event_file(name), f"/voucher-order/{self.order}", orderId=self.order)
        event["headers"]["authorization"] = f"Bearer {self.tokens[user]}"
        answer, took = self.invoke(API, name, as_user(event, user))
        status, _, result = response(answer)
        data = result.get("data") or {}
        expect(
            status == 200 and data.get("status") == wanted and data.get("orderId") == self.order,
            f"GET /voucher-order/{self.order}: {status} {result}",
        )
        self.progress.passed(f"{API}  {name}: 200 {wanted}", took)

    def persist(self) -> None:
        batch = event_file("order_persister_batch.json")
        # Received as the event source mapping would: hidden until the batch is done.
        message = self.order_message(self.order, visibility=300)
        queue_arn = self.box.queue_arn("OrderQueue")
        received, malformed = (copy.deepcopy(r) for r in batch["Records"][:2])
        received.update(
            messageId=message["MessageId"], receiptHandle=message["ReceiptHandle"], body=message["Body"],
            md5OfBody=message["MD5OfBody"], eventSourceARN=queue_arn,
        )  # fmt: skip
        malformed.update(
            body=MALFORMED_BODY,
            md5OfBody=hashlib.md5(MALFORMED_BODY.encode()).hexdigest(),  # noqa: S324 (what SQS puts there)
            eventSourceARN=queue_arn,
        )
        batch["Records"] = [received, malformed]
        answer, took = self.invoke("OrderPersisterFunction", "order_persister_batch.json", batch)
        expect(answer == {"batchItemFailures": []}, f"OrderPersisterFunction answered {answer}")
        # What the event source mapping does with a batch that succeeded.
        self.box.sqs.delete_message(QueueUrl=self.box.queues["OrderQueue"], ReceiptHandle=message["ReceiptHandle"])
        rows = self.box.query("SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = %s", (self.order,))
        expect(
            rows == [{"user_id": self.users[0], "voucher_id": self.voucher}],
            f"tb_voucher_order holds {rows} for order {self.order}",
        )
        expect(self.mysql_stock() == self.stock - 1, f"MySQL stock is {self.mysql_stock()}, not {self.stock - 1}")
        poisoned = self.box.messages("OrderPoisonQueue")
        expect(
            [m["Body"] for m in poisoned] == [MALFORMED_BODY] and "reason" in poisoned[0].get("MessageAttributes", {}),
            f"OrderPoisonQueue holds {poisoned}",
        )
        self.progress.passed(
            "OrderPersisterFunction  order_persister_batch.json (the press's message and a malformed one): "
            f"no failures; order {self.order} in MySQL, stock {self.mysql_stock()}; "
            "the malformed one on OrderPoisonQueue",
            took,
        )

    def expire(self) -> None:
        """The order's hold runs out: the persister's expiry message waits on OrderExpiryQueue,
        the order is made overdue in MySQL, and OrderExpiryFunction expires it with the
        message's body; its unit is back on sale in MySQL and in Redis."""
        delayed = self.box.sqs.get_queue_attributes(
            QueueUrl=self.box.queues["OrderExpiryQueue"], AttributeNames=["ApproximateNumberOfMessagesDelayed"]
        )["Attributes"]
        expect(
            int(delayed.get("ApproximateNumberOfMessagesDelayed", 0)) == 1,
            f"OrderExpiryQueue holds {delayed} delayed messages, not the order's expiry",
        )
        self.box.query("UPDATE tb_voucher_order SET pay_by = NOW(3) - INTERVAL 1 SECOND WHERE id = %s", (self.order,))
        (row,) = self.box.query("SELECT pay_by FROM tb_voucher_order WHERE id = %s", (self.order,))
        pay_by = row["pay_by"].replace(tzinfo=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        body = json.dumps({"orderId": self.order, "voucherId": self.voucher, "userId": self.users[0], "payBy": pay_by})
        event = event_file("order_expiry.json")
        event["Records"][0].update(
            body=body,
            md5OfBody=hashlib.md5(body.encode()).hexdigest(),  # noqa: S324 (what SQS puts there)
            eventSourceARN=self.box.queue_arn("OrderExpiryQueue"),
        )
        before = self.mysql_stock(), self.redis_stock()
        answer, took = self.invoke("OrderExpiryFunction", "order_expiry.json", event)
        expect(answer == {"batchItemFailures": []}, f"OrderExpiryFunction answered {answer}")
        rows = self.box.query("SELECT status, close_reason FROM tb_voucher_order WHERE id = %s", (self.order,))
        expect(rows == [{"status": 4, "close_reason": "EXPIRED"}], f"order {self.order} is {rows}, not expired")
        after = self.mysql_stock(), self.redis_stock()
        expect(after == (before[0] + 1, before[1] + 1), f"stock (MySQL, Redis) went {before} -> {after}, not +1")
        self.progress.passed(
            f"OrderExpiryFunction  order_expiry.json: order {self.order} EXPIRED; "
            f"stock back on sale, MySQL {before[0]} -> {after[0]}, Redis {before[1]} -> {after[1]}",
            took,
        )

    def reconcile(self) -> None:
        answer, took = self.invoke(
            "ReconcilerFunction", "reconciler_scheduled.json", event_file("reconciler_scheduled.json")
        )
        totals = answer.get("totals", {}) if isinstance(answer, dict) else {}
        # A rebuild is allowed: a run beside it on the same Redis database may drop seckill:loaded.
        changed = {k: v for k, v in totals.items() if k not in {"vouchers", "rebuilt"} and v}
        expect(
            answer.get("queueDrained") is True and totals.get("vouchers") == 1 and not changed,
            f"ReconcilerFunction answered {answer}",
        )
        expect(
            self.redis_stock() == self.mysql_stock(),
            f"Redis stock {self.redis_stock()} != MySQL stock {self.mysql_stock()}",
        )
        expect(not self.box.redis.hlen(keys.pending(self.voucher)), "a reservation is still pending in Redis")
        self.progress.passed(
            f"ReconcilerFunction  reconciler_scheduled.json: queue drained, 1 voucher, nothing to repair; "
            f"Redis and MySQL stock both {self.mysql_stock()}",
            took,
        )

    def stop_voucher(self) -> None:
        event = on_route(
            event_file("seckill_api_stop_voucher.json"),
            f"/voucher/seckill/{self.voucher}/stop",
            voucherId=str(self.voucher),
        )
        answer, took = self.invoke(API, "seckill_api_stop_voucher.json", event)
        status, _, result = response(answer)
        expect(status == 200, f"POST /voucher/seckill/{self.voucher}/stop: {status} {result}")
        rows = self.box.query("SELECT status FROM tb_voucher WHERE id = %s", (self.voucher,))
        window = self.box.redis.hgetall(keys.window(self.voucher))
        expect(rows == [{"status": 2}], f"tb_voucher.status is {rows} after the stop")
        expect(window == {"begin": "0", "end": "0"}, f"the Redis window is {window} after the stop")
        self.progress.passed(
            f"{API}  seckill_api_stop_voucher.json: 200; withdrawn in MySQL, window closed in Redis", took
        )

    def migrator_delete(self) -> None:
        event = event_file("migrator_delete.json")
        event["ResponseURL"] = self.reply_url
        event["PhysicalResourceId"] = f"seckill-schema-{self.box.db_name}"
        answer, took = self.invoke("MigratorFunction", "migrator_delete.json", event)
        expect(answer.get("Status") == "SUCCESS", f"MigratorFunction answered {answer}")
        self.expect_reply(event, "SUCCESS")
        expect(self.tables() == schema_tables(), "the stack's deletion dropped tables")
        self.progress.passed("MigratorFunction  migrator_delete.json: SUCCESS replied; the data left in place", took)

    # --- sam local start-api -------------------------------------------------------------

    @contextmanager
    def serving(self, log: Path) -> Iterator[SamServer]:
        """``sam local start-api``, answering, until the block ends; then stopped, its containers removed."""
        before = self.docker.sam_containers()
        started = time.monotonic()
        api = self.sam.start_api(free_port("127.0.0.1"), log)
        try:
            api.wait_ready(
                f"/voucher/list/{event_file('seckill_api_list_vouchers.json')['pathParameters']['shopId']}", 180
            )
            self.progress.passed(
                f"sam local start-api --warm-containers EAGER: answering on {api.url}", time.monotonic() - started
            )
            yield api
        finally:
            api.stop()
            removed = self.docker.remove_containers(self.docker.sam_containers() - before)
            self.progress.detail(f"start-api stopped; {removed or 'no containers left'}")

    def api_calls(self, api: SamServer) -> None:
        user = self.users[1]
        press = f"/voucher-order/seckill/{self.voucher}"
        started = time.monotonic()
        status, body = api.request("POST", press, {"authorization": f"Bearer {self.tokens[user]}"})
        expect(
            status == 202 and isinstance(body, dict) and isinstance(body.get("data"), str),
            f"POST {press}: {status} {body}",
        )
        order = body["data"]
        # One unit sold to this press; the first order's came back when it expired.
        expect(self.redis_stock() == self.stock - 1, f"Redis stock is {self.redis_stock()} after the second press")
        message = json.loads(self.order_message(order)["Body"])
        expect(message["userId"] == user, f"the message on OrderQueue is {message}")
        self.progress.passed(
            f"POST {press} with user {user}'s token: 202 order {order}; "
            f"Redis stock {self.redis_stock()}, its message on OrderQueue",
            time.monotonic() - started,
        )
        started = time.monotonic()
        status, body = api.request("GET", f"/voucher-order/{self.order}", {"authorization": self.tokens[self.users[0]]})
        data = body.get("data") if isinstance(body, dict) else None
        expect(
            status == 200 and (data or {}).get("status") == "EXPIRED",
            f"GET /voucher-order/{self.order}: {status} {body}",
        )
        self.progress.passed(
            f"GET /voucher-order/{self.order} (the persisted order, since expired): 200 EXPIRED",
            time.monotonic() - started,
        )
        started = time.monotonic()
        status, body = api.request("POST", press)
        # API Gateway's own answer: the function is never reached.
        expect(status == 401 and body == {"message": "Unauthorized"}, f"POST {press} without a token: {status} {body}")
        expect(self.redis_stock() == self.stock - 1, "a press without a token changed the stock")
        self.progress.passed(f"POST {press} without a token: 401, stock unchanged", time.monotonic() - started)

"""``seckill-flash-sale --endpoint URL --stack-name NAME`` against ``sam local start-api``,
as a user runs it against a deployed stack.

What stands in for the rest of AWS: Lambda's Invoke API is SAM's own ``sam local
start-lambda`` (TokenMinterFunction in its container); the stack is a moto
CloudFormation stack whose outputs name the run's queues; the persister is fed
from OrderQueue by ``seckill-local feed`` (sam local has no event source mapping).
SAM does not emulate AWS_IAM authorization: it passes the admin routes' requests
on with no caller, and the function answers 403. So a router in front of start-api
sends those routes to ``seckill-local start-api``, which verifies their SigV4
signatures and hands the function the caller as API Gateway does; every other
request (presses, status reads, the voucher list, the Lambda authorizer) is SAM's.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import urllib3

from scripts.sam_local.checks import expect
from scripts.sam_local.docker_host import DockerHost
from scripts.sam_local.progress import CheckFailed, Progress, Unavailable
from scripts.sam_local.sam import SamCli, SamServer
from scripts.sam_local.sandbox import Sandbox
from seckill.infra import keys
from seckill.infra.db import Credentials
from seckill_demo.admin_client import AdminClient
from seckill_demo.outputs_stack import outputs_template
from seckill_local.api import Answer, make_server
from seckill_local.lambdas import local_parameters
from seckill_local.ports import free_port
from seckill_local.template import Route, Template

USERS, PRESSES, STOCK = 30, 2, 10
NO_SUCH_VOUCHER = 1  # the run's voucher ids start far above it (Sandbox.start_ids_far_apart)
# Hop-by-hop headers stay with each connection; the router's server sets its own content-length.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


class IamRouter:
    """Each request to ``seckill-local start-api`` if its route is AWS_IAM-authorized, else to SAM's start-api;
    the Host header is passed on unchanged, so a signature made for the router's address verifies."""

    def __init__(self, routes: list[Route], sam_url: str, runner_url: str) -> None:
        self.iam_routes = [route for route in routes if route.auth == "AWS_IAM"]
        self.upstreams = {True: runner_url, False: sam_url}
        self.http = urllib3.PoolManager(maxsize=16, retries=False, timeout=60)
        self.counts: Counter[bool] = Counter()
        self._lock = threading.Lock()

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Answer:
        path = urlsplit(target).path
        iam = any(route.match(method, path) is not None for route in self.iam_routes)
        with self._lock:
            self.counts[iam] += 1
        sent = {name: value for name, value in headers.items() if name not in HOP_BY_HOP}
        response = self.http.request(
            method, self.upstreams[iam] + target, headers=sent, body=body or None, redirect=False
        )
        answer = {name.lower(): value for name, value in response.headers.items() if name.lower() not in HOP_BY_HOP}
        return response.status, answer, response.data


class EndpointSale:
    def __init__(
        self, sam: SamCli, box: Sandbox, docker: DockerHost, progress: Progress, work: Path, template: Template
    ) -> None:
        self.sam = sam
        self.box = box
        self.docker = docker
        self.progress = progress
        self.work = work
        self.template = template
        self.first_user = secrets.randbelow(10**12) + 10**6

    def run(self, api: SamServer) -> None:
        self.sam_refuses_admin_calls(api)
        with ExitStack() as stack:
            lambda_url = self.start_lambda(stack)
            runner_url = self.start_runner(stack)
            router = IamRouter([route for route, _ in self.template.routes()], api.url, runner_url)
            server = make_server(router, "127.0.0.1", 0)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stack.callback(server.server_close)
            stack.callback(server.shutdown)
            endpoint = f"http://127.0.0.1:{server.server_address[1]}"
            stack.callback(self.forget_tokens)
            report = self.sale(endpoint, lambda_url, self.create_stack(stack))
            self.progress.detail(
                f"the router sent {router.counts[True]} admin calls to seckill-local start-api, "
                f"{router.counts[False]} requests to sam local start-api"
            )
            self.check(report)

    def sam_refuses_admin_calls(self, api: SamServer) -> None:
        """Why the router: a signed admin call straight to SAM's start-api reaches the function with
        no caller, and is refused. (Should SAM come to emulate AWS_IAM, this fails: drop the router.)"""
        started = time.monotonic()
        admin = AdminClient(urllib3.PoolManager(retries=False, timeout=60), api.url, boto3.Session())
        path = f"/voucher/seckill/{NO_SUCH_VOUCHER}/stop"
        status, body = admin.post(path)
        code = body.get("code") if isinstance(body, dict) else None
        expect((status, code) == (403, "FORBIDDEN"), f"a signed POST {path} to sam local start-api: {status} {body}")
        self.progress.passed(
            f"a signed POST {path} straight to sam local start-api: 403 FORBIDDEN (SAM passes AWS_IAM routes on "
            "with no caller), so the sale's admin calls go through seckill-local start-api",
            time.monotonic() - started,
        )

    def start_lambda(self, stack: ExitStack) -> str:
        before = self.docker.sam_containers()
        started = time.monotonic()
        server = self.sam.start_lambda(free_port("127.0.0.1"), self.work / "start-lambda.log")
        stack.callback(lambda: self.docker.remove_containers(self.docker.sam_containers() - before))
        stack.callback(server.stop)
        server.wait_ready("/", 60)  # any answer: it listens (its containers start at the first invoke)
        self.progress.passed(f"sam local start-lambda: answering on {server.url}", time.monotonic() - started)
        return server.url

    def start_runner(self, stack: ExitStack) -> str:
        """``seckill-local start-api`` (the admin routes) and ``feed`` (the persister), on the run's
        database, user, Redis database and queues, reached from the host directly."""
        box = self.box
        creds = Credentials(box.admin.host, box.admin.port, box.db_user, box.db_password, box.db_name)
        env_file = self.work / "env.host.json"
        env_file.write_text(json.dumps({"Parameters": local_parameters(box.settings.redis_url, creds)}), "utf-8")
        common = ["--env-vars", str(env_file), "--sqs-endpoint", box.sqs_endpoint, "--queue-prefix", box.queue_prefix]
        port = free_port("127.0.0.1")
        started = time.monotonic()
        processes = [
            self._spawn(stack, "runner-api", "start-api", "--port", str(port), "--containers", "1", *common),
            self._spawn(stack, "runner-feed", "feed", *common),
        ]
        url = f"http://127.0.0.1:{port}"
        http = urllib3.PoolManager(retries=False, timeout=2)
        deadline = time.monotonic() + 90
        while True:
            for process in processes:
                if process.poll() is not None:
                    raise Unavailable(f"seckill-local exited {process.returncode} (logs: {self.work}/runner-*.log)")
            try:
                if http.request("GET", f"{url}/voucher/list/1").status == 200:
                    break
            except urllib3.exceptions.HTTPError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise Unavailable(f"seckill-local start-api did not answer within 90 s (log: {self.work})")
            time.sleep(0.3)
        self.progress.passed(
            f"seckill-local start-api (the AWS_IAM routes, SigV4 verified) on {url}; seckill-local feed on OrderQueue",
            time.monotonic() - started,
        )
        return url

    def _spawn(self, stack: ExitStack, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = (self.work / f"{name}.log").open("wb")
        stack.callback(log.close)
        process = subprocess.Popen(
            [sys.executable, "-m", "seckill_local.runner", *args], stdout=log, stderr=subprocess.STDOUT
        )

        def stop() -> None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

        stack.callback(stop)
        return process

    def create_stack(self, stack: ExitStack) -> str:
        cfn = boto3.client("cloudformation", endpoint_url=self.box.sqs_endpoint, region_name=self.sam.region)
        name = f"{self.box.queue_prefix}stack"
        cfn.create_stack(StackName=name, TemplateBody=outputs_template(self.box.queues))
        stack.callback(lambda: cfn.delete_stack(StackName=name))
        return name

    def sale(self, endpoint: str, lambda_url: str, stack_name: str) -> dict[str, Any]:
        report_file = self.work / "flash-sale.json"
        endpoints = {
            "AWS_ENDPOINT_URL_CLOUDFORMATION": self.box.sqs_endpoint,
            "AWS_ENDPOINT_URL_SQS": self.box.sqs_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": lambda_url,
        }
        command = [
            sys.executable, "-m", "seckill_demo.flash_sale", "--endpoint", endpoint, "--stack-name", stack_name,
            "--users", str(USERS), "--presses", str(PRESSES), "--stock", str(STOCK), "--concurrency", "8",
            "--first-user", str(self.first_user), "--shop-id", str(secrets.randbelow(10**12) + 10**6),
            "--drain-timeout", "60", "--json", str(report_file),
        ]  # fmt: skip
        started = time.monotonic()
        done = self.sam.commands.run(
            command, "flash-sale", timeout=300, check=False, env={**self.sam.commands.env, **endpoints}
        )
        took = time.monotonic() - started
        if done.returncode != 0 or not report_file.exists():
            raise CheckFailed(
                f"seckill-flash-sale --endpoint exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
            )
        report = json.loads(report_file.read_text(encoding="utf-8"))
        self.progress.passed(
            f"seckill-flash-sale --endpoint {endpoint} --stack-name {stack_name}: exit 0, "
            f"{report['requests']} presses, {report['accepted']} accepted, {report['confirmed']} confirmed, "
            f"{report['redelivered']} re-delivered, {len(report['checks'])} checks passed",
            took,
        )
        return report

    def check(self, report: dict[str, Any]) -> None:
        """The report's figures, and MySQL (read as its administrator) agreeing with them."""
        failed = [c["name"] for c in report["checks"] if not c["ok"]]
        expect(report["ok"] and not failed, f"the report failed {failed}")
        expect(report["requests"] == USERS * PRESSES, f"{report['requests']} presses, not {USERS * PRESSES}")
        expect(report["accepted"] == STOCK, f"{report['accepted']} accepted of a stock of {STOCK}")
        expect(report["confirmed"] == report["accepted"], f"{report['confirmed']} confirmed, not every 202")
        expect((report["failed"], report["mysql_stock"]) == (0, 0), f"failed/stock left: {report}")
        expect(report["redelivered"] == report["accepted"], f"{report['redelivered']} re-delivered")
        orders = self.box.query("SELECT user_id FROM tb_voucher_order WHERE voucher_id = %s", (report["voucher_id"],))
        users = {row["user_id"] for row in orders}
        expect(len(orders) == len(users) == STOCK, f"MySQL holds {len(orders)} orders of {len(users)} users")
        expect(all(self.first_user <= u < self.first_user + USERS for u in users), "an order of a user not in the sale")
        self.progress.passed(
            f"MySQL: {len(orders)} orders for voucher {report['voucher_id']}, one per user, none twice", 0
        )

    def forget_tokens(self) -> None:
        """The sale's login tokens, minted by TokenMinterFunction, join the run's keys to delete."""
        redis = self.box.redis
        for key in redis.scan_iter(match=keys.login_token("*"), count=1000):
            user = redis.hget(key, "id")
            if user is not None and self.first_user <= int(user) < self.first_user + USERS:
                self.box.tokens.append(key.removeprefix(keys.login_token("")))

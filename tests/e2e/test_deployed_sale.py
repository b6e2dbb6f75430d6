"""``seckill-flash-sale --endpoint URL --stack-name NAME`` against the local runner,
run exactly as against a deployed stack.

What stands in for AWS: the HTTP API is ``seckill-local start-api`` (its IAM routes
verify SigV4 signatures), the queues and the stack are moto's (SQS, CloudFormation),
and Lambda's Invoke API is ``seckill-local start-lambda`` (moto runs functions only in
Docker). The stack's outputs name the runner's queues and TokenMinterFunction, as a
deployed stack's outputs name its own; the real template cannot be deployed into moto.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import urllib3

from seckill.infra.db import Credentials, Database
from seckill_demo.stack import free_port
from seckill_local.lambdas import local_parameters
from seckill_local.outputs_stack import outputs_template
from seckill_local.sqs import ensure_queues
from seckill_local.template import ROOT, Template
from tests.helpers import db_rows, wait_for

pytestmark = pytest.mark.e2e

SECKILL_LOCAL = ROOT / ".venv" / "bin" / "seckill-local"


def wait_ready(process: subprocess.Popen[bytes], ready: Any, what: str, timeout: float = 90) -> None:
    def up() -> bool:
        assert process.poll() is None, f"{what} exited early"
        return ready()

    # Not listening yet: OSError or HTTPError.
    wait_for(up, f"{what} to come up", timeout=timeout, interval=0.3, ignoring=(OSError, urllib3.exceptions.HTTPError))


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, creds: Credentials, sqs_endpoint: str, sqs: Any, template: Template
) -> Iterator[dict[str, str]]:
    """The runner's HTTP API, feeder and Invoke API, and a moto stack whose outputs name them."""
    prefix = f"d{uuid.uuid4().hex[:10]}-"
    queues = ensure_queues(sqs, template, prefix=prefix, visibility_timeout=2)
    env_file = tmp_path_factory.mktemp("deployed") / "env.json"
    parameters = local_parameters(os.environ["REDIS_URL"], creds)
    env_file.write_text(json.dumps({"Parameters": parameters}), encoding="utf-8")
    api_port, lambda_port = free_port(), free_port()
    common = ["--env-vars", str(env_file), "--sqs-endpoint", sqs_endpoint, "--queue-prefix", prefix]
    commands = {
        "start-api": ["start-api", "--port", str(api_port), "--containers", "2", *common],
        "feed": ["feed", *common],
        "start-lambda": ["start-lambda", "--port", str(lambda_port), *common],
    }
    processes = [
        subprocess.Popen(  # noqa: S603 (our own command)
            [str(SECKILL_LOCAL), *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for args in commands.values()
    ]
    cfn = boto3.client("cloudformation", endpoint_url=sqs_endpoint, region_name="us-east-1")
    names = {"full": f"{prefix}stack", "no-minter": f"{prefix}no-minter"}
    try:
        http = urllib3.PoolManager(retries=False, timeout=2)
        api_url, lambda_url = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{lambda_port}"
        wait_ready(processes[0], lambda: http.request("GET", f"{api_url}/voucher/list/1").status == 200, "start-api")
        wait_ready(processes[2], lambda: http.request("GET", lambda_url).status == 404, "start-lambda")
        cfn.create_stack(StackName=names["full"], TemplateBody=outputs_template(queues))
        cfn.create_stack(StackName=names["no-minter"], TemplateBody=outputs_template(queues, minter=False))
        yield {"api": api_url, "lambda": lambda_url, "aws": sqs_endpoint, **names}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        for name in names.values():
            cfn.delete_stack(StackName=name)
        for url in queues.values():
            sqs.delete_queue(QueueUrl=url)


def flash_sale(stack: dict[str, str], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it against a stack, with boto3 pointed at the local endpoints."""
    endpoints = {
        "AWS_ENDPOINT_URL_CLOUDFORMATION": stack["aws"],
        "AWS_ENDPOINT_URL_SQS": stack["aws"],
        "AWS_ENDPOINT_URL_LAMBDA": stack["lambda"],
    }
    command = [sys.executable, "-m", "seckill_demo.flash_sale", "--endpoint", stack["api"], *args]
    return subprocess.run(  # noqa: S603 (our own command)
        command, capture_output=True, text=True, timeout=240, env={**os.environ, **endpoints, **env}, check=False
    )


def test_a_sale_against_the_endpoint_checks_what_can_be_seen_from_outside(
    stack: dict[str, str], tmp_path: Path, db: Database
) -> None:
    seed, report_file = secrets.randbelow(2**32), tmp_path / "report.json"
    result = flash_sale(
        stack, "--stack-name", stack["full"], "--users", "40", "--stock", "15", "--presses", "3",
        "--concurrency", "16", "--first-user", str(secrets.randbelow(10**9) + 1),
        "--shop-id", str(secrets.randbelow(10**12) + 10**6), "--json", str(report_file), "--seed", str(seed),
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}{result.stderr}\nreplay with --seed {seed}"
    report = json.loads(report_file.read_text())
    assert report["ok"] is True
    assert report["endpoint"] == stack["api"]
    assert (report["requests"], report["accepted"], report["confirmed"], report["failed"]) == (120, 15, 15, 0)
    assert report["mysql_stock"] == 0
    assert report["redis_stock"] is None
    assert report["reconciliation"] is None
    assert report["redelivered"] == 15
    assert {c["name"] for c in report["checks"]} == {
        "queue drained",
        "never oversold",
        "sold exactly the stock",
        "no more 202s than stock",
        "one order per user",
        "every 202 decided, none lost",
        "a 503 leaves no order",
        "re-delivery changes nothing",
        "nothing dead-lettered or poisoned",
        "the stop ends the sale",
    }
    assert set(report["not_checked"]) == {
        "no reservation left pending",
        "Redis stock equals MySQL stock",
        "never both confirmed and failed",
    }
    assert "Not checked from outside the stack" in result.stdout
    # What the report saw from outside is what MySQL holds: 15 orders, none twice, the voucher withdrawn.
    voucher_id = report["voucher_id"]
    orders = db_rows(db, "SELECT user_id FROM tb_voucher_order WHERE voucher_id = %s", voucher_id)
    assert len(orders) == len({row["user_id"] for row in orders}) == 15
    assert db_rows(db, "SELECT status FROM tb_voucher WHERE id = %s", voucher_id) == [{"status": 2}]


def test_admin_calls_signed_with_the_wrong_secret_are_refused(stack: dict[str, str]) -> None:
    result = flash_sale(stack, "--stack-name", stack["full"], "--users", "2", AWS_SECRET_ACCESS_KEY="not-the-secret")
    assert result.returncode == 1
    assert "creating the voucher failed: 403" in result.stderr
    assert "replay with --seed" in result.stderr


@pytest.mark.parametrize(
    ("which", "says"),
    [("no-such-stack", "cannot read stack 'no-such-stack'"), ("no-minter", "EnableTestTokens=true")],
)
def test_a_stack_it_cannot_use_is_a_usage_error(stack: dict[str, str], which: str, says: str) -> None:
    result = flash_sale(stack, "--stack-name", stack.get(which, which), "--users", "2")
    assert result.returncode == 2
    assert says in result.stderr


def test_endpoint_options_are_validated() -> None:
    for args, says in (
        (["--endpoint", "http://127.0.0.1:1"], "--endpoint and --stack-name go together"),
        (["--stack-name", "s"], "--endpoint and --stack-name go together"),
        (["--endpoint", "http://127.0.0.1:1", "--stack-name", "s", "--chaos"], "not with --endpoint"),
    ):
        done = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "seckill_demo.flash_sale", *args], capture_output=True, text=True, check=False
        )
        assert done.returncode == 2
        assert says in done.stderr

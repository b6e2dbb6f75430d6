"""The build artifact (``sam build`` into .aws-sam/build), as Lambda would run it.

``make test`` builds first; run alone, these tests build the artifact
themselves when it is missing or older than any of its sources, and fail
(never skip) when they cannot. The
layer must carry the ``seckill`` package and the Lua scripts byte for byte, and
every handler must import from the artifact alone (its code, the layer, the
runtime's boto3) and answer an event against the suite's Redis, MySQL and SQS.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from packaging.utils import canonicalize_name

from seckill.edge.state import EdgeState
from seckill.infra import keys
from seckill.infra.db import Credentials, connect
from seckill.tokens import mint_tokens, user_for_token
from seckill_local.checkout import ROOT
from seckill_local.edge import EdgeServer, local_kvs_client
from seckill_local.template import Template
from tests.helpers import body, closed_port, db_rows, load_event, new_user
from tests.locks import pins

ARTIFACT = ROOT / ".aws-sam" / "build"
SAM = ROOT / ".venv-sam" / "bin" / "sam"
INVOKER = Path(__file__).with_name("artifact_invoke.py")
# What the Python runtime brings itself (/var/runtime): the layer leaves them out.
RUNTIME_SDK = ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "dateutil", "six.py")
# Every function of the artifact has a test below that invokes it.
INVOKED = {
    "AuthorizerFunction",
    "SeckillApiFunction",
    "OrderPersisterFunction",
    "MigratorFunction",
    "TokenMinterFunction",
    "ReconcilerFunction",
    "OrderExpiryFunction",
    "EdgePublisherFunction",
    "DrawClockFunction",
}


# What the artifact is built from: a change to any of them makes it stale.
SOURCES = ("template.yaml", "network", "data", "edge", "functions", "layers", "lua")


def newest_source() -> float:
    paths = [ROOT / name for name in SOURCES]
    files = [p for path in paths for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file()]
    return max(p.stat().st_mtime for p in files if "__pycache__" not in p.parts)


@pytest.fixture(scope="session")
def built(template: Template) -> Template:
    """The built template; built here when missing or stale."""
    built_template = ARTIFACT / "template.yaml"
    if not built_template.is_file() or built_template.stat().st_mtime < newest_source():
        if not SAM.is_file():
            pytest.fail("no current build artifact and no SAM CLI: run `make build` (it installs .venv-sam)")
        env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
        subprocess.run([str(SAM), "build", "--region", "us-east-1"], cwd=ROOT, env=env, check=True, timeout=900)  # noqa: S603
    artifact = Template.load(built_template)
    missing = set(template.functions) - set(artifact.functions)
    assert not missing, f"the artifact predates {sorted(missing)}: run `make build`"
    return artifact


@pytest.fixture(scope="session")
def layer_dir(built: Template) -> Path:
    """The layer's content as Lambda mounts it under /opt."""
    content = built.resource("SeckillLayer")["Properties"]["ContentUri"]
    path = ARTIFACT / content
    assert path.is_dir(), path
    return path


@pytest.fixture(scope="session")
def runtime_python() -> str:
    """An interpreter of the template's runtime version (the layer's compiled wheels and
    bytecode are for it), found as layers/Makefile finds the one that builds them."""
    found = subprocess.run(  # noqa: S603
        ["make", "-s", "-C", str(ROOT / "layers"), "runtime-python"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        pytest.fail(f"no interpreter of the Lambda runtime's Python version: {found.stderr.strip()}")
    return found.stdout.strip()


@pytest.fixture(scope="session")
def runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for /var/runtime: links to this environment's boto3 and its dependencies."""
    site = Path(boto3.__file__).resolve().parents[1]
    folder = tmp_path_factory.mktemp("var-runtime")
    for name in RUNTIME_SDK:
        (folder / name).symlink_to(site / name)
    return folder


# --- what the artifact holds ------------------------------------------------------------------


def test_every_function_is_built_with_its_source_and_the_layer(built: Template, template: Template) -> None:
    assert set(built.functions) == set(template.functions)
    for logical_id, fn in built.functions.items():
        source = template.functions[logical_id].code_uri
        assert fn.code_uri.is_relative_to(ARTIFACT), logical_id
        for path in source.glob("*.py"):
            assert (fn.code_uri / path.name).read_bytes() == path.read_bytes(), f"{logical_id}: stale {path.name}"
    assert built.data["Globals"]["Function"]["Layers"] == [{"Ref": "SeckillLayer"}]


def test_the_nested_stacks_are_built_beside_the_template(built: Template, template: Template) -> None:
    """sam build copies each local nested template (the network, the data stores, the edge
    and its web ACL) into the artifact, where sam package finds it; the press function's
    code comes along intact."""
    assert set(built.nested) == set(template.nested) == {"NetworkStack", "DataStack", "EdgeStack"}
    for plain in ("NetworkStack", "DataStack"):
        assert built.nested[plain].data["Resources"] == template.nested[plain].data["Resources"], plain
    edge, source = built.nested["EdgeStack"], template.nested["EdgeStack"]
    assert set(edge.nested) == set(source.nested) == {"EdgeWebAcl"}
    assert edge.data["Resources"].keys() == source.data["Resources"].keys()
    code = edge.resource("EdgePressFunction")["Properties"]["FunctionCode"]
    assert code == (ROOT / "edge" / "press.js").read_text(encoding="utf-8")
    assert edge.nested["EdgeWebAcl"].data["Resources"] == source.nested["EdgeWebAcl"].data["Resources"]


def test_layer_carries_the_seckill_package(layer_dir: Path) -> None:
    package = ROOT / "layers" / "seckill"
    built_package = layer_dir / "python" / "seckill"
    sources = [path.relative_to(package) for path in [*package.rglob("*.py"), package / "schema.sql"]]
    assert len(sources) > 10
    for path in sources:
        built_file = built_package / path
        assert built_file.is_file(), f"{path} is not in the layer"
        assert built_file.read_bytes() == (package / path).read_bytes(), f"{path}: the layer is stale, run `make build`"


def test_layer_carries_the_lua_scripts_byte_for_byte(layer_dir: Path) -> None:
    sources = {path.name: path.read_bytes() for path in (ROOT / "lua").glob("*.lua")}
    built_scripts = {path.name: path.read_bytes() for path in (layer_dir / "python" / "seckill" / "lua").glob("*.lua")}
    assert {"gate.lua", "promise.lua", "release.lua", "settle.lua"} <= set(sources)
    assert built_scripts == sources


def test_layer_leaves_the_sdk_to_the_runtime(layer_dir: Path) -> None:
    python = layer_dir / "python"
    for name in RUNTIME_SDK:
        assert not (python / name).exists(), f"the layer would shadow the runtime's {name}"
    # What the layer must bring itself.
    for name in ("aws_lambda_powertools", "aws_xray_sdk", "redis", "hiredis", "pymysql", "pydantic", "pydantic_core"):
        assert (python / name).is_dir(), name


def frozen(folder: Path) -> dict[str, str]:
    """``pip freeze`` of the distributions installed in the folder: name (normalized) -> version."""
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "pip", "freeze", "--path", str(folder)], capture_output=True, text=True, check=True
    )
    return {canonicalize_name(name): version for name, version in (line.split("==") for line in done.stdout.split())}


def test_the_layer_and_every_function_hold_exactly_their_locks(
    built: Template, template: Template, layer_dir: Path
) -> None:
    assert frozen(layer_dir / "python") == pins(ROOT / "layers" / "requirements.txt")
    for logical_id, fn in built.functions.items():
        lock = template.functions[logical_id].code_uri / "requirements.txt"
        assert frozen(fn.code_uri) == (pins(lock) if lock.is_file() else {}), logical_id
    assert "awscrt" in frozen(built.functions["EdgePublisherFunction"].code_uri)


# --- each handler, from the artifact alone ----------------------------------------------------


Invoke = Callable[..., list[Any]]


@pytest.fixture
def invoke(
    built: Template,
    layer_dir: Path,
    runtime_dir: Path,
    runtime_python: str,
    tmp_path: Path,
    session_queues: dict[str, str],
) -> Invoke:
    """Runs the built function on events in a fresh interpreter; returns its answers."""

    def run(logical_id: str, events: list[dict[str, Any]], *, timeout: float | None = None, **env: str) -> list[Any]:
        fn = built.functions[logical_id]
        output = tmp_path / f"{logical_id}.out.json"
        plan = {
            "function_dir": str(fn.code_uri),
            "layer_dir": str(layer_dir / "python"),
            "runtime_dir": str(runtime_dir),
            "handler": fn.handler,
            "function_name": logical_id,
            "timeout": timeout or fn.timeout,
            "events": events,
            "output": str(output),
        }
        plan_file = tmp_path / f"{logical_id}.plan.json"
        plan_file.write_text(json.dumps(plan), encoding="utf-8")
        environment = {
            **os.environ,
            "ORDER_QUEUE_URL": session_queues["OrderQueue"],
            "ORDER_DLQ_URL": session_queues["OrderDeadLetterQueue"],
            "ORDER_EXPIRY_QUEUE_URL": session_queues["OrderExpiryQueue"],
            "AWS_LAMBDA_FUNCTION_NAME": logical_id,
            **env,
        }
        command = [runtime_python, "-I", "-S", "-B", str(INVOKER), str(plan_file)]
        done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=180, check=False)  # noqa: S603
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        report = json.loads(output.read_text(encoding="utf-8"))
        assert report["python"] == built.data["Globals"]["Function"]["Runtime"]
        # Imported from the artifact, not from this checkout or the test environment.
        modules = report["modules"]
        assert {"seckill", "aws_lambda_powertools"} <= set(modules)
        for name in ("seckill", "redis", "pymysql", "pydantic", "aws_lambda_powertools"):
            if name in modules:
                assert Path(modules[name]).is_relative_to(layer_dir), f"{name} from {modules[name]}"
        if "boto3" in modules:
            assert Path(modules["boto3"]).is_relative_to(runtime_dir)
        assert Path(report["lua_dir"]) == layer_dir / "python" / "seckill" / "lua"
        results: list[Any] = report["results"]
        return results

    return run


def test_all_built_functions_are_invoked_here(built: Template) -> None:
    assert set(built.functions) == INVOKED, "add a test invoking the new function from the artifact"


def test_authorizer_from_the_artifact(invoke: Invoke, redis: Any) -> None:
    user = new_user()
    token = mint_tokens(redis, [user], 60)[user]
    try:
        good = load_event("authorizer.json")
        good["headers"]["authorization"] = f"Bearer {token}"
        unknown = load_event("authorizer.json")
        unknown["headers"]["authorization"] = "Bearer " + secrets.token_hex(16)
        allowed, denied = invoke("AuthorizerFunction", [good, unknown])
    finally:
        redis.delete(keys.login_token(token))
    assert allowed == {"isAuthorized": True, "context": {"userId": str(user)}}
    assert denied == {"isAuthorized": False}


def test_api_and_persister_from_the_artifact(
    invoke: Invoke, make_voucher: Callable[..., int], order_queue: str, sqs: Any, db: Any
) -> None:
    press_and_persist(invoke, make_voucher, order_queue, sqs, db)


def press_and_persist(
    invoke: Invoke, make_voucher: Callable[..., int], order_queue: str, sqs: Any, db: Any
) -> tuple[int, int, int]:
    """A press through the built API function, then its message through the built
    persister beside a malformed one: the order id, voucher id and user."""
    voucher_id, user = make_voucher(stock=1, shop_id=7), new_user()
    seckill = load_event("seckill_api_seckill.json", pathParameters={"voucherId": str(voucher_id)})
    seckill["rawPath"] = seckill["requestContext"]["http"]["path"] = f"/voucher-order/seckill/{voucher_id}"
    seckill["requestContext"]["authorizer"] = {"lambda": {"userId": str(user)}}
    listing = load_event("seckill_api_list_vouchers.json", pathParameters={"shopId": "7"})
    listing["rawPath"] = listing["requestContext"]["http"]["path"] = "/voucher/list/7"
    stop = load_event("seckill_api_stop_voucher.json", pathParameters={"voucherId": str(voucher_id)})
    stop["rawPath"] = stop["requestContext"]["http"]["path"] = f"/voucher/seckill/{voucher_id}/stop"
    accepted, listed, stopped, unknown = invoke(
        "SeckillApiFunction", [seckill, listing, stop, load_event("seckill_api_stop_voucher.json")]
    )
    assert accepted["statusCode"] == 202, accepted
    order_id = body(accepted)["data"]
    assert accepted["headers"]["Location"] == f"/voucher-order/{order_id}"
    assert listed["statusCode"] == 200, listed
    assert voucher_id in [v["id"] for v in body(listed)["data"]]
    assert stopped["statusCode"] == 200, stopped
    assert unknown["statusCode"] == 404, unknown  # the sample's voucher 1 is no seckill voucher here

    # The message the API queued, delivered to the built persister with a malformed one.
    (message,) = sqs.receive_message(QueueUrl=order_queue, WaitTimeSeconds=2)["Messages"]
    assert json.loads(message["Body"])["orderId"] == order_id
    batch = load_event("order_persister_batch.json")
    good, bad = batch["Records"]
    good.update(messageId=message["MessageId"], body=message["Body"])
    bad.update(body="not json")
    (answer,) = invoke("OrderPersisterFunction", [batch])
    assert answer == {"batchItemFailures": [{"itemIdentifier": bad["messageId"]}]}
    # As the event source mapping does after a success: else it is back in a second (the
    # session queues' visibility) and the next test receives it instead of its own.
    sqs.delete_message(QueueUrl=order_queue, ReceiptHandle=message["ReceiptHandle"])
    (row,) = db_rows(db, "SELECT user_id, voucher_id FROM tb_voucher_order WHERE id = %s", int(order_id))
    assert (row["user_id"], row["voucher_id"]) == (user, voucher_id)
    return int(order_id), voucher_id, user


def test_expiry_from_the_artifact(
    invoke: Invoke,
    make_voucher: Callable[..., int],
    order_queue: str,
    session_queues: dict[str, str],
    sqs: Any,
    db: Any,
    redis: Any,
) -> None:
    """The built persister puts the order's expiry on its queue (delayed until payBy); once
    the deadline has passed, the built OrderExpiryFunction expires the order and gives
    its unit back, in MySQL and in Redis."""
    order_id, voucher_id, user = press_and_persist(invoke, make_voucher, order_queue, sqs, db)
    queued = sqs.get_queue_attributes(
        QueueUrl=session_queues["OrderExpiryQueue"], AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )
    assert int(queued["Attributes"]["ApproximateNumberOfMessagesDelayed"]) >= 1  # delayed until its payBy
    db.run(
        lambda cursor: cursor.execute(
            "UPDATE tb_voucher_order SET pay_by = NOW(3) - INTERVAL 1 SECOND WHERE id = %s", (order_id,)
        )
    )
    record = load_event("order_expiry.json")["Records"][0]
    record["body"] = json.dumps(
        {"orderId": str(order_id), "voucherId": voucher_id, "userId": user, "payBy": "2026-01-01T00:00:00Z"}
    )
    (answer,) = invoke("OrderExpiryFunction", [{"Records": [record]}])
    assert answer == {"batchItemFailures": []}
    (row,) = db_rows(db, "SELECT status, close_reason FROM tb_voucher_order WHERE id = %s", order_id)
    assert (row["status"], row["close_reason"]) == (4, "EXPIRED")
    (voucher,) = db_rows(db, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %s", voucher_id)
    assert voucher["stock"] == 1
    assert redis.sismember(keys.returned(voucher_id), str(order_id))
    assert redis.get(keys.stock(voucher_id)) == "1"


def test_token_minter_from_the_artifact(invoke: Invoke, redis: Any) -> None:
    user = new_user()
    minted, refused = invoke("TokenMinterFunction", [{"userIds": [user], "ttlSeconds": 60}, {"userIds": []}])
    token = minted["tokens"][str(user)]
    try:
        assert user_for_token(redis, token) == user
        assert 0 < redis.ttl(keys.login_token(token)) <= 60
    finally:
        redis.delete(keys.login_token(token))
    assert "userIds" in refused["error"]


def test_draw_clock_from_the_artifact(invoke: Invoke) -> None:
    """Its module and handler run from the artifact: a malformed record is a batch item failure."""
    event = load_event("draw_clock.json")
    event["Records"][0].update(messageId="bad", body='{"voucherId": "x"}')
    (answer,) = invoke("DrawClockFunction", [event])
    assert answer == {"batchItemFailures": [{"itemIdentifier": "bad"}]}


def test_reconciler_from_the_artifact(invoke: Invoke, make_voucher: Callable[..., int], gate: Any, redis: Any) -> None:
    """On schedule (2 minutes) it leaves a minute-old reservation alone; asked with 30 s it
    fails its order and releases it."""
    voucher_id, user = make_voucher(stock=2), new_user()
    reservation = gate.reserve(voucher_id, user, secrets.token_hex(8))  # then the function died: no 202
    redis.hset(
        keys.pending(voucher_id),
        str(user),
        f"{reservation.accepted_ms - 60_000}:{reservation.token}:{reservation.order_id}",
    )
    scheduled, on_demand = invoke(
        "ReconcilerFunction", [load_event("reconciler_scheduled.json"), {"pendingAgeSeconds": 30}]
    )
    ours = [v for v in scheduled["vouchers"] if v["voucher_id"] == voucher_id]
    assert ours
    assert ours[0]["failed"] == []
    (ours,) = [v for v in on_demand["vouchers"] if v["voucher_id"] == voucher_id]
    assert ours["failed"] == [str(reservation.order_id)]
    assert redis.get(keys.stock(voucher_id)) == "2"
    assert not redis.sismember(keys.buyers(voucher_id), user)


class Replies:
    """CloudFormation's side of a custom resource: a server taking the PUT replies."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        replies = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                length = int(self.headers["Content-Length"])
                replies.received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/reply"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def replies() -> Iterator[Replies]:
    server = Replies()
    yield server
    server.close()


def custom_resource_event(name: str, url: str) -> dict[str, Any]:
    event = load_event(name)
    event["ResponseURL"] = url
    return event


def test_migrator_from_the_artifact_answers_cloudformation(
    invoke: Invoke, replies: Replies, creds: Credentials
) -> None:
    database = f"seckill_artifact_{secrets.token_hex(4)}"
    create = custom_resource_event("migrator_create.json", replies.url)
    delete = custom_resource_event("migrator_delete.json", replies.url)
    try:
        created, deleted = invoke("MigratorFunction", [create, delete], DB_NAME=database)
        conn = connect(Credentials(creds.host, creds.port, creds.user, creds.password, database))
        with conn.cursor() as cursor:
            cursor.execute("SHOW TABLES")
            tables = {next(iter(row.values())) for row in cursor.fetchall()}
        conn.close()
    finally:
        conn = connect(creds, database=False)
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
        conn.close()
    assert {"tb_voucher", "tb_seckill_voucher", "tb_voucher_order"} <= tables
    assert created["Status"] == deleted["Status"] == "SUCCESS"
    first, second = replies.received
    assert first["Status"] == "SUCCESS"
    assert first["PhysicalResourceId"] == f"seckill-schema-{database}"
    assert (first["StackId"], first["RequestId"], first["LogicalResourceId"]) == (
        create["StackId"],
        create["RequestId"],
        "Schema",
    )
    assert second["Status"] == "SUCCESS"
    assert second["PhysicalResourceId"] == delete["PhysicalResourceId"]


def test_migrator_reports_a_failure_instead_of_hanging(invoke: Invoke, replies: Replies, creds: Credentials) -> None:
    create = custom_resource_event("migrator_create.json", replies.url)
    # A short deadline: the first failure is past it, so no retries.
    (answer,) = invoke("MigratorFunction", [create], timeout=16, DB_PORT=str(closed_port()))
    assert answer["Status"] == "FAILED"
    (reply,) = replies.received
    assert reply["Status"] == "FAILED"
    assert "OperationalError" in reply["Reason"]


def test_edge_publisher_from_the_artifact(invoke: Invoke) -> None:
    """The built publisher, its awscrt (SigV4A) from its own artifact and boto3 from the
    runtime, writes the newer of the sample's two states to the local KeyValueStore."""
    sample = load_event("edge_publisher.json")
    newer, older = (EdgeState.from_message(r["body"]) for r in sample["Records"])
    assert newer.v > older.v
    with EdgeServer(f"http://127.0.0.1:{closed_port()}") as edge:
        (answer,) = invoke("EdgePublisherFunction", [sample], **edge.environment())
        stored = local_kvs_client(edge.kvs_endpoint).get_key(KvsARN=edge.kvs_arn, Key=newer.key)["Value"]
    assert answer == {"batchItemFailures": []}
    assert stored == newer.value()

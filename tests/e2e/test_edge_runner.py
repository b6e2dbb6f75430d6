"""``seckill-local start-api --edge``: the local edge in front of the runner's own HTTP API,
as a user starts it. What the edge does not answer is answered by the API; what it
answers never reaches the API; and a route the edge serves called on the API's own
port, around the edge, is refused (the origin header only the edge adds)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import urllib3

from seckill.edge import passkeys
from seckill.edge.passkeys import Held
from seckill.edge.publisher import Publisher
from seckill.edge.state import claim
from seckill.infra import keys
from seckill.infra.db import Credentials
from seckill.infra.lua_scripts import Scripts
from seckill.passes import KeyRing
from seckill_demo.forged import forged_passes
from seckill_local import secrets as local_secrets
from seckill_local.checkout import ROOT
from seckill_local.edge import KVS_ARN, local_kvs_client
from seckill_local.lambdas import DEV_PASS_KEYS, local_parameters
from seckill_local.ports import free_port
from seckill_local.sqs import ensure_queues
from seckill_local.template import Template
from tests.e2e.test_deployed_sale import SECKILL_LOCAL, wait_ready
from tests.e2e.test_local_runner import delete_queues_with_prefix
from tests.helpers import iso, new_user, seckill_voucher_body, signed

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def fronted(
    tmp_path_factory: pytest.TempPathFactory, creds: Credentials, sqs_endpoint: str, sqs: Any, template: Template
) -> Iterator[dict[str, str]]:
    """start-api --edge on ports of its own: the API's URL, the edge's and its store's."""
    prefix = f"g{uuid.uuid4().hex[:10]}-"
    queues = ensure_queues(sqs, template, prefix=prefix, visibility_timeout=2)
    env_file = tmp_path_factory.mktemp("edge") / "env.json"
    env_file.write_text(json.dumps({"Parameters": local_parameters(os.environ["REDIS_URL"], creds)}), encoding="utf-8")
    api, edge, kvs = (free_port() for _ in range(3))
    command = [
        *(str(SECKILL_LOCAL), "start-api", "--edge", "--containers", "1"),
        *("--port", str(api), "--edge-port", str(edge), "--kvs-port", str(kvs)),
        *("--env-vars", str(env_file), "--sqs-endpoint", sqs_endpoint, "--queue-prefix", prefix),
    ]
    # Our own command; its output is the user's, not the test's.
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    urls = {"api": f"http://127.0.0.1:{api}", "edge": f"http://127.0.0.1:{edge}", "kvs": f"http://127.0.0.1:{kvs}"}
    try:
        http = urllib3.PoolManager(retries=False, timeout=2)
        wait_ready(process, lambda: http.request("GET", f"{urls['edge']}/voucher/list/1").status == 200, "the edge")
        yield urls
    finally:
        process.terminate()
        process.wait(timeout=30)
        for url in queues.values():
            sqs.delete_queue(QueueUrl=url)


def test_the_edge_passes_on_what_it_does_not_answer_and_answers_a_sold_out_press_itself(
    fronted: dict[str, str], mint: Callable[[int], str]
) -> None:
    http = urllib3.PoolManager(retries=False, timeout=30)
    token = mint(new_user())
    voucher_id = int(time.time() * 1000)  # a voucher no one made

    def both(method: str, target: str, **kwargs: Any) -> list[tuple[int, str | None, bytes]]:
        """The answer through the edge, then on the API's own port."""
        answers = [http.request(method, f"{fronted[side]}{target}", **kwargs) for side in ("edge", "api")]
        return [(a.status, a.headers.get("x-seckill-edge"), a.data) for a in answers]

    forbidden = (403, None, b'{"message":"Forbidden"}')
    # The public routes the edge forwards: answered through it, refused around it.
    listed = both("GET", "/voucher/list/1?current=1")
    assert listed[0][0] == 200
    assert listed[1] == forbidden
    record = both("GET", f"/voucher/seckill/{voucher_id}/draw")
    assert record[0][0] == 404  # VOUCHER_NOT_FOUND, from the function
    assert record[1] == forbidden
    pressed = both("POST", f"/voucher-order/seckill/{voucher_id}", headers={"authorization": token})
    assert pressed[0][0] == 404  # VOUCHER_NOT_FOUND, from the function
    assert pressed[1] == forbidden  # around the edge

    kvs = local_kvs_client(fronted["kvs"])
    now = int(time.time() * 1000)
    value = {"v": 1, "begin": now - 60_000, "end": now + 3_600_000, "soldOut": True, "stopped": False}
    etag = kvs.describe_key_value_store(KvsARN=KVS_ARN)["ETag"]
    kvs.put_key(KvsARN=KVS_ARN, Key=str(voucher_id), Value=json.dumps(value), IfMatch=etag)

    edge, api = both("POST", f"/voucher-order/seckill/{voucher_id}", headers={"authorization": token})
    assert edge[:2] == (409, "1")
    assert json.loads(edge[2])["code"] == "SOLD_OUT"
    assert api == forbidden
    stats = json.loads(http.request("GET", f"{fronted['kvs']}/__edge/stats").data)
    assert (stats["answered"], stats["failed"]) == (1, 0)


def test_the_publishers_schedule_puts_the_pass_keys_in_the_edges_store(
    fronted: dict[str, str], tmp_path: Path, creds: Credentials, sqs_endpoint: str, sqs: Any
) -> None:
    """``schedule --once --edge``: EdgePublisherFunction's minute schedule, the ring's keys
    (SECKILL_PASS_KEYS) copied to `pass-keys` without `active`, and confirmed as held in
    the run's PassKeysHeldSecret on the moto server."""
    ring = {"active": "k2", "keys": {"k1": "a1" * 32, "k2": "b2" * 32}}
    env_file = tmp_path / "env.json"
    parameters = local_parameters(os.environ["REDIS_URL"], creds) | {"SECKILL_PASS_KEYS": json.dumps(ring)}
    env_file.write_text(json.dumps({"Parameters": parameters}), encoding="utf-8")
    prefix = f"p{uuid.uuid4().hex[:8]}-"
    command = [str(SECKILL_LOCAL), "schedule", "--once", "--edge", "--kvs-endpoint", fronted["kvs"]]
    command += ["--env-vars", str(env_file), "--sqs-endpoint", sqs_endpoint, "--queue-prefix", prefix]
    manager = local_secrets.client(sqs_endpoint)
    try:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)  # noqa: S603
        assert done.returncode == 0, done.stderr
        held = Held.from_json(manager.get_secret_value(SecretId=f"{prefix}PassKeysHeldSecret")["SecretString"])
    finally:
        delete_queues_with_prefix(sqs, prefix)
        with contextlib.suppress(manager.exceptions.ResourceNotFoundException):
            manager.delete_secret(SecretId=f"{prefix}PassKeysHeldSecret", ForceDeleteWithoutRecovery=True)
    ran = {json.loads(line)["function"] for line in done.stdout.splitlines() if line.startswith("{")}
    assert ran == {"ReconcilerFunction", "EdgePublisherFunction"}
    kvs = local_kvs_client(fronted["kvs"])
    stored = kvs.get_key(KvsARN=KVS_ARN, Key="pass-keys")["Value"]
    assert json.loads(stored) == {"keys": ring["keys"], "v": 0}
    assert sorted(held.keys) == ["k1", "k2"]


def test_the_edge_answers_every_draw_refusal_as_the_function_does(
    fronted: dict[str, str], mint: Callable[[int], str], redis: Any, scripts: Scripts
) -> None:
    """Each draw refusal answered at the edge, then the same press forwarded (the store
    without the voucher's entry: the edge unsure) and answered by the local API and its
    function: the same status, content type and body, byte for byte."""
    http = urllib3.PoolManager(retries=False, timeout=30)
    kvs = local_kvs_client(fronted["kvs"])
    publisher = Publisher(kvs, KVS_ARN)
    passkeys.publish(publisher, passkeys.value(KeyRing.from_json(DEV_PASS_KEYS)))  # the local API's ring
    user_id = new_user()
    token = mint(user_id)
    now = datetime.now(UTC)
    body = seckill_voucher_body(
        new_user(),
        stock=1,
        beginTime=iso(now + timedelta(hours=1)),
        endTime=iso(now + timedelta(hours=2)),
        admission="draw",
        drawCloseSeconds=60,
    )
    url, data = f"{fronted['api']}/voucher/seckill", json.dumps(body).encode()
    created = http.request(
        "POST", url, body=data, headers=signed("POST", url, data, {"content-type": "application/json"})
    )
    assert created.status == 201, created.data
    voucher_id = json.loads(created.data)["data"]
    press = f"{fronted['edge']}/voucher-order/seckill/{voucher_id}"
    try:
        entered = http.request("POST", f"{press}/entry", headers={"authorization": token})
        assert entered.status == 200, entered.data
        entry = json.loads(entered.data)["data"]
        shown = entry["pass"]
        forged = forged_passes(voucher_id, user_id, token, entry["ticket"], shown.split(".")[0], time.time())

        def both(headers: dict[str, str]) -> list[tuple[int, str, bytes]]:
            """The press answered at the edge, then by the function behind it."""
            state = claim(scripts, voucher_id, again=True)
            assert state is not None
            publisher.publish([state])
            at_edge = http.request("POST", press, headers=headers)
            assert at_edge.headers.get("x-seckill-edge") == "1", at_edge.data
            etag = kvs.describe_key_value_store(KvsARN=KVS_ARN)["ETag"]
            kvs.delete_key(KvsARN=KVS_ARN, Key=str(voucher_id), IfMatch=etag)
            behind = http.request("POST", press, headers=headers)
            assert behind.headers.get("x-seckill-edge") is None, behind.data
            return [(a.status, a.headers["content-type"], a.data) for a in (at_edge, behind)]

        with_pass = {"authorization": token, "x-seckill-pass": shown}
        now_ms = int(time.time() * 1000)
        seen: dict[str, bytes] = {}

        def closed() -> None:
            """The draw closed 20 s ago admitting no one, every move decided for ten minutes."""
            redis.hset(keys.window(voucher_id), mapping={"close": now_ms - 20_000, "decided": now_ms + 600_000})
            redis.zadd(keys.cursor(voucher_id), {"0" * 17: now_ms - 20_000})

        # Each step leaves the sale where the next refusal is the first that applies.
        steps: list[tuple[str, dict[str, str], Callable[[], object]]] = [
            ("UNAUTHORIZED", {}, lambda: None),
            ("NO_PASS", {"authorization": token}, lambda: None),
            # A forged signature, whatever the expiry it claims.
            *(("NO_PASS", {"authorization": token, "x-seckill-pass": f}, lambda: None) for f in forged.values()),
            ("NOT_ADMITTED", with_pass, closed),
            # Then a wave admitted everyone; a pass shown with a space after it is the same pass.
            ("NOT_STARTED", with_pass, lambda: redis.zadd(keys.cursor(voucher_id), {"1" + "f" * 16: now_ms - 10_000})),
            ("NOT_STARTED", {**with_pass, "x-seckill-pass": f"{shown} "}, lambda: None),
            # Opened a minute ago, and the unit sold.
            ("SOLD_OUT", with_pass, lambda: (redis.hset(keys.window(voucher_id), "begin", now_ms - 60_000),
                                              redis.set(keys.stock(voucher_id), 0))),
        ]  # fmt: skip
        for code, headers, make in steps:
            make()
            at_edge, behind = both(headers)
            assert at_edge == behind, code
            seen[code] = at_edge[2]
        stop = f"{fronted['api']}/voucher/seckill/{voucher_id}/stop"
        assert http.request("POST", stop, headers=signed("POST", stop)).status == 200
        at_edge, behind = both(with_pass)
        assert at_edge == behind
        seen["ENDED"] = at_edge[2]
    finally:
        redis.delete(*keys.gate_keys(voucher_id), keys.edge(voucher_id))
    assert seen.pop("UNAUTHORIZED") == b'{"message":"Unauthorized"}'
    assert {code: json.loads(answer)["code"] for code, answer in seen.items()} == {code: code for code in seen}

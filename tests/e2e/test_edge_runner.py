"""``seckill-local start-api --edge``: the local edge in front of the runner's own HTTP API,
as a user starts it. What the edge does not answer is answered by the API; what it
answers never reaches the API; and a user route called on the API's own port, around
the edge, is refused (the origin header only the edge adds)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

from seckill.infra.db import Credentials
from seckill_local.checkout import ROOT
from seckill_local.edge import KVS_ARN, local_kvs_client
from seckill_local.lambdas import local_parameters
from seckill_local.ports import free_port
from seckill_local.sqs import ensure_queues
from seckill_local.template import Template
from tests.e2e.test_deployed_sale import SECKILL_LOCAL, wait_ready
from tests.helpers import new_user

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

    listed = both("GET", "/voucher/list/1?current=1")
    assert listed[0] == listed[1]
    assert listed[0][0] == 200
    forbidden = (403, None, b'{"message":"Forbidden"}')
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

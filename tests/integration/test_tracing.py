"""With tracing on (in Lambda, POWERTOOLS_TRACE_DISABLED unset), a sampled press is traced
by the X-Ray SDK as before: its segments reach the daemon's address, read here from UDP.
With tracing off, the functions run without the SDK (test_imports) and every other test
exercises that path."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

from seckill_local.template import Template
from tests.helpers import load_event, new_user

PRESS = """
import json, sys
sys.path.insert(0, sys.argv[1])
import app
from seckill_local.lambdas import LocalContext
response = app.lambda_handler(json.loads(sys.argv[2]), LocalContext("SeckillApiFunction", 5))
print(json.dumps(response))
"""


def documents(server: socket.socket, deadline: float) -> list[dict[str, Any]]:
    """Every segment document the SDK sent (a header line, then the document)."""
    found = []
    while time.monotonic() < deadline:
        try:
            packet = server.recv(65536)
        except TimeoutError:
            break
        found.append(json.loads(packet.decode().split("\n", 1)[1]))
    return found


def test_a_sampled_press_is_traced_with_its_annotations(template: Template, session_queues: dict[str, str]) -> None:
    fn = template.functions["SeckillApiFunction"]
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(2)
    port = server.getsockname()[1]
    event = load_event("seckill_api_seckill.json")
    event["requestContext"]["authorizer"] = {"lambda": {"userId": str(new_user())}}
    event["pathParameters"] = {"voucherId": "abc"}  # a 400, answered before Redis is asked
    env = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
    env.update(
        {
            "LAMBDA_TASK_ROOT": str(fn.code_uri),
            "ORDER_QUEUE_URL": session_queues["OrderQueue"],
            "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{port}",
            "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
        }
    )
    try:
        done = subprocess.run(  # noqa: S603
            [sys.executable, "-c", PRESS, str(fn.code_uri), json.dumps(event)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.splitlines()[-1])["statusCode"] == 400
        sent = documents(server, time.monotonic() + 10)
    finally:
        server.close()
    handler = [d for d in sent if d.get("name") == "## traced_handler"]
    assert len(handler) == 1, sent
    annotations = handler[0]["annotations"]
    assert annotations["route"] == event["routeKey"]
    assert annotations["status"] == 400
    assert annotations["refusal"] == "BAD_REQUEST"

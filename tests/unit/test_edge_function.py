"""edge/press.js, the CloudFront Function: its node:test suite (tests/unit/edge/) run
as part of the unit tests, and its three refusals checked against the Lambda's."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from seckill import passes
from seckill.edge import passkeys
from seckill.infra import results
from seckill.passes import KeyRing
from seckill.press.gate import ENDED, NO_PASS, NOT_ADMITTED, NOT_STARTED, REFUSALS, SOLD_OUT
from seckill_local.api import gateway
from seckill_local.checkout import ROOT
from seckill_local.node import MISSING, node

HARNESS = ROOT / "tests" / "unit" / "edge" / "harness.mjs"

# Prints the function's answer to a press on a voucher in each refusing state; the draw's
# with a pass the service signed (seckill.passes) and its key ring's keys in the store.
ANSWERS = """
import { NOW, drawState, edge, request, state } from %s;
const [pass, passKeys, token] = JSON.parse(process.argv[1]);
const cases = {
  NOT_STARTED: [state({ begin: NOW + 60000, end: NOW + 120000 }), {}],
  ENDED: [state({ begin: NOW - 120000, end: NOW - 60000 }), {}],
  SOLD_OUT: [state({ soldOut: true }), {}],
  UNAUTHORIZED: [drawState(), { token: null, pass }],
  NO_PASS: [drawState(), { token, pass: pass.replace(/.$/, (c) => (c === 'A' ? 'B' : 'A')) }],
  NOT_ADMITTED: [drawState({ moves: [[NOW - 10000, '0'.repeat(17)]] }), { token, pass }],
  DRAW_SOLD_OUT: [drawState({ soldOut: true, moves: [[NOW - 10000, 'f'.repeat(17)]] }), { token, pass }],
};
const answers = {};
for (const [code, [value, options]] of Object.entries(cases)) {
  const { handler } = edge({ entries: { 42: value, 'pass-keys': passKeys } });
  answers[code] = await handler(request(options));
}
console.log(JSON.stringify(answers));
"""
TOKEN = "a-login-token-of-user-7"
RING = KeyRing("k9", {"k1": bytes(range(32)), "k9": bytes(range(32, 64))})


def node_or_fail() -> Path:
    found = node()
    if found is None:
        pytest.fail(MISSING)
    return found


def run_node(*args: str) -> subprocess.CompletedProcess[str]:
    # Our own fixed command line.
    return subprocess.run(  # noqa: S603
        [str(node_or_fail()), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_node_suite_passes() -> None:
    done = run_node("--test", "tests/unit/edge/*.test.mjs")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "# pass 0\n" not in done.stdout, "the glob found no test file"


@pytest.fixture(scope="module")
def edge_answers() -> dict[str, Any]:
    script = ANSWERS % json.dumps(HARNESS.as_uri())
    # The harness's clock (NOW) is 2026-12-01 12:00 UTC: the pass is valid an hour past it.
    exp = int(datetime(2026, 12, 1, 13, tzinfo=UTC).timestamp())
    pass_ = passes.sign(RING, 42, 7, TOKEN, "0" + "c" * 16, exp)
    arguments = json.dumps([pass_, passkeys.value(RING), f"Bearer {TOKEN}"])
    done = run_node("--input-type=module", "-e", script, arguments)
    assert done.returncode == 0, done.stderr
    answers: dict[str, Any] = json.loads(done.stdout)
    return answers


@pytest.mark.parametrize("gate_code", [NOT_STARTED, ENDED, SOLD_OUT], ids=lambda code: REFUSALS[code].code)
def test_the_edge_refuses_as_the_lambda_does(edge_answers: dict[str, Any], gate_code: int) -> None:
    refusal = REFUSALS[gate_code]
    lambda_answer = results.refusal(refusal.status, refusal.code, refusal.message)
    edge_answer = edge_answers[refusal.code]
    assert edge_answer["statusCode"] == lambda_answer["statusCode"] == 409
    assert edge_answer["body"] == {"encoding": "text", "data": lambda_answer["body"]}
    assert edge_answer["headers"]["content-type"]["value"] == lambda_answer["headers"]["Content-Type"]
    assert edge_answer["headers"]["x-seckill-edge"] == {"value": "1"}


@pytest.mark.parametrize("gate_code", [NO_PASS, NOT_ADMITTED], ids=lambda code: REFUSALS[code].code)
def test_the_edge_refuses_a_draw_as_the_lambda_does(edge_answers: dict[str, Any], gate_code: int) -> None:
    refusal = REFUSALS[gate_code]
    lambda_answer = results.refusal(refusal.status, refusal.code, refusal.message)
    edge_answer = edge_answers[refusal.code]
    assert edge_answer["statusCode"] == lambda_answer["statusCode"]
    assert edge_answer["body"] == {"encoding": "text", "data": lambda_answer["body"]}
    assert edge_answer["headers"]["content-type"]["value"] == lambda_answer["headers"]["Content-Type"]
    assert edge_answer["headers"]["x-seckill-edge"] == {"value": "1"}


def test_the_edge_verifies_the_services_pass(edge_answers: dict[str, Any]) -> None:
    """A pass seckill.passes signed, with a key of the ring that is not the first: through
    to the sale's own state (sold out), where a pass changed by one character is NO_PASS."""
    assert json.loads(edge_answers["DRAW_SOLD_OUT"]["body"]["data"])["code"] == "SOLD_OUT"


def test_the_edges_401_is_the_local_api_gateways(edge_answers: dict[str, Any]) -> None:
    status, headers, body = gateway(401, "Unauthorized")
    answer = edge_answers["UNAUTHORIZED"]
    assert (answer["statusCode"], answer["body"]["data"].encode()) == (status, body)
    assert answer["headers"]["content-type"]["value"] == headers["content-type"]

"""edge/press.js, the CloudFront Function: its node:test suite (tests/unit/edge/) run
as part of the unit tests, and its three refusals checked against the Lambda's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from seckill.infra import results
from seckill.press.gate import ENDED, NOT_STARTED, REFUSALS, SOLD_OUT
from seckill_local.checkout import ROOT
from seckill_local.node import MISSING, node

HARNESS = ROOT / "tests" / "unit" / "edge" / "harness.mjs"

# Prints the function's answer to a press on a voucher in each refusing state.
ANSWERS = """
import { NOW, edge, request, state } from %s;
const cases = {
  NOT_STARTED: { begin: NOW + 60000, end: NOW + 120000 },
  ENDED: { begin: NOW - 120000, end: NOW - 60000 },
  SOLD_OUT: { soldOut: true },
};
const answers = {};
for (const [code, fields] of Object.entries(cases)) {
  answers[code] = await edge({ entries: { 42: state(fields) } }).handler(request());
}
console.log(JSON.stringify(answers));
"""


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
    done = run_node("--input-type=module", "-e", script)
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

"""A cold start imports only what the function uses: each handler module is imported in
a fresh interpreter, as Lambda's init does, and its ``sys.modules`` is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from seckill_local.template import Template

IMPORT = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
importlib.import_module("app")
print(json.dumps(sorted(sys.modules)))
"""

# Never imported at init, by function. boto3 only to send (the SQS client is made at the
# first send) or to read a secret (at the first connection). The X-Ray SDK's recorder, and
# botocore's session with it (its sampling rules' client), only in the functions that trace,
# and there only when tracing is on (the suite runs with it off).
XRAY = {"aws_xray_sdk.core", "botocore.session"}
UNUSED_AT_INIT: dict[str, set[str]] = {
    "AuthorizerFunction": {"boto3", "botocore.session", "pymysql", "pydantic", "aws_xray_sdk", "snapshot_restore_py"},
    "SeckillApiFunction": {"boto3", "snapshot_restore_py", *XRAY},
    "OrderPersisterFunction": {"boto3", "pydantic", "snapshot_restore_py", *XRAY},
    # pydantic comes with seckill.holds (the payment's body model).
    "OrderExpiryFunction": {"boto3", "snapshot_restore_py", *XRAY},
    "TokenMinterFunction": {"boto3", "botocore.session", "pymysql", "pydantic", "aws_xray_sdk"},
    "MigratorFunction": {"boto3", "botocore.session", "redis", "pydantic", "aws_xray_sdk"},
    "ReconcilerFunction": {"boto3", "snapshot_restore_py", *XRAY},
    "DrawClockFunction": {"boto3", "snapshot_restore_py", *XRAY},
    # Outside the VPC, its KeyValueStore client made at init: neither Redis nor MySQL.
    "EdgePublisherFunction": {"redis", "pymysql", "pydantic", "aws_xray_sdk", "snapshot_restore_py"},
}
TRACED = (
    "SeckillApiFunction",
    "OrderPersisterFunction",
    "OrderExpiryFunction",
    "ReconcilerFunction",
    "DrawClockFunction",
)


def imported(template: Template, logical_id: str, **env: str) -> set[str]:
    fn = template.functions[logical_id]
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", IMPORT, str(fn.code_uri)],
        env={**os.environ, "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_every_function_is_checked(template: Template) -> None:
    assert set(UNUSED_AT_INIT) == set(template.functions)


@pytest.mark.parametrize("logical_id", sorted(UNUSED_AT_INIT))
def test_init_imports_nothing_the_function_does_not_use(
    template: Template, logical_id: str, session_queues: dict[str, str]
) -> None:
    modules = imported(template, logical_id, ORDER_QUEUE_URL=session_queues["OrderQueue"])
    assert "seckill" in modules  # the scan sees the function's own imports
    assert not modules & UNUSED_AT_INIT[logical_id]


@pytest.mark.parametrize("logical_id", TRACED)
def test_with_tracing_on_in_lambda_the_tracer_is_xrays(
    template: Template, logical_id: str, session_queues: dict[str, str]
) -> None:
    """Tracing left on (POWERTOOLS_TRACE_DISABLED unset, in Lambda): Powertools' Tracer with
    the X-Ray recorder, and the SQL and AWS calls patched, as before the SDK was made optional."""
    check = (
        "import app; from aws_xray_sdk.core import xray_recorder;"
        " from aws_xray_sdk.core.patcher import _PATCHED_MODULES;"
        " assert not app.tracer.disabled and app.tracer.provider is xray_recorder, app.tracer.provider;"
        " assert {'botocore'} <= _PATCHED_MODULES, _PATCHED_MODULES"
    )
    fn = template.functions[logical_id]
    env = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", f"import sys; sys.path.insert(0, sys.argv[1]); {check}", str(fn.code_uri)],
        env={**env, "LAMBDA_TASK_ROOT": str(fn.code_uri), "ORDER_QUEUE_URL": session_queues["OrderQueue"]},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_snapstart_init_makes_the_sqs_client_before_the_snapshot(
    template: Template, session_queues: dict[str, str]
) -> None:
    """Under SnapStart the snapshot holds what init made: boto3 and the SQS client too,
    and the runtime's hooks library is used to re-open connections after a restore."""
    modules = imported(
        template,
        "SeckillApiFunction",
        AWS_LAMBDA_INITIALIZATION_TYPE="snap-start",
        ORDER_QUEUE_URL=session_queues["OrderQueue"],
    )
    assert {"boto3", "snapshot_restore_py"} <= modules

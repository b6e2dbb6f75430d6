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
# first send) or to read a secret (at the first connection). botocore's session comes with
# the X-Ray SDK (its sampling rules' client) in the functions that trace, and only there.
UNUSED_AT_INIT: dict[str, set[str]] = {
    "AuthorizerFunction": {"boto3", "botocore.session", "pymysql", "pydantic", "aws_xray_sdk", "snapshot_restore_py"},
    "SeckillApiFunction": {"boto3", "snapshot_restore_py"},
    "OrderPersisterFunction": {"boto3", "pydantic", "snapshot_restore_py"},
    "TokenMinterFunction": {"boto3", "botocore.session", "pymysql", "pydantic", "aws_xray_sdk"},
    "MigratorFunction": {"boto3", "botocore.session", "redis", "pydantic", "aws_xray_sdk"},
    "ReconcilerFunction": {"snapshot_restore_py"},
}


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

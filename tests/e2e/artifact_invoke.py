"""Invoke one handler of the built artifact as the Lambda runtime would.

Run by tests/e2e/test_artifact.py as ``python -I -S -B artifact_invoke.py PLAN``:
no site-packages and no PYTHONPATH, so imports resolve only from the paths
Lambda would give the function, in its order: the function's code (/var/task),
the layer (/opt/python), then the runtime's own SDK (/var/runtime, stood in for
by a folder of links to boto3 and its dependencies). Writes one JSON document
to the plan's output file (stdout carries the handlers' logs): each event's
result, and where the modules that matter were imported from.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

WATCHED = ("seckill", "redis", "pymysql", "pydantic", "aws_lambda_powertools", "boto3")


class Context:
    """The parts of Lambda's context object that handlers and Powertools read."""

    def __init__(self, function_name: str, timeout: float) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "artifact-test"
        self._deadline = time.monotonic() + timeout

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main(plan_file: str) -> None:
    plan: dict[str, Any] = json.loads(Path(plan_file).read_text(encoding="utf-8"))
    layer = Path(plan["layer_dir"])
    site = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"
    lambda_paths = [plan["function_dir"], str(layer / site), str(layer), plan["runtime_dir"]]
    sys.path[:0] = lambda_paths
    module_name, _, attr = plan["handler"].rpartition(".")
    handler = getattr(importlib.import_module(module_name), attr)
    results = [handler(event, Context(plan["function_name"], plan["timeout"])) for event in plan["events"]]

    from seckill.infra.lua_scripts import lua_dir

    modules = {name: sys.modules[name].__file__ for name in WATCHED if name in sys.modules}
    python = f"python{sys.version_info.major}.{sys.version_info.minor}"
    report = {"results": results, "modules": modules, "lua_dir": str(lua_dir()), "python": python}
    Path(plan["output"]).write_text(json.dumps(report), encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1])

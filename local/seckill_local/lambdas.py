"""Hosting Lambda functions locally: their environment, handler and context.

Each function gets a pool of worker processes, one per warm "container": a
container serves one invocation at a time and keeps its module-level state
(clients, caches) between invocations, as on Lambda.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from seckill_local import chaos
from seckill_local.template import Function, Template

Handler = Callable[[dict[str, Any], Any], Any]


def read_env_vars(path: Path | None) -> dict[str, dict[str, str]]:
    """A ``sam local --env-vars`` file: {"Parameters": {...}, "<LogicalId>": {...}}."""
    if path is None:
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: {name: str(v) for name, v in vars_.items()} for k, vars_ in data.items()}


def function_environment(
    template: Template, fn: Function, refs: dict[str, str], env_vars: dict[str, dict[str, str]]
) -> dict[str, str]:
    """Template variables (with refs resolved), then the env-vars file's Parameters,
    then its section for this function, as ``sam local`` layers them."""
    env: dict[str, str] = {}
    for name, value in fn.environment.items():
        resolved = template.resolve(value, refs)
        if resolved is not None:
            env[name] = resolved
    env.update(env_vars.get("Parameters", {}))
    env.update(env_vars.get(fn.logical_id, {}))
    env.setdefault("AWS_LAMBDA_FUNCTION_NAME", fn.logical_id)
    env.setdefault("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
    env.setdefault("AWS_REGION", env.get("AWS_DEFAULT_REGION", "us-east-1"))
    return env


@dataclass
class LocalContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    function_name: str
    timeout_seconds: int
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"

    def __post_init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def load_handler(fn: Function) -> Handler:
    """Import ``<CodeUri>/<module>.py`` under a name of its own (every function's
    module is called ``app``) and return its handler."""
    module_name, _, attr = fn.handler.rpartition(".")
    path = fn.code_uri / f"{module_name.replace('.', '/')}.py"
    unique = f"_local_{fn.logical_id}_{module_name.replace('.', '_')}"
    spec = importlib.util.spec_from_file_location(unique, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    sys.path.insert(0, str(fn.code_uri))
    spec.loader.exec_module(module)
    handler: Handler = getattr(module, attr)
    return handler


def invoke(fn: Function, handler: Handler, event: dict[str, Any]) -> Any:
    # A JSON round trip, as the Lambda service serializes events and results.
    result = handler(json.loads(json.dumps(event)), LocalContext(fn.logical_id, fn.timeout))
    return json.loads(json.dumps(result))


# One function per worker process.
_worker: tuple[Function, Handler] | None = None


def _start_worker(fn: Function, env: dict[str, str]) -> None:
    global _worker
    os.environ.update(env)
    chaos.install(fn.logical_id)
    _worker = (fn, load_handler(fn))


def _invoke_in_worker(event: dict[str, Any]) -> Any:
    assert _worker is not None
    return invoke(_worker[0], _worker[1], event)


def _warm(_: int) -> int:
    return os.getpid()


class FunctionPool:
    """Warm containers of one function, in separate processes.

    A container that dies (a crash, an ``os._exit``) fails the invocations it
    was running, and the pool starts fresh containers, as Lambda would.
    """

    def __init__(self, fn: Function, env: dict[str, str], containers: int) -> None:
        self.fn = fn
        self.env = env
        self.containers = containers
        self.restarts = 0
        self._lock = threading.Lock()
        self._executor = self._new_executor()

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.containers,
            mp_context=get_context("spawn"),
            initializer=_start_worker,
            initargs=(self.fn, self.env),
        )

    def warm(self) -> None:
        """Start every container now, so the first requests do not pay the cold start."""
        list(self._executor.map(_warm, range(self.containers * 2)))

    def invoke(self, event: dict[str, Any]) -> Any:
        executor = self._executor
        try:
            return executor.submit(_invoke_in_worker, event).result(timeout=self.fn.timeout + 5)
        except BrokenProcessPool:
            self._replace(executor)
            raise

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self._executor = self._new_executor()
                self.restarts += 1

    def close(self) -> None:
        processes = list((getattr(self._executor, "_processes", None) or {}).values())
        self._executor.shutdown(wait=False, cancel_futures=True)
        # A container stuck in a handler must not outlive the runner.
        for process in processes:
            process.terminate()

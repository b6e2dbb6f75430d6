"""Hosting Lambda functions locally: their environment, handler and context.

Each function gets a pool of worker processes, one per warm "container": a
container serves one invocation at a time and keeps its module-level state
(clients, caches) between invocations, as on Lambda.

A container that finds ``SECKILL_LOCAL_WORKER_HOOK=module:function`` in its
environment (the env-vars file's, or the runner's own) calls that function with
the function's logical id and the container's number (0, 1, ... in the order
the pool started them, replacements included) before importing the handler:
a place to instrument a container, e.g. to inject faults.

A pool given a ``reports`` stream (the runner's commands give it their stdout)
writes for each invocation a line like Lambda's (and ``sam local``'s) REPORT
line: the invocation's duration measured in its container (the handler's own
time, without the wait for a free container or the trip between processes),
and the HTTP API's route key when the event has one:
``REPORT RequestId: <id> Function: <LogicalId> Route: <routeKey> Duration: 1.23 ms``.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TextIO

from seckill.infra.db import Credentials
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import Function, Template

Handler = Callable[[dict[str, Any], Any], Any]
WorkerHook = Callable[[str, int], None]
WORKER_HOOK = "SECKILL_LOCAL_WORKER_HOOK"


def read_env_vars(path: Path | None) -> dict[str, dict[str, str]]:
    """A ``sam local --env-vars`` file: {"Parameters": {...}, "<LogicalId>": {...}}."""
    if path is None:
        return {}
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {k: {name: str(v) for name, v in vars_.items()} for k, vars_ in data.items()}


# The draw passes' key ring of local runs (as events/env.json's): a development key, public, never deployed.
DEV_PASS_KEYS = '{"active": "dev", "keys": {"dev": "81845362002b289a3963b0c672326b28c5b87dd80f4049c796b969250b6fb7c3"}}'  # noqa: S105  # public on purpose


def local_parameters(redis_url: str, creds: Credentials) -> dict[str, str]:
    """The ``Parameters`` of an env-vars file pointing the functions at local services."""
    return {
        "REDIS_URL": redis_url,
        "DB_HOST": creds.host,
        "DB_PORT": str(creds.port),
        "DB_NAME": creds.database,
        "DB_USER": creds.user,
        "DB_PASSWORD": creds.password,
        "DB_SECRET_ARN": "",
        **LOCAL_AWS,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "SECKILL_PASS_KEYS": DEV_PASS_KEYS,
    }


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


def ships(fn: Function, package: str) -> bool:
    """Whether the function's own artifact installs ``package`` (its locked requirements)."""
    lock = fn.code_uri / "requirements.txt"
    if not lock.is_file():
        return False
    return any(line.startswith(f"{package}==") for line in lock.read_text(encoding="utf-8").splitlines())


def sign_as_deployed(fn: Function) -> None:
    """Lambda's Python runtime brings boto3 without awscrt, so a function that does not
    ship awscrt signs SigV4 with botocore's Python signers there. This environment has
    awscrt (EdgePublisherFunction's SigV4A needs it), and botocore then signs every
    request with it, about 0.3 ms more per SendMessage on this machine: such a
    function's process signs as on Lambda. SigV4A keeps its CRT signer."""
    if ships(fn, "awscrt"):
        return
    from botocore import auth

    auth.AUTH_TYPE_MAPS.update(
        {
            "v4": auth.SigV4Auth,
            "v4-query": auth.SigV4QueryAuth,
            "s3v4": auth.S3SigV4Auth,
            "s3v4-query": auth.S3SigV4QueryAuth,
        }
    )


def load_handler(fn: Function) -> Handler:
    """Import ``<CodeUri>/<module>.py`` under a name of its own (every function's
    module is called ``app``) and return its handler, its process signing AWS
    requests as the deployed function would (``sign_as_deployed``)."""
    sign_as_deployed(fn)
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


def worker_hook(spec: str) -> WorkerHook:
    """The function a ``module:function`` names."""
    module, _, name = spec.partition(":")
    try:
        hook: WorkerHook = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(f"{WORKER_HOOK}={spec!r} names no importable module:function ({exc})") from None
    return hook


def start_function(fn: Function, env: dict[str, str], container: int = 0) -> Handler:
    """What a container does as it starts: its environment, the worker hook, then the handler's import."""
    os.environ.update(env)
    if spec := os.environ.get(WORKER_HOOK):
        worker_hook(spec)(fn.logical_id, container)
    return load_handler(fn)


# One function per worker process.
_worker: tuple[Function, Handler] | None = None

# Containers are forked from a server that has imported the libraries every function
# loads (about a second of a fresh interpreter's CPU here, paid once, not per container);
# each container still imports its handler, so the function's own init runs in each, as
# on Lambda. Cold imports are measured apart, in fresh interpreters (benchmarks).
CONTAINERS = get_context("forkserver")
CONTAINERS.set_forkserver_preload(["boto3", "botocore.session", "redis", "pymysql"])


def _start_worker(fn: Function, env: dict[str, str], container: int) -> None:
    global _worker
    # The runner's environment as the pool saw it, not the server's from its start.
    os.environ.clear()
    _worker = (fn, start_function(fn, env, container))


def _invoke_in_worker(event: dict[str, Any]) -> tuple[Any, float]:
    """The result, and the invocation's duration in ms as the container measured it."""
    assert _worker is not None
    started = time.perf_counter()
    result = invoke(_worker[0], _worker[1], event)
    return result, (time.perf_counter() - started) * 1000


def report_line(function: str, event: Any, duration_ms: float) -> str:
    """Lambda's REPORT line for one invocation, with the API's route key when there is one."""
    route = event.get("routeKey") if isinstance(event, dict) else None
    where = f" Route: {route}" if isinstance(route, str) else ""
    return f"REPORT RequestId: {uuid.uuid4()} Function: {function}{where} Duration: {duration_ms:.2f} ms"


def _warm(_: int) -> int:
    return os.getpid()


class FunctionPool:
    """Warm containers of one function, each a process of its own serving one
    invocation at a time. A container that dies (a crash, an ``os._exit``) fails
    only the invocation it was running and is replaced by a fresh one, as on Lambda.
    """

    def __init__(self, fn: Function, env: dict[str, str], containers: int, reports: TextIO | None = None) -> None:
        self.fn = fn
        self.env = env
        self.containers = containers
        self.reports = reports
        self.restarts = 0
        if spec := env.get(WORKER_HOOK) or os.environ.get(WORKER_HOOK):
            worker_hook(spec)  # a bad name fails here, not as a pool whose containers die at start
        self._numbers = itertools.count()
        self._idle: queue.Queue[ProcessPoolExecutor] = queue.Queue()
        self._all: set[ProcessPoolExecutor] = set()
        self._lock = threading.Lock()
        for _ in range(containers):
            self._idle.put(self._new_container())

    def _new_container(self) -> ProcessPoolExecutor:
        container = ProcessPoolExecutor(
            max_workers=1,
            mp_context=CONTAINERS,
            initializer=_start_worker,
            initargs=(self.fn, {**os.environ, **self.env}, next(self._numbers)),
        )
        with self._lock:
            self._all.add(container)
        return container

    def warm(self) -> None:
        """Start every container now, so the first requests do not pay the cold start."""
        with self._lock:
            containers = list(self._all)
        for future in [c.submit(_warm, 0) for c in containers]:
            future.result()

    def invoke(self, event: dict[str, Any]) -> Any:
        container = self._idle.get()
        try:
            result, duration_ms = container.submit(_invoke_in_worker, event).result(timeout=self.fn.timeout + 5)
        except (BrokenProcessPool, FutureTimeout):
            # Died, or ran past its timeout (Lambda stops such a container too).
            with self._lock:
                self._all.discard(container)
                self.restarts += 1
            _stop(container)
            container = self._new_container()
            raise
        finally:
            self._idle.put(container)
        if self.reports is not None:
            # One write per line: lines of concurrent invocations never interleave.
            self.reports.write(report_line(self.fn.logical_id, event, duration_ms) + "\n")
            self.reports.flush()
        return result

    def close(self) -> None:
        with self._lock:
            containers = list(self._all)
        for container in containers:
            _stop(container)


def _stop(container: ProcessPoolExecutor) -> None:
    processes = list((getattr(container, "_processes", None) or {}).values())
    container.shutdown(wait=False, cancel_futures=True)
    # A container stuck in a handler must not outlive the runner.
    for process in processes:
        process.terminate()

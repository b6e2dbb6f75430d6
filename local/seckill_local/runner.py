"""``seckill-local``: run the SAM application on this machine without Docker.

  seckill-local start-sqs                     moto SQS server + the template's queues
  seckill-local invoke LogicalId -e event.json --env-vars events/env.json
  seckill-local start-api --env-vars events/env.json      the HTTP API on localhost
  seckill-local start-api --edge --env-vars events/env.json   ... behind the local edge
  seckill-local start-lambda --env-vars events/env.json   Lambda's Invoke API on localhost
  seckill-local feed --env-vars events/env.json           OrderQueue -> persister, OrderExpiryQueue -> expiry
  seckill-local schedule --env-vars events/env.json       scheduled functions, on their rate

Redis and MySQL are the real local servers named in the env-vars file.
--edge runs with the edge: the functions tell EdgeStateQueue of each state change,
feed runs EdgePublisherFunction on the local edge's store, and start-api serves the
routes through the CloudFront Function too, the authorizer and the API function
requiring the origin header (a secret of the run's own, SECKILL_ORIGIN_SECRET) the
edge adds to each.
SECKILL_LOCAL_WORKER_HOOK=module:function (in the env-vars file or the environment)
is called in each function's container as it starts, with the function's logical id
and the container's number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import secrets
import signal
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import EndpointConnectionError

from seckill.edge.passkeys import Held
from seckill_local.api import LocalHttpApi, make_server
from seckill_local.checkout import TEMPLATE
from seckill_local.edge import EdgeServer, kvs_environment, page_url
from seckill_local.feeder import QueueFeeder
from seckill_local.lambda_api import LocalLambdaApi
from seckill_local.lambdas import FunctionPool, function_environment, invoke, read_env_vars, start_function
from seckill_local.node import MISSING, node
from seckill_local.secrets import ensure_secret
from seckill_local.sqs import DEFAULT_ENDPOINT, LOCAL_AWS, ensure_queues, local_region, sqs_client
from seckill_local.template import Function, Template

DEFAULT_EDGE_PORT = 3002
DEFAULT_KVS_PORT = 4568
DEFAULT_KVS_ENDPOINT = f"http://127.0.0.1:{DEFAULT_KVS_PORT}"
EDGE_QUEUE = "EdgeStateQueue"
EDGE_QUEUE_VARIABLE = "EDGE_STATE_QUEUE_URL"
ORIGIN_VARIABLE = "SECKILL_ORIGIN_SECRET"
EDGE_KVS_VARIABLE = "EDGE_KVS_ARN"
HELD_VARIABLE = "PASS_KEYS_HELD_SECRET_ARN"
HELD_SECRET = "PassKeysHeldSecret"  # noqa: S105  # a resource name


class Runner:
    """What every subcommand shares: the template, env-vars and the local queues."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.template = Template.load(Path(args.template))
        self.env_vars = read_env_vars(args.env_vars)
        self.endpoint = args.sqs_endpoint
        self.prefix = args.queue_prefix
        self.visibility_timeout = getattr(args, "visibility_timeout", None)
        self.edge: bool = getattr(args, "edge", False)
        # With the edge, the authorizer and the API function require the origin header the
        # local edge adds (seckill.origin): a secret of this run's own.
        self.origin_secret = secrets.token_urlsafe(32) if self.edge else ""
        self.kvs_endpoint: str = getattr(args, "kvs_endpoint", None) or DEFAULT_KVS_ENDPOINT
        self._queues: dict[str, str] | None = None

    @property
    def sqs(self) -> Any:
        return sqs_client(self.endpoint)

    def queues(self) -> dict[str, str]:
        if self._queues is None:
            self._queues = ensure_queues(
                self.sqs, self.template, prefix=self.prefix, visibility_timeout=self.visibility_timeout
            )
        return self._queues

    def function(self, logical_id: str) -> Function:
        try:
            return self.template.functions[logical_id]
        except KeyError:
            known = ", ".join(sorted(self.template.functions))
            raise SystemExit(f"no function {logical_id!r} in the template (known: {known})") from None

    def environment(self, fn: Function) -> dict[str, str]:
        refs = dict(self.template.parameters)
        refs.update(self.env_vars.get("Parameters", {}))
        refs.update(self.queues())
        # Secrets Manager too is the local moto server's (a secret named in the env-vars file,
        # the pass keys the edge holds).
        env = {
            **LOCAL_AWS,
            "AWS_ENDPOINT_URL_SQS": self.endpoint,
            "AWS_ENDPOINT_URL_SECRETS_MANAGER": self.endpoint,
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
        env.update(function_environment(self.template, fn, refs, self.env_vars))
        if self.edge and EDGE_KVS_VARIABLE in fn.environment:
            # The publisher writes the local edge's store, whatever ARN the env-vars file
            # gives it for sam local.
            env.update(kvs_environment(self.kvs_endpoint))
        if self.edge and ORIGIN_VARIABLE in fn.environment:
            env[ORIGIN_VARIABLE] = self.origin_secret
        if HELD_VARIABLE in fn.environment:
            # With the edge, the publisher confirms there which pass keys the local edge holds
            # and the API signs only with those, as in AWS; without, the active key signs.
            env[HELD_VARIABLE] = self.held_secret() if self.edge else ""
        if EDGE_QUEUE_VARIABLE in fn.environment:
            # Whatever condition the template puts on it: a local run has an edge when asked for;
            # without one the functions send no notices (nothing would publish them).
            edge_queue = self.queues().get(EDGE_QUEUE) if self.edge else None
            env[EDGE_QUEUE_VARIABLE] = edge_queue or ""
        return env

    def held_secret(self) -> str:
        """The secret of the pass keys the local edge holds, on the moto server, made empty
        (no `pass-keys` yet) if this run's prefix has none; its name serves as its ARN."""
        return ensure_secret(self.endpoint, f"{self.prefix}{HELD_SECRET}", Held({}).to_json())

    def pool(self, logical_id: str, containers: int) -> FunctionPool:
        """Warm containers of the function, a REPORT line on stdout per invocation (as ``sam local``)."""
        fn = self.function(logical_id)
        return FunctionPool(fn, self.environment(fn), containers, reports=sys.stdout)

    def resolve_int(self, value: Any, default: int) -> int:
        resolved = self.template.resolve(value, self.env_vars.get("Parameters", {}))
        return int(resolved) if resolved else default


def cmd_start_sqs(args: argparse.Namespace) -> int:
    from moto.server import ThreadedMotoServer

    from seckill_local import moto_sqs

    moto_sqs.install()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address=args.host, port=args.port, verbose=False)
    server.start()
    args.sqs_endpoint = f"http://{args.host}:{args.port}"
    runner = Runner(args)
    for logical_id, url in runner.queues().items():
        print(f"{logical_id}: {url}", flush=True)
    print(f"moto SQS listening on {args.sqs_endpoint} (Ctrl-C to stop)", flush=True)
    _wait_for_signal()
    server.stop()
    return 0


def cmd_invoke(args: argparse.Namespace) -> int:
    runner = Runner(args)
    fn = runner.function(args.logical_id)
    event = json.loads(Path(args.event).read_text(encoding="utf-8")) if args.event else {}
    # As sam local invoke: the function's logs (Powertools writes to stdout) go to stderr,
    # so stdout carries only the result.
    with contextlib.redirect_stdout(sys.stderr):
        result = invoke(fn, start_function(fn, runner.environment(fn)), event)
    print(json.dumps(result, indent=2))
    return 0


def cmd_start_api(args: argparse.Namespace) -> int:
    if args.edge and node() is None:
        raise SystemExit(MISSING)
    runner = Runner(args)
    pools: dict[str, FunctionPool] = {}
    # One pool per function (not per route): setdefault would build, and leak, a pool per route.
    for _, fn in runner.template.routes():
        if fn.logical_id not in pools:
            pools[fn.logical_id] = runner.pool(fn.logical_id, args.containers)
    authorizer = runner.template.authorizer()
    if authorizer and authorizer[0] not in pools:
        pools[authorizer[0]] = runner.pool(authorizer[0], max(1, args.containers // 2))
    for pool in pools.values():
        pool.warm()
    server = make_server(LocalHttpApi(runner.template, pools), args.host, args.port, verbose=args.verbose)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api_url = f"http://{args.host}:{server.server_port}"
    edge = None
    if args.edge:
        edge = EdgeServer(
            api_url,
            port=args.edge_port,
            kvs_port=args.kvs_port,
            host=args.host,
            template=runner.template,
            origin_secret=runner.origin_secret,
        )
    for route, fn in runner.template.routes():
        print(f"  {route.method:<5} {api_url}{route.path}  -> {fn.logical_id} ({route.auth})")
    print(f"HTTP API listening on {api_url}", flush=True)
    if edge:
        print(f"edge listening on {edge.url}: the template's EdgeDistribution in front of every route", flush=True)
        print(f"  its KeyValueStore {edge.kvs_arn} at {edge.kvs_endpoint}", flush=True)
        print(f"  publish to it with: seckill-local feed --edge --kvs-endpoint {edge.kvs_endpoint}", flush=True)
        print(f"  the buyer's page: {page_url(edge.url, '<shopId>', '<voucherId>')}", flush=True)
    print("(Ctrl-C to stop)", flush=True)
    try:
        _wait_for_signal()
    finally:
        if edge:
            edge.stop()
        server.shutdown()
        for pool in pools.values():
            pool.close()
    return 0


def cmd_start_lambda(args: argparse.Namespace) -> int:
    runner = Runner(args)
    api = LocalLambdaApi(list(runner.template.functions), lambda name: runner.pool(name, args.containers))
    server = make_server(api, args.host, args.port, verbose=args.verbose)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"Lambda Invoke API on http://{args.host}:{args.port} (AWS_ENDPOINT_URL_LAMBDA; Ctrl-C to stop)", flush=True)
    try:
        _wait_for_signal()
    finally:
        server.shutdown()
        api.close()
    return 0


def cmd_feed(args: argparse.Namespace) -> int:
    runner = Runner(args)
    queues = runner.queues()
    feeders: list[QueueFeeder] = []
    for fn in runner.template.functions.values():
        if (args.only and fn.logical_id not in args.only) or fn.logical_id in args.skip:
            continue
        for source in fn.sqs_events:
            queue_id = source["Queue"]["Fn::GetAtt"][0]
            if queue_id == EDGE_QUEUE and not runner.edge:
                continue  # no edge to publish to
            concurrency = runner.resolve_int((source.get("ScalingConfig") or {}).get("MaximumConcurrency"), 2)
            batch_size = runner.resolve_int(source.get("BatchSize"), 10)
            pool = runner.pool(fn.logical_id, concurrency)
            pool.warm()
            feeder = QueueFeeder(runner.sqs, queues[queue_id], pool, batch_size=batch_size, concurrency=concurrency)
            feeder.start()
            feeders.append(feeder)
            print(f"feeding {queue_id} -> {fn.logical_id} (batch {feeder.batch_size}, concurrency {concurrency})")
    if not feeders:
        print("no SQS event sources in the template", file=sys.stderr)
        return 1
    print("feeding (Ctrl-C to stop)", flush=True)
    try:
        _wait_for_signal()
    finally:
        for feeder in feeders:
            feeder.close()
            feeder.pool.close()
            s = feeder.stats
            print(f"batches {s.batches}, records {s.records}, deleted {s.deleted}, failed {s.failed}")
    return 0


def rate_seconds(expression: str) -> float | None:
    """``rate(5 minutes)`` in seconds; None for what is not a rate (cron)."""
    found = re.fullmatch(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)", expression.strip())
    if found is None:
        return None
    unit = {"minute": 60, "hour": 3600, "day": 86400}[found[2].rstrip("s")]
    return int(found[1]) * unit


def scheduled_event(props: dict[str, Any]) -> dict[str, Any]:
    """What EventBridge delivers: the target's Input if it has one, else a Scheduled Event."""
    if props.get("Input"):
        return dict(json.loads(props["Input"]))
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": local_region(),
        "resources": [],
        "detail": {},
    }


def cmd_schedule(args: argparse.Namespace) -> int:
    runner = Runner(args)
    jobs: list[tuple[Function, dict[str, Any], float]] = []
    for fn in runner.template.functions.values():
        if EDGE_KVS_VARIABLE in fn.environment and not runner.edge:
            continue  # the publisher's schedule (the pass keys): no edge to publish to
        for props in fn.schedules:
            expression = runner.template.resolve(props.get("Schedule") or props.get("ScheduleExpression"), {}) or ""
            every = args.every or rate_seconds(expression)
            if every is None and not args.once:
                print(f"{fn.logical_id}: {expression!r} is not a rate; give --every SECONDS", file=sys.stderr)
                return 2
            jobs.append((fn, props, every or 0.0))
    if not jobs:
        print("no scheduled functions in the template", file=sys.stderr)
        return 1
    pools = {fn.logical_id: runner.pool(fn.logical_id, 1) for fn, _, _ in jobs}
    due = dict.fromkeys(range(len(jobs)), 0.0)
    failed = False
    try:
        while True:
            now = time.monotonic()
            for index, (fn, props, every) in enumerate(jobs):
                if due[index] > now:
                    continue
                due[index] = now + every
                try:
                    result = pools[fn.logical_id].invoke(scheduled_event(props))
                    print(json.dumps({"function": fn.logical_id, "result": result}), flush=True)
                except Exception as exc:
                    failed = True
                    print(f"{fn.logical_id} failed: {exc!r}", file=sys.stderr, flush=True)
            if args.once:
                return 1 if failed else 0
            print(f"next run in {min(due.values()) - time.monotonic():.0f} s (Ctrl-C to stop)", file=sys.stderr)
            if _wait_for_signal(timeout=max(0.0, min(due.values()) - time.monotonic())):
                return 0
    finally:
        for pool in pools.values():
            pool.close()


def _wait_for_signal(timeout: float | None = None) -> bool:
    """Until SIGTERM or Ctrl-C (True), or ``timeout`` seconds (False)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while not stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    return True


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--template", "-t", default=str(TEMPLATE), help="SAM template (default: %(default)s)")
    common.add_argument("--env-vars", "-n", type=Path, help="JSON env-vars file, as for sam local")
    common.add_argument(
        "--sqs-endpoint",
        default=os.environ.get("AWS_ENDPOINT_URL_SQS", DEFAULT_ENDPOINT),
        help="SQS endpoint (default: $AWS_ENDPOINT_URL_SQS or %(default)s)",
    )
    common.add_argument("--queue-prefix", default="", help="prefix for local queue names (isolates runs)")
    common.add_argument(
        "--edge",
        action="store_true",
        help="run with the local edge (EdgeStateQueue, its publisher, the CloudFront Function)",
    )
    common.add_argument(
        "--kvs-endpoint",
        default=DEFAULT_KVS_ENDPOINT,
        help="where start-api --edge serves the edge's KeyValueStore (default: %(default)s)",
    )

    top = argparse.ArgumentParser(
        prog="seckill-local", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True)

    p = sub.add_parser("start-sqs", parents=[common], help="start a moto SQS server and create the queues")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=4566)
    p.add_argument("--visibility-timeout", type=int, help="override the template's (seconds), for quick retries")
    p.set_defaults(run=cmd_start_sqs)

    p = sub.add_parser("invoke", parents=[common], help="invoke one function with an event, like sam local invoke")
    p.add_argument("logical_id", help="e.g. SeckillApiFunction")
    p.add_argument("--event", "-e", help="event JSON file")
    p.set_defaults(run=cmd_invoke)

    server = argparse.ArgumentParser(add_help=False)
    server.add_argument("--host", default="127.0.0.1")
    server.add_argument("--verbose", action="store_true", help="log every request")

    p = sub.add_parser("start-api", parents=[common, server], help="serve the HTTP API with its authorizer")
    p.add_argument("--port", "-p", type=int, default=3000)
    p.add_argument(
        "--edge-port", type=int, default=DEFAULT_EDGE_PORT, help="the edge's port, with --edge (%(default)s)"
    )
    p.add_argument(
        "--kvs-port", type=int, default=DEFAULT_KVS_PORT, help="its KeyValueStore's port, with --edge (%(default)s)"
    )
    p.add_argument("--containers", type=int, default=4, help="warm containers of the API function (default 4)")
    p.set_defaults(run=cmd_start_api)

    p = sub.add_parser(
        "start-lambda", parents=[common, server], help="serve Lambda's Invoke API (sam local start-lambda)"
    )
    p.add_argument("--port", "-p", type=int, default=3001)
    p.add_argument("--containers", type=int, default=1, help="warm containers per function (default 1)")
    p.set_defaults(run=cmd_start_lambda)

    p = sub.add_parser("schedule", parents=[common], help="run the template's scheduled functions on their rate")
    p.add_argument("--every", type=float, help="seconds between runs, instead of the template's rate")
    p.add_argument("--once", action="store_true", help="run each scheduled function once, print its result, exit")
    p.set_defaults(run=cmd_schedule)

    p = sub.add_parser("feed", parents=[common], help="feed the template's SQS event sources to their functions")
    p.add_argument("--visibility-timeout", type=int, help="override the template's (seconds), for quick retries")
    p.add_argument(
        "--only", action="append", default=[], metavar="FUNCTION", help="feed only this function's sources (repeatable)"
    )
    p.add_argument(
        "--skip", action="append", default=[], metavar="FUNCTION", help="leave its sources unfed (repeatable)"
    )
    p.set_defaults(run=cmd_feed)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except EndpointConnectionError:
        print(f"cannot reach SQS at {args.sqs_endpoint}: start it with `seckill-local start-sqs`", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

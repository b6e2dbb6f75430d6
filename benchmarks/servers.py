"""SQS stand-ins the benchmarks can run on, each in a process of its own.

Three serve moto's SQS (the same application, the same in-memory queues, the
same wire protocol boto3 speaks) and differ only in the HTTP server in front
of it:

- ``werkzeug``: moto's own ``ThreadedMotoServer`` (werkzeug's development
  server), what the test suite and ``seckill-local start-sqs`` use;
- ``waitress``: moto's WSGI application under waitress (a production WSGI
  server, a fixed pool of threads, keep-alive);
- ``gunicorn``: the same under gunicorn, one process (moto keeps its queues in
  memory) with a pool of threads.

The fourth is another implementation of SQS:

- ``fauxqs``: the fauxqs emulator (npm, on Fastify) on Node.js 22, both pinned
  in ``benchmarks/fauxqs/package-lock.json`` and installed there by ``make
  bench-setup`` (``npm ci``; npm has Node.js builds for Linux x64 and arm64,
  elsewhere a Node.js 22.5 or later on PATH serves). It speaks the JSON protocol boto3 sends and keeps
  SQS's semantics that Seckill relies on (visibility timeouts, receive counts,
  redrive to a dead-letter queue, approximate counts), without moto's scan of
  the whole queue on every SendMessage. It lacks StartMessageMoveTask, which
  only the replay command uses (not benchmarked). ``serve.mjs`` keeps it on
  the loopback interface, as the moto servers are.

    python -m benchmarks.servers SERVER PORT
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Any

from seckill_local.node import FAUXQS, node
from seckill_local.processes import stop_group
from seckill_local.sqs import sqs_client

STAND_INS = {
    "fauxqs": "fauxqs on Node.js 22",
    "werkzeug": "moto behind werkzeug (as the tests run it)",
    "waitress": "moto behind waitress",
    "gunicorn": "moto behind gunicorn",
}
SERVERS = tuple(STAND_INS)
THREADS = 16  # enough for every worker process of a run to be served at once


def _moto_app() -> Any:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    return DomainDispatcherApplication(create_backend_app)


def unavailable(server: str) -> str | None:
    """Why this stand-in cannot start here, or None."""
    if server != "fauxqs":
        return None
    if not (FAUXQS / "node_modules" / "fauxqs").exists():
        return f"fauxqs is not installed: run `npm ci --prefix {FAUXQS}` (make bench-setup does)"
    if node() is None:
        return "fauxqs needs Node.js 22.5 or later: npm has no build of it for this platform and none is on PATH"
    return None


def serve(server: str, port: int) -> None:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if server == "fauxqs":
        # Node's warning that node:sqlite is experimental is not ours to print.
        path = node()
        if path is None:
            raise SystemExit(unavailable(server))
        os.execv(path, [str(path), "--no-warnings", str(FAUXQS / "serve.mjs"), str(port)])  # noqa: S606
    elif server == "werkzeug":
        from moto.server import ThreadedMotoServer

        moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        moto.start()
        threading.Event().wait()  # until SIGTERM
    elif server == "waitress":
        import waitress

        waitress.serve(_moto_app(), host="127.0.0.1", port=port, threads=THREADS, _quiet=True)
    elif server == "gunicorn":
        from gunicorn.app.base import BaseApplication

        class Gunicorn(BaseApplication):  # type: ignore[misc]
            def load_config(self) -> None:
                options = {
                    "bind": f"127.0.0.1:{port}",
                    "workers": 1,
                    "worker_class": "gthread",
                    "threads": THREADS,
                    "loglevel": "warning",
                    "keepalive": 75,
                }
                for name, value in options.items():
                    self.cfg.set(name, value)

            def load(self) -> Any:
                return _moto_app()

        Gunicorn().run()
    else:
        raise SystemExit(f"unknown server {server!r}; one of {', '.join(SERVERS)}")


class SqsServer:
    """One stand-in, started as a child process and stopped with it."""

    def __init__(self, server: str, port: int) -> None:
        if server not in SERVERS:
            raise ValueError(f"unknown SQS server {server!r}; one of {', '.join(SERVERS)}")
        problem = unavailable(server)
        if problem:
            raise RuntimeError(problem)
        self.server = server
        self.endpoint = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "benchmarks.servers", server, str(port)]
        # Our own module with our own arguments; a session of its own so stop() reaches it whole.
        self.process = subprocess.Popen(  # noqa: S603
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        client = sqs_client(self.endpoint)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the {self.server} SQS server exited at start (code {self.process.returncode})")
            with contextlib.suppress(Exception):  # not listening yet
                client.list_queues()
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the {self.server} SQS server did not come up within {timeout:.0f} s")

    def stop(self) -> None:
        stop_group(self.process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("server", choices=SERVERS)
    parser.add_argument("port", type=int)
    args = parser.parse_args()
    serve(args.server, args.port)


if __name__ == "__main__":
    main()

"""The SAM CLI commands a run drives: build, local invoke, local start-api, local start-lambda."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from scripts.sam_local.commands import Commands, tail
from scripts.sam_local.progress import CheckFailed, Unavailable


class SamCli:
    def __init__(self, sam: Path, commands: Commands, region: str) -> None:
        self.sam = sam
        self.commands = commands
        self.region = region
        self.local_options: list[str] = []

    def version(self) -> str:
        return self.commands.run([str(self.sam), "--version"], "sam-version", timeout=60).stdout.strip()

    def build(self) -> None:
        # samconfig.toml's [default.build]: cached, parallel, no container.
        self.commands.run([str(self.sam), "build", "--region", self.region], "sam-build", timeout=900)

    def use(self, env_file: Path, invoke_image: str | None) -> None:
        """What every sam local command of the run is given, besides samconfig.toml's
        defaults (--add-host host.docker.internal:host-gateway)."""
        self.local_options = [
            "--env-vars", str(env_file),
            # The base image is already here (pulled, or the stand-in): no registry round trip per invoke.
            "--skip-pull-image",
            "--region", self.region,
        ]  # fmt: skip
        if invoke_image:
            self.local_options += ["--invoke-image", invoke_image]

    def invoke(self, function: str, event: Path) -> Any:
        """``sam local invoke``: the function's answer (stdout), parsed."""
        done = self.commands.run(
            [str(self.sam), "local", "invoke", function, "--event", str(event), *self.local_options],
            f"invoke-{function}",
            timeout=180,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise CheckFailed(f"sam local invoke {function} exited {done.returncode}:\n{tail(done.stderr)}")
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError as exc:
            raise CheckFailed(f"{function} answered something that is not JSON: {lines[-1][:300]}") from exc

    def start_api(self, port: int, log: Path) -> SamServer:
        """``sam local start-api``, every function's container started first."""
        return self._serve("start-api", port, log, "EAGER")

    def start_lambda(self, port: int, log: Path) -> SamServer:
        """``sam local start-lambda`` (Lambda's Invoke API), a container started at a function's first invoke."""
        return self._serve("start-lambda", port, log, "LAZY")

    def _serve(self, command: str, port: int, log: Path, warm: str) -> SamServer:
        process = subprocess.Popen(
            [
                str(self.sam), "local", command, "--host", "127.0.0.1", "--port", str(port),
                "--warm-containers", warm, *self.local_options,
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            env=self.commands.env,
            start_new_session=True,
        )  # fmt: skip
        return SamServer(process, f"sam local {command}", f"http://127.0.0.1:{port}", log)


class SamServer:
    """A running ``sam local start-api`` or ``start-lambda``."""

    def __init__(self, process: subprocess.Popen[bytes], name: str, url: str, log: Path) -> None:
        self.process = process
        self.name = name
        self.url = url
        self.log = log

    def request(self, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, method=method, headers=headers or {})  # noqa: S310 (our own local URL)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (our own local URL)
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        try:
            return status, json.loads(body or b"null")
        except json.JSONDecodeError:
            return status, body.decode(errors="replace")

    def wait_ready(self, probe: str, timeout: float) -> None:
        """Until the server answers ``probe``, with any status (EAGER: every container is started first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Unavailable(f"{self.name} exited {self.process.returncode}:\n{tail(self.log.read_text())}")
            try:
                self.request("GET", probe)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise Unavailable(f"{self.name} did not answer within {timeout:.0f} s:\n{tail(self.log.read_text())}")

    def stop(self) -> None:
        """SIGINT first, as Ctrl-C would (SAM then stops its warm containers), then SIGTERM."""
        for sig, wait in ((signal.SIGINT, 10), (signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            if self.process.poll() is not None:
                return
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue

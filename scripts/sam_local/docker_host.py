"""The Docker engine a run uses (the running one, or a dockerd of its own) and the
relays that let containers reach services bound to 127.0.0.1."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.sam_local.commands import Commands, ensure_installed, is_root, tail
from scripts.sam_local.progress import Unavailable
from seckill_local.ports import free_port

# No NAT rules and no change to IP forwarding: the containers only talk to this host.
DOCKERD_FLAGS = ["--iptables=false", "--ip-forward=false", "--ip-masq=false"]
# The label sam local puts on the containers it starts.
SAM_CONTAINER_LABEL = "sam.cli.container.type=lambda"


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise Unavailable(f"{what} within {timeout:.0f} s")


class DockerHost:
    def __init__(self, commands: Commands, log_dir: Path) -> None:
        self.commands = commands
        self.log_dir = log_dir
        self.dockerd: subprocess.Popen[bytes] | None = None
        self.why_not = ""

    def reachable(self) -> bool:
        if shutil.which("docker") is None:
            self.why_not = "no docker client"
            return False
        done = self.commands.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"], "docker-info", timeout=30, check=False
        )
        self.why_not = tail(done.stderr, 2)
        return done.returncode == 0

    def start(self) -> str:
        """Use the running engine, or install and start one. Says which."""
        if self.reachable():
            return "the running Docker engine"
        if not is_root():
            raise Unavailable(
                f"Docker is not reachable ({self.why_not}); start it, join the docker group, or run as root"
            )
        installed = ensure_installed(self.commands, {"dockerd": "docker.io", "docker": "docker.io"})
        # A session of its own: Ctrl-C reaches the run, which then stops it in order.
        with (self.log_dir / "dockerd.log").open("wb") as log:
            self.dockerd = subprocess.Popen(
                ["dockerd", *DOCKERD_FLAGS], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 60
        while not self.reachable():
            if self.dockerd.poll() is not None or time.monotonic() > deadline:
                text = (self.log_dir / "dockerd.log").read_text(encoding="utf-8", errors="replace")
                self.stop()
                raise Unavailable(f"dockerd did not start:\n{tail(text)}")
            time.sleep(0.5)
        how = f" (installed {', '.join(installed)} first)" if installed else ""
        return f"dockerd started for this run{how}: {' '.join(DOCKERD_FLAGS)}; stopped at the end"

    def stop(self) -> bool:
        """Stop dockerd if this run started it (it stops its containerd too)."""
        if self.dockerd is None:
            return False
        self.dockerd.terminate()
        try:
            self.dockerd.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.dockerd.kill()
            self.dockerd.wait(timeout=10)
        self.dockerd = None
        return True

    def gateway(self) -> str:
        """The default bridge's address on this host: what host.docker.internal:host-gateway names."""
        done = self.commands.run(["docker", "network", "inspect", "bridge"], "docker-network", timeout=30)
        config = json.loads(done.stdout)[0]["IPAM"]["Config"][0]
        # The default bridge may not report its gateway: it is the subnet's first address.
        return str(config.get("Gateway") or next(ipaddress.ip_network(config["Subnet"]).hosts()))

    def inspect_image(self, image: str) -> dict[str, Any] | None:
        """``docker image inspect``, or None when there is no such image here."""
        done = self.commands.run(["docker", "image", "inspect", image], "docker-image-inspect", timeout=30, check=False)
        return dict(json.loads(done.stdout)[0]) if done.returncode == 0 else None

    def sam_containers(self) -> set[str]:
        done = self.commands.run(
            ["docker", "ps", "-aq", "--no-trunc", "--filter", f"label={SAM_CONTAINER_LABEL}"], "docker-ps", timeout=30
        )
        return set(done.stdout.split())

    def dangling_images(self) -> set[str]:
        """Untagged images: sam local's function image of an earlier run becomes one when
        this run builds it again with other code."""
        done = self.commands.run(
            ["docker", "images", "-qf", "dangling=true", "--no-trunc"], "docker-images", timeout=30
        )
        return set(done.stdout.split())

    def remove_images(self, ids: set[str]) -> str | None:
        if not ids:
            return None
        # Not forced: an image something still uses stays.
        self.commands.run(["docker", "rmi", *sorted(ids)], "docker-rmi", timeout=120, check=False)
        return f"{len(ids)} images sam local untagged removed"

    def remove_containers(self, ids: set[str]) -> str | None:
        if not ids:
            return None
        self.commands.run(["docker", "rm", "-f", *sorted(ids)], "docker-rm", timeout=120)
        return f"{len(ids)} containers sam local left removed"


class Relays:
    """socat relays bound on the bridge address, each forwarding to a port on 127.0.0.1."""

    def __init__(self, commands: Commands, log_dir: Path, bind: str) -> None:
        self.commands = commands
        self.log_dir = log_dir
        self.bind = bind
        self.processes: list[subprocess.Popen[bytes]] = []

    def add(self, name: str, target_port: int) -> int:
        ensure_installed(self.commands, {"socat": "socat"})
        port = free_port(self.bind)
        # A process group of its own, which also holds the copy socat forks per connection.
        with (self.log_dir / f"relay-{name}.log").open("wb") as log:
            process = subprocess.Popen(
                ["socat", f"TCP-LISTEN:{port},bind={self.bind},fork,reuseaddr", f"TCP:127.0.0.1:{target_port}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes.append(process)
        _wait(lambda: process.poll() is None and _listening(self.bind, port), 10, f"the {name} relay did not listen")
        return port

    def stop(self) -> int:
        for process in self.processes:
            _signal_group(process, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(timeout=10)
        stopped, self.processes = len(self.processes), []
        return stopped


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """The relay and the copies it forked, all in the group it leads."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def _listening(host: str, port: int) -> bool:
    """Whether something listens on host:port, read from /proc/net/tcp: a probe connection
    would count, for MySQL, as a client that never finished its handshake."""
    address = f"{socket.inet_aton(host)[::-1].hex().upper()}:{port:04X}"
    with open("/proc/net/tcp", encoding="ascii") as table:
        return any(line.split()[1] == address and line.split()[3] == "0A" for line in list(table)[1:])

"""Running the run's commands (docker, sam, apt-get...), each one's output kept in the log folder."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

from scripts.sam_local.progress import Unavailable


class Commands:
    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self._numbers = itertools.count(1)

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{next(self._numbers):02d}-{name}.log"

    def run(
        self,
        args: list[str],
        name: str,
        *,
        timeout: float,
        check: bool = True,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion; stdout is returned, stdout and stderr are both logged.
        A failure (with ``check``) raises, quoting the end of the log."""
        log = self.log_path(name)
        try:
            done = subprocess.run(
                args,
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env or self.env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            log.write_text(f"$ {' '.join(args)}\ntimed out after {timeout} s\n{exc.stderr or ''}", encoding="utf-8")
            raise Unavailable(f"{name}: no answer within {timeout:.0f} s (log: {log})") from exc
        log.write_text(
            f"$ {' '.join(args)}\nexit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}",
            encoding="utf-8",
        )
        if check and done.returncode != 0:
            raise Unavailable(f"{name} exited {done.returncode}:\n{tail(done.stderr or done.stdout)}\n(log: {log})")
        return done


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def is_root() -> bool:
    return os.geteuid() == 0


def ensure_installed(commands: Commands, binaries: dict[str, str]) -> list[str]:
    """Install, with apt-get, the Debian package of each binary not on the PATH
    (binary -> package). Returns the packages installed."""
    missing = sorted({package for binary, package in binaries.items() if shutil.which(binary) is None})
    if not missing:
        return []
    if not is_root() or shutil.which("apt-get") is None:
        raise Unavailable(
            f"{', '.join(missing)} not installed; install them (Debian/Ubuntu: apt-get install {' '.join(missing)})"
        )
    apt_env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    commands.run(["apt-get", "update", "-qq"], "apt-get-update", timeout=300, env=apt_env)
    commands.run(["apt-get", "install", "-y", "-qq", *missing], "apt-get-install", timeout=600, env=apt_env)
    return missing

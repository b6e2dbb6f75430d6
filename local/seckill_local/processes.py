"""Child processes the tools start in a session of their own (``start_new_session``),
so that one signal reaches the process and whatever it started."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(process: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 10) -> None:
    """SIGTERM to the process's group, then SIGKILL if it has not exited within ``timeout``."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

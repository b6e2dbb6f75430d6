"""The Lua scripts of ``lua/``, registered on a Redis client.

Scripts run by EVALSHA and are reloaded automatically when Redis has lost them
(``register_script``). The build ships ``lua/`` (and ``lua/lib/``) inside the
package (``seckill/lua``); a source checkout reads the repository's ``lua/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.commands.core import Script

_PACKAGED = Path(__file__).with_name("lua")
_SOURCE = Path(__file__).resolve().parents[2] / "lua"


def lua_dir() -> Path:
    return _PACKAGED if _PACKAGED.is_dir() else _SOURCE


def read_script(name: str) -> str:
    """A script as Redis runs it: the shared helpers of ``lua/lib/`` (one parser of the
    reservation mark), then the script itself."""
    library = "".join(path.read_text(encoding="utf-8") for path in sorted((lua_dir() / "lib").glob("*.lua")))
    return library + (lua_dir() / f"{name}.lua").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Scripts:
    gate: Script
    attach: Script
    release: Script
    settle: Script
    promise: Script
    restore: Script
    counter_floor: Script

    @classmethod
    def register(cls, redis: Any) -> Scripts:
        names = ("gate", "attach", "release", "settle", "promise", "restore", "counter_floor")
        return cls(**{name: redis.register_script(read_script(name)) for name in names})

"""The Lua scripts of ``lua/``, registered on a Redis client.

Scripts run by EVALSHA and are reloaded automatically when Redis has lost them
(``register_script``). The build ships ``lua/`` inside the package
(``seckill/lua``); a source checkout reads the repository's ``lua/``.
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
    return (lua_dir() / f"{name}.lua").read_text(encoding="utf-8")


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

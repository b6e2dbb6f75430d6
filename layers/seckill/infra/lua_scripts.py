"""The Lua scripts of ``lua/``, registered on a Redis client.

Scripts run by EVALSHA and are loaded again when Redis has lost them (``Script``).
The build ships ``lua/`` (and ``lua/lib/``) inside the
package (``seckill/lua``); a source checkout reads the repository's ``lua/``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.exceptions import NoScriptError

from seckill.infra.clients import RedisClient

_PACKAGED = Path(__file__).parents[1] / "lua"
_SOURCE = Path(__file__).resolve().parents[3] / "lua"


def lua_dir() -> Path:
    return _PACKAGED if _PACKAGED.is_dir() else _SOURCE


def read_script(name: str) -> str:
    """A script as Redis runs it: the shared helpers of ``lua/lib/`` (one parser of the
    reservation mark), then the script itself."""
    library = "".join(path.read_text(encoding="utf-8") for path in sorted((lua_dir() / "lib").glob("*.lua")))
    return library + (lua_dir() / f"{name}.lua").read_text(encoding="utf-8")


class Script:
    """A script run by its SHA on one client (a Redis or a RedisCluster), loaded again
    when Redis answers NOSCRIPT (a restart, a failover, SCRIPT FLUSH).

    redis-py's ``register_script`` does the same, but first asks at every call whether
    the client is a pipeline: an import and an isinstance against a Protocol-derived
    class, which cost a refused press more than the rest of its own Python.
    """

    def __init__(self, redis: RedisClient, text: str) -> None:
        self.redis = redis
        self.text = text
        # Redis names a script by its SHA1.
        self.sha = hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()

    def __call__(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        try:
            return self.redis.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            self.redis.script_load(self.text)
            return self.redis.evalsha(self.sha, len(keys), *keys, *args)


@dataclass(frozen=True)
class Scripts:
    gate: Script
    release: Script
    settle: Script
    promise: Script
    restore: Script
    counter_floor: Script
    give_back: Script
    edge_claim: Script
    edge_unclaim: Script

    @classmethod
    def register(cls, redis: RedisClient) -> Scripts:
        names = (
            "gate",
            "release",
            "settle",
            "promise",
            "restore",
            "counter_floor",
            "give_back",
            "edge_claim",
            "edge_unclaim",
        )
        return cls(**{name: Script(redis, read_script(name)) for name in names})

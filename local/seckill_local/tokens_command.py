"""``seckill-tokens``: mint login tokens for local runs and load tests.

As hm-dianping's load tests did for JMeter: N users get a token each in
Redis (``login:token:<token>``), and the tokens go to a file, one per line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from redis.exceptions import RedisError

from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.tokens import mint_tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seckill-tokens", description=__doc__.splitlines()[0])
    parser.add_argument("--count", "-c", type=int, default=1000, help="how many users (default %(default)s)")
    parser.add_argument("--first-user", type=int, default=1, help="first user id (default %(default)s)")
    parser.add_argument(
        "--out", "-o", type=Path, default=Path("tokens.txt"), help="file to write (default %(default)s)"
    )
    parser.add_argument("--with-user-ids", action="store_true", help="write 'userId,token' lines instead of tokens")
    parser.add_argument("--ttl", type=int, default=86400, help="token lifetime in seconds (default %(default)s)")
    parser.add_argument("--redis-url", default=Settings.from_env().redis_url, help="(default %(default)s)")
    args = parser.parse_args(argv)
    if args.count < 1 or args.first_user < 1:
        parser.error("--count and --first-user must be positive")
    settings = Settings.from_env({**os.environ, "REDIS_URL": args.redis_url})
    try:
        minted = mint_tokens(redis_client(settings), range(args.first_user, args.first_user + args.count), args.ttl)
    except RedisError as exc:
        print(f"cannot write tokens to Redis at {args.redis_url}: {exc}", file=sys.stderr)
        return 2
    lines = (f"{user},{token}" if args.with_user_ids else token for user, token in minted.items())
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(minted)} tokens for users {args.first_user}..{args.first_user + args.count - 1} written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

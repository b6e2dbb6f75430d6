"""``seckill-flash-sale``: the main job, a whole flash sale on this machine
(or, with --endpoint and --stack-name, against a deployed stack).

Applies the schema, starts moto SQS, the local HTTP API (authorizer included)
and the queue feeder, creates a voucher whose sale is open now, mints users,
and fires their presses concurrently through the real request path: with
``--edge`` (the default) through the local edge, the CloudFront Function that
answers the presses already decided (see ``seckill_demo.edge``). Then it
drains the queue, replays the dead-letter queue, reconciles, re-delivers every
order once more, asks the status route about every order id it was given, and
reports. ``--chaos`` injects faults all along (see ``seckill_demo.chaos``);
every random draw of a run (the order of the presses, the faults) comes from
``--seed``, printed at the start and in the report.

With ``--endpoint URL --stack-name NAME`` the same sale runs against a deployed
stack with the caller's AWS credentials (see ``seckill_demo.deployed``); the
report checks what can be seen from outside and names what cannot.

Exit status: 0 every invariant (docs/invariants.md) holds; 1 one does not (or the run
could not complete); 2 a local service or the stack is missing, or an option is invalid.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import urllib3
from botocore.exceptions import BotoCoreError, ClientError

from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Credentials, Database
from seckill.migrate import migrate
from seckill.vouchers import HOLD_SECONDS, MAX_ADMIT_RATE, MAX_HOLD_SECONDS, MIN_HOLD_SECONDS
from seckill_demo.chaos import Chaos
from seckill_demo.deployed import run_deployed_sale
from seckill_demo.pass_faults import KEYS_SECRET, keys_secret
from seckill_demo.sale import LocalSale, console
from seckill_demo.scenario import run_local_sale
from seckill_demo.stack import LocalStack, preflight
from seckill_local.lambdas import local_parameters
from seckill_local.node import MISSING, node
from seckill_local.sqs import LOCAL_AWS


def run(args: argparse.Namespace) -> int:
    os.environ.update({k: v for k, v in LOCAL_AWS.items() if k not in os.environ})
    creds = Credentials(args.db_host, args.db_port, args.db_user, args.db_password, args.db_name)
    if args.chaos and not shutil.which("redis-server"):
        console.print("[bold red]--chaos restarts a Redis of its own: redis-server must be installed")
        return 2
    problem = preflight(Settings.from_env({**os.environ, "REDIS_URL": args.redis_url}), creds)
    if problem:
        console.print(f"[bold red]{problem}")
        return 2
    edge = args.edge is not False and node() is not None
    if args.edge and not edge:
        console.print(f"[bold red]--edge runs the local edge on Node.js. {MISSING}")
        return 2
    if args.edge is None and not edge:
        console.print(f"[yellow]the sale runs without the edge[/]: {MISSING}")
    migrate(creds)
    console.print(f"schema applied to [bold]{creds.database}[/] on {creds.host}:{creds.port}")
    console.print(f"seed {args.seed}")
    with workdir(args.logs) as tmp:
        chaos = Chaos(tmp, args.seed) if args.chaos else None
        redis_url = functions_redis_url = args.redis_url
        stack = None
        try:
            env_vars = {}
            if chaos is not None:
                functions_redis_url = chaos.start()
                redis_url = chaos.private_redis.url
                env_vars = chaos.function_env()
                console.print(f"chaos: a Redis of the run's own on {redis_url}, restarted mid-sale")
            env_vars["Parameters"] = local_parameters(functions_redis_url, creds)
            keys = {}
            if chaos is not None and args.admission == "draw":
                # The pass key ring in Secrets Manager, as in AWS: the chaos run rotates it and makes it unreadable.
                keys = keys_secret()
                env_vars["Parameters"]["PASS_KEYS_SECRET_ARN"] = KEYS_SECRET
            vt = 2 if args.chaos else 10
            stack = LocalStack(
                tmp, env_vars, args.containers, visibility_timeout=vt, edge=edge, clock_apart=args.admission == "draw",
                secrets=keys,
            )  # fmt: skip
            redis = redis_client(Settings.from_env({**os.environ, "REDIS_URL": redis_url}))
            http = urllib3.PoolManager(maxsize=args.concurrency + 4, block=True, retries=False, timeout=30)
            with console.status("starting moto SQS, the local HTTP API (and edge) and the queue feeder..."):
                stack.start()
            console.print(f"local API on {stack.api_url}, SQS on {stack.sqs_endpoint}, logs in {tmp}")
            if stack.edge is not None:
                console.print(f"the users press through the edge on {stack.edge.url}")
            return run_local_sale(LocalSale(args, stack, redis, Database(creds), tmp, http), chaos, creds)
        finally:
            if stack is not None:
                stack.stop()
            if chaos is not None:
                chaos.close()


@contextmanager
def workdir(keep: Path | None) -> Iterator[Path]:
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="seckill-sale-") as tmp:
        yield Path(tmp)


def parser() -> argparse.ArgumentParser:
    defaults = Settings.from_env()
    p = argparse.ArgumentParser(
        prog="seckill-flash-sale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--users", type=int, default=1000, help="distinct users (default %(default)s)")
    p.add_argument("--stock", type=int, default=200, help="vouchers on sale (default %(default)s)")
    p.add_argument("--presses", type=int, default=3, help="presses per user (default %(default)s)")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight at once (default %(default)s)")
    p.add_argument("--containers", type=int, default=4, help="warm API function containers (default %(default)s)")
    p.add_argument(
        "--chaos",
        action="store_true",
        help="inject every fault: SQS sends refused, API crashes after the gate, persister crashes "
        "mid-batch, MySQL connections killed, malformed messages, Redis restarted empty mid-sale; with holds "
        "and the edge also Redis forgetting its edge record and a press's send refused after a sell-out; with "
        "--admission draw also the close's clock message lost and Redis emptied at the close",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=secrets.randbelow(2**32),
        help="seed of every random draw (the presses' order, the faults); default: a new one, printed",
    )
    holds = p.add_argument_group("holds (a winner's order is payable until its deadline, then back on sale)")
    holds.add_argument(
        "--no-show",
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="share of winners who never pay: their units come back at the deadline and new users buy them "
        "in further waves; the other winners pay (default 0; without --no-show, --cancel and --hold nobody pays)",
    )
    holds.add_argument(
        "--cancel", type=float, default=0.0, metavar="FRACTION", help="share of winners who cancel (default 0)"
    )
    holds.add_argument(
        "--hold",
        type=int,
        metavar="SECONDS",
        help=f"the voucher's holdSeconds, {MIN_HOLD_SECONDS}..{MAX_HOLD_SECONDS} (default: the service's, "
        f"{HOLD_SECONDS})",
    )
    holds.add_argument(
        "--waves", type=int, default=5, help="most waves of presses, the first included (default %(default)s)"
    )
    draw = p.add_argument_group(
        "a draw sale (docs/draw.md): entries before the close, passes, the cursor and its waves"
    )
    draw.add_argument(
        "--admission",
        choices=("race", "draw"),
        default="race",
        help="race: first come, first served (default); draw: the users enter a draw that closes before the "
        "opening (--late of them after it, 1%% never), then press with their passes; only the admitted reach "
        "the function, and with holds each later wave is the entrants a move of the cursor admitted",
    )
    draw.add_argument(
        "--admit-factor", type=int, default=2, help="the voucher's admitFactor, 1..100 (default %(default)s)"
    )
    draw.add_argument(
        "--admit-rate",
        type=int,
        help=f"the voucher's admitRate, 1..{MAX_ADMIT_RATE:,}: the most entrants newly admitted in any second, a "
        "larger move admitted in steps one second apart; each entrant presses once its step is in effect, and the "
        "report and a plot show the pace (default: none, every move admitted at once)",
    )
    draw.add_argument(
        "--draw-close",
        type=int,
        default=5,
        metavar="SECONDS",
        help="the voucher's drawCloseSeconds, 5..3600: the draw closes this long before the opening (default "
        "%(default)s; the service's own default is 60)",
    )
    draw.add_argument(
        "--wave-seconds", type=int, default=5, help="the voucher's waveSeconds, 5..3600 (default %(default)s)"
    )
    draw.add_argument(
        "--late",
        type=float,
        default=0.05,
        metavar="FRACTION",
        help="share of the entrants who enter after the draw closed (default %(default)s)",
    )
    draw.add_argument(
        "--entry-seconds",
        type=float,
        metavar="SECONDS",
        help="how long the entries before the close may take (default: planned from the pace a sample of the "
        "users enters a calibration draw at, with half as much again to spare; at least 10)",
    )
    p.add_argument("--shop-id", type=int, default=1, help="shop the voucher belongs to (default %(default)s)")
    p.add_argument("--first-user", type=int, default=1, help="first user id (default %(default)s)")
    p.add_argument("--drain-timeout", type=float, default=120, help="seconds to wait per drain phase (default 120)")
    p.add_argument("--redis-url", default=defaults.redis_url, help="default %(default)s ($REDIS_URL)")
    p.add_argument("--db-host", default=defaults.db_host, help="default %(default)s ($DB_HOST)")
    p.add_argument("--db-port", type=int, default=defaults.db_port, help="default %(default)s ($DB_PORT)")
    p.add_argument("--db-user", default=defaults.db_user, help="default %(default)s ($DB_USER)")
    p.add_argument("--db-password", default=defaults.db_password, help="default: $DB_PASSWORD")
    p.add_argument("--db-name", default=defaults.db_name, help="created if missing (default %(default)s, $DB_NAME)")
    p.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    p.add_argument(
        "--plot",
        type=Path,
        help="draw Redis stock through the sale to this PNG (default with --no-show, --cancel or --hold: "
        "seckill-sale-<voucherId>-stock.png in the current folder)",
    )
    p.add_argument(
        "--edge",
        action=argparse.BooleanOptionalAction,
        help="press through the local edge (the CloudFront Function and its KeyValueStore, kept current by "
        "EdgePublisherFunction) and report what it answered (default: on where Node.js 22.5+ is found, as "
        "`make demo` installs it; --no-edge presses the API directly)",
    )
    p.add_argument(
        "--edge-plot",
        type=Path,
        help="draw the presses answered at the edge and by the function to this PNG (default with --edge: "
        "seckill-sale-<voucherId>-edge.png in the current folder)",
    )
    p.add_argument("--logs", type=Path, help="keep the runner's logs in this folder (default: a temporary one)")
    deployed = p.add_argument_group(
        "a deployed stack (instead of the local services; AWS credentials as boto3 finds them)"
    )
    deployed.add_argument(
        "--endpoint", help="the stack's ApiEndpoint, e.g. https://abc123.execute-api.eu-west-1.amazonaws.com"
    )
    deployed.add_argument(
        "--stack-name", help="the stack whose outputs name its queues and TokenMinterFunction (EnableTestTokens=true)"
    )
    deployed.add_argument("--region", help="the stack's region (default: the AWS configuration's)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("users", "stock", "presses", "concurrency", "containers", "shop_id", "first_user", "waves"):
        if getattr(args, name) < 1:
            parser().error(f"--{name.replace('_', '-')} must be at least 1")
    if args.hold is not None and not MIN_HOLD_SECONDS <= args.hold <= MAX_HOLD_SECONDS:
        parser().error(
            f"--hold must be {MIN_HOLD_SECONDS} to {MAX_HOLD_SECONDS} seconds (the contract's holdSeconds), "
            f"not {args.hold}"
        )
    if not (0 <= args.no_show <= 1 and 0 <= args.cancel <= 1 and args.no_show + args.cancel <= 1):
        parser().error("--no-show and --cancel are shares of the winners: each 0 to 1, together at most 1")
    if args.endpoint and (args.no_show or args.cancel or args.hold is not None):
        parser().error("--no-show, --cancel and --hold run on the local services only, not with --endpoint")
    draw_options = {"admit_factor": (1, 100), "draw_close": (5, 3600), "wave_seconds": (5, 3600)}
    for name, (low, high) in draw_options.items():
        if not low <= getattr(args, name) <= high:
            parser().error(f"--{name.replace('_', '-')} must be {low} to {high}")
    if args.admit_rate is not None and not 1 <= args.admit_rate <= MAX_ADMIT_RATE:
        parser().error(
            f"--admit-rate must be 1 to {MAX_ADMIT_RATE:,} (the contract's admitRate), not {args.admit_rate}"
        )
    if args.admit_rate is not None and args.admission != "draw":
        parser().error("--admit-rate paces a draw's admission: it needs --admission draw")
    if not 0 <= args.late <= 1:
        parser().error("--late is a share of the entrants: 0 to 1")
    if args.admission == "draw" and args.endpoint:
        parser().error("--admission draw runs on the local services, not with --endpoint")
    if bool(args.endpoint) != bool(args.stack_name):
        parser().error("--endpoint and --stack-name go together")
    if args.endpoint and (args.edge or args.edge_plot):
        parser().error("--edge and --edge-plot run the local edge, not with --endpoint")
    if args.endpoint and args.chaos:
        parser().error("--chaos injects faults into the local services only, not with --endpoint")
    try:
        return run_deployed_sale(args) if args.endpoint else run(args)
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/] (replay with --seed {args.seed})")
        return 130
    except (RuntimeError, BotoCoreError, ClientError) as exc:
        console.print(f"[bold red]{exc}[/]\nreplay with --seed {args.seed}")
        return 1


if __name__ == "__main__":
    sys.exit(main())

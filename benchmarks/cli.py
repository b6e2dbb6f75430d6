"""Seckill's benchmarks, side by side in one run (issue 8's measurements).

  experiment    (1) SeckillApiFunction vs a synchronous baseline handler: a full sale,
                the losers' storm after sell-out, many in flight on a small MySQL pool
  transport     (2) the SQS stand-ins (fauxqs; moto behind three HTTP servers): SQS's
                behaviours Seckill relies on, and SendMessage by queue depth
  path          (3) refused / duplicate / accepted presses: handler vs place_order vs bare EVALSHA;
                the handler's own press path vs the resolver's
  persister     (4) OrderPersisterFunction vs raw PyMySQL on one hot row; draining N queued orders
  cold          (5) each function's fresh-process init vs its libraries' bare imports; peak RSS
  edge          (6) a sold-out voucher's refused presses: the local edge vs the local API without it
                vs an HTTP round trip to Node.js; a state change's way to the edge's answer
  draw          (7) a draw's press (its pass verified, its ticket below the cursor) vs a race's,
                accepted and duplicate; the pass check alone
  crowd         (8) whole local sales through the edge, a race vs a draw: the presses that reach
                the function in the crowd's first second
  entries       (9) a draw's entry route (early, late, the look-up) beside an accepted and a refused
                press; entries per second from several workers vs bare PyMySQL doing the same writes

Everything runs on this machine: the local Redis and MySQL (shared; the run makes
its own database and keys and removes them), and an SQS stand-in of its own (fauxqs
by default, installed by make bench; --transport picks another). Writes
<out>/latest.json and PNG plots, and prints the tables with the issue's targets.

Exit codes: 0 measured (targets met or not), 1 a correctness check failed (a side
did not sell exactly the stock, a sale of (8) failed one of its checks, or the entries of (9)
were not one per user, counted and numbered exactly), 2 Redis or
MySQL unreachable, or bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from rich.console import Console

from benchmarks import (
    cold_start,
    crowd,
    draw,
    edge,
    entries,
    experiment,
    persister,
    request_path,
    targets,
    transport,
)
from benchmarks.servers import SERVERS, STAND_INS
from benchmarks.testbed import BenchStack, StackInfo
from seckill_local.checkout import ROOT

SECTIONS = ("experiment", "transport", "path", "persister", "cold", "edge", "draw", "crowd", "entries")
BOUNDS = [
    "2 shared cores: load generator, handlers, Redis, MySQL and the SQS stand-in all compete for them; compare "
    "ratios measured side by side, not absolute figures.",
    "SQS is a local stand-in in a process of its own (sqs_stand_in above), not AWS's: real SQS costs no local "
    "CPU but has its own latency. Figures 'without SQS' subtract the time measured inside SendMessage and are "
    "labelled as such.",
    "Handlers are called in-process by long-lived workers, one request at a time each: no API Gateway, no "
    "Lambda service, no network between tiers. Powertools as deployed except tracing (no X-Ray daemon here).",
    "Server counters are global and the servers are shared: per-request figures are the least disturbed round.",
]


@dataclass(frozen=True)
class Profile:
    experiment: experiment.Sizes
    depths: tuple[int, ...]
    sends: int
    path: request_path.Sizes
    persister: persister.Sizes
    persister_concurrency: int | None  # None: the template's PersisterMaxConcurrency
    cold_repeats: int
    cold_functions: tuple[str, ...] | None  # None: every function
    edge: edge.Sizes
    draw: draw.Sizes
    crowd: crowd.Sizes
    entries: entries.Sizes


PROFILES = {
    "full": Profile(
        experiment.Sizes(1000, 3, 200, 2.0, (4, 8), inflight=32, mysql_pool=4, rounds=5),
        (0, 200, 1000),
        30,
        request_path.Sizes(refusals=4000, accepted=200, rounds=5),
        persister.Sizes(rows=2000, drain=10_000, drain_via_sqs=10_000, rounds=3),
        None,
        7,
        None,
        edge.Sizes(presses=3000, concurrency=8, rounds=3, changes=20),
        draw.Sizes(presses=1000, rounds=5, verifies=20_000),
        crowd.Sizes(users=3000, stock=30, rounds=3),
        entries.Sizes(calls=1000, entries=2000, workers=4, rounds=5),
    ),
    "quick": Profile(
        experiment.Sizes(300, 3, 60, 1.0, (4, 8), inflight=12, mysql_pool=4, rounds=2),
        (0, 200),
        10,
        request_path.Sizes(refusals=1000, accepted=30, rounds=3),
        persister.Sizes(rows=300, drain=1000, drain_via_sqs=100, rounds=2),
        None,
        3,
        None,
        edge.Sizes(presses=1000, concurrency=8, rounds=2, changes=10),
        draw.Sizes(presses=300, rounds=3, verifies=5000),
        crowd.Sizes(users=2000, stock=20, rounds=2),
        entries.Sizes(calls=300, entries=1000, workers=4, rounds=3),
    ),
    "smoke": Profile(
        experiment.Sizes(30, 3, 6, 0.2, (2,), inflight=2, mysql_pool=1, rounds=1),
        (0, 20),
        2,
        request_path.Sizes(refusals=20, accepted=2, rounds=1),
        persister.Sizes(rows=20, drain=40, drain_via_sqs=20, rounds=1),
        1,
        1,
        ("SeckillApiFunction",),
        edge.Sizes(presses=40, concurrency=2, rounds=1, changes=2),
        draw.Sizes(presses=20, rounds=1, verifies=100),
        crowd.Sizes(users=200, stock=4, rounds=1),
        entries.Sizes(calls=20, entries=40, workers=2, rounds=1),
    ),
}


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _quiet() -> None:
    """A section's process: Powertools' metrics and logs (stdout) are not ours to print."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)


def _in_child(work: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """A section in a fresh process: it imports handlers and sets their environment."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=_quiet) as pool:
        return pool.submit(work, *args).result()


def _meta(profile: str, info: StackInfo, args: argparse.Namespace) -> dict[str, Any]:
    def command(*cmd: str) -> str:
        try:
            # Fixed commands of our own, for the report's header.
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False).stdout.strip()  # noqa: S603
        except OSError:
            return ""

    from importlib.metadata import version

    return {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "profile": profile,
        "sections": args.only,
        "commit": command("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "packages": {name: version(name) for name in ("aws-lambda-powertools", "boto3", "redis", "pymysql", "moto")},
        "sqs_stand_in": STAND_INS[info.transport],
        "bounds": BOUNDS,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes and fewer rounds (about 2 minutes)")
    size.add_argument("--smoke", action="store_true", help="the smallest sizes: proves it runs (the test uses it)")
    parser.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help=f"comma-separated sections to run (default all: {','.join(SECTIONS)})",
    )
    parser.add_argument("--rounds", type=int, help="rounds of the experiment (default: 5 full, 2 quick)")
    parser.add_argument(
        "--transport",
        choices=SERVERS,
        default="fauxqs",
        help="the SQS stand-in the handlers and the persister use (default fauxqs; werkzeug: moto, as in the tests)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results", help="where latest.json and the PNGs go"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--show", type=Path, metavar="JSON", help="print the tables of a saved report and exit")
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(args.only) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.show:
        targets.print_report(json.loads(args.show.read_text(encoding="utf-8")), console)
        return 0
    name = "smoke" if args.smoke else "quick" if args.quick else "full"
    profile = PROFILES[name]
    sizes = (
        profile.experiment
        if args.rounds is None
        else experiment.Sizes(**{**asdict(profile.experiment), "rounds": args.rounds})
    )
    started = time.monotonic()
    _progress(f"{name} run of {', '.join(args.only)}; SQS stand-in: {STAND_INS[args.transport]}")
    try:
        stack = BenchStack.start(args.transport)
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    out: dict[str, Any] = {"meta": _meta(name, stack.info, args)}
    try:
        if "experiment" in args.only:
            out["experiment"] = _in_child(experiment.run, stack.info, sizes, _progress)
        if "transport" in args.only:
            out["transport"] = _in_child(transport.run, list(profile.depths), profile.sends, _progress)
        if "path" in args.only:
            _progress("request path: handler vs place_order vs bare EVALSHA, and vs the resolver's path")
            out["request_path"] = _in_child(request_path.run, stack.info, profile.path)
        if "persister" in args.only:
            _progress("persister: handler vs raw PyMySQL, then the drain")
            concurrency = profile.persister_concurrency or int(stack_parameter("PersisterMaxConcurrency", 5))
            out["persister"] = _in_child(persister.run, stack.info, profile.persister, concurrency)
        if "cold" in args.only:
            functions = list(profile.cold_functions) if profile.cold_functions else None
            out["cold_start"] = _in_child(cold_start.run, stack.info, profile.cold_repeats, functions, _progress)
        if "edge" in args.only:
            _progress("edge: refused presses at the edge vs the API without it vs Node's floor; the state's way")
            out["edge"] = _in_child(edge.run, stack.info, profile.edge)
        if "draw" in args.only:
            _progress("draw: a draw's press (pass and cursor) vs a race's, side by side; the pass check alone")
            out["draw"] = _in_child(draw.run, stack.info, profile.draw)
        if "crowd" in args.only:
            args.out.mkdir(parents=True, exist_ok=True)
            out["crowd"] = crowd.run(stack.info, profile.crowd, args.out, _progress)
        if "entries" in args.only:
            _progress("entries: the entry route beside a press; entries/s from workers vs bare PyMySQL's same writes")
            out["entries"] = _in_child(entries.run, stack.info, profile.entries)
    finally:
        stack.close()
    out["targets"] = targets.targets(out)
    failed = [c for c in out.get("experiment", {}).get("checks", []) if not c["exact"]]
    failed += [sale for sales in out.get("crowd", {}).get("rounds", []) for sale in sales.values() if not sale["ok"]]
    failed += [c for c in out.get("entries", {}).get("checks", []) if not c["exact"]]
    out["meta"]["seconds"] = round(time.monotonic() - started, 1)
    out["meta"]["correct"] = not failed
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    plots = [] if args.no_plots else _plots(out, args.out)
    targets.print_report(out, console)
    console.print(
        f"report: {args.out / 'latest.json'}" + (f"; plots: {', '.join(p.name for p in plots)}" if plots else "")
    )
    console.print(f"bounds: {' '.join(BOUNDS)}")
    if failed:
        console.print(f"[red]{len(failed)} phases did not sell exactly the stock, or sales failed a check[/]")
        return 1
    return 0


def _plots(report_data: dict[str, Any], out: Path) -> list[Path]:
    from benchmarks.plots import plot

    return plot(report_data, out)


def stack_parameter(name: str, default: int) -> int:
    from seckill_local.template import Template

    return int(Template.load().parameters.get(name) or default)

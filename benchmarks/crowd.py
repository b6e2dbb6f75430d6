"""(8) The crowd's first second at the function: a race against a draw, each a whole local sale.

Each contender is the main job (``seckill_demo.flash_sale``) as a user runs it, through
the local edge, with the same users, stock, presses (3 each) and seed, so the crowd
presses in the same order:

- ``race``: first come, first served: every press reaches the function until the
  sold-out state reaches the edge's store;
- ``draw``: the users enter a draw before the opening (``admitFactor`` 2: twice the
  stock admitted); the edge answers every press without a pass or with a ticket not
  yet admitted, so only the admitted reach the function.

Reported per sale, from the main job's JSON report (its edge figures): the presses the
function answered in the crowd's first second (from its first press: its presses per
second there), all the presses that reached it, and the share the edge answered. The
rounds alternate which contender goes first; the edge plots of the last round's sales
(presses per 100 ms at the edge and at the function) are kept beside the report.

What bounds it: the whole stack runs on this machine's two cores (the load generator,
the local edge on Node.js, the local API with its containers, moto SQS, Redis, MySQL),
so the function's rate in the first second is this machine's, not Lambda's; the ratio
of the two contenders is the figure to read.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.stats import ratio
from benchmarks.testbed import StackInfo, far_id

MODES = ("race", "draw")


@dataclasses.dataclass(frozen=True)
class Sizes:
    users: int
    stock: int
    rounds: int


def sale(info: StackInfo, sizes: Sizes, mode: str, seed: int, plot: Path) -> dict[str, Any]:
    """One whole sale by the main job; its report's figures about the crowd."""
    creds = info.creds
    with tempfile.TemporaryDirectory(prefix="seckill-crowd-") as folder:
        report_file = Path(folder) / "report.json"
        command = [
            sys.executable, "-m", "seckill_demo.flash_sale",
            "--users", str(sizes.users), "--stock", str(sizes.stock), "--admission", mode,
            "--seed", str(seed), "--first-user", str(far_id()), "--edge", "--edge-plot", str(plot),
            "--redis-url", info.redis_url, "--db-host", creds.host, "--db-port", str(creds.port),
            "--db-user", creds.user, "--db-password", creds.password, "--db-name", creds.database,
            "--json", str(report_file),
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, cwd=folder, timeout=1800, check=False)  # noqa: S603
        if not report_file.exists():
            raise RuntimeError(f"the {mode} sale did not report (exit {done.returncode}): {done.stderr[-2000:]}")
        report = json.loads(report_file.read_text(encoding="utf-8"))
    edge = report["edge"]
    return {
        "mode": mode,
        "seed": seed,
        "ok": report["ok"],
        "presses": report["requests"],
        "first_second": edge["first_second"],
        "first_second_at_function": edge["first_second_forwarded"],
        "at_function": edge["forwarded"],
        "share_at_edge": edge["share_of_presses"],
        "admitted": report["draw"]["admitted"] if report.get("draw") else None,
        # What a reader needs to replay a sale that failed a check (--seed is the round's).
        "failed_checks": [c for c in report["checks"] if not c["ok"]],
    }


def run(info: StackInfo, sizes: Sizes, out: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    rounds = []
    for r in range(sizes.rounds):
        seed = secrets.randbelow(2**32)
        order = MODES if r % 2 == 0 else MODES[::-1]
        sales = {}
        for mode in order:
            progress(f"crowd: round {r + 1}/{sizes.rounds}, a {mode} sale ({sizes.users:,} users, seed {seed})")
            sales[mode] = sale(info, sizes, mode, seed, out / f"crowd-{mode}.png")
        rounds.append(sales)
    summary: dict[str, dict[str, Any]] = {}
    for mode in MODES:
        of_mode = [sales[mode] for sales in rounds]
        summary[mode] = {
            field: statistics.median(s[field] for s in of_mode)
            for field in ("first_second", "first_second_at_function", "at_function", "share_at_edge")
        }
        summary[mode]["ok"] = all(s["ok"] for s in of_mode)
    race_over_draw = [
        ratio(sales["race"]["first_second_at_function"], sales["draw"]["first_second_at_function"])
        for sales in rounds
        if sales["draw"]["first_second_at_function"]
    ]
    return {
        "sizes": dataclasses.asdict(sizes),
        "rounds": rounds,
        "summary": summary,
        # Median of the rounds' own ratios; absent when the draw let no press through in its first second.
        "first_second_race_over_draw": statistics.median(race_over_draw) if race_over_draw else None,
    }


def print_crowd(crowd: dict[str, Any], console: Console) -> None:
    s = crowd["sizes"]
    table = Table(
        title=f"(8) The crowd's first second at the function: whole local sales through the edge, {s['users']:,} "
        f"users x 3 presses for {s['stock']:,} units (medians of {s['rounds']} rounds)"
    )
    for col in ("admission", "first second: presses", "of them at the function", "all at the function", "at the edge"):
        table.add_column(col, justify="left" if col == "admission" else "right")
    for mode, row in crowd["summary"].items():
        table.add_row(
            mode + ("" if row["ok"] else " [red](a check failed)[/]"),
            f"{row['first_second']:,.0f}",
            f"{row['first_second_at_function']:,.0f}",
            f"{row['at_function']:,.0f}",
            f"{row['share_at_edge']:.1%}",
        )
    console.print(table)
    for sales in crowd["rounds"]:
        for sale in sales.values():
            for check in sale.get("failed_checks", []):
                console.print(
                    f"[red]{sale['mode']} sale, seed {sale['seed']}: {check['name']} failed[/]: {check['detail']}"
                )
    over = crowd["first_second_race_over_draw"]
    console.print(
        "the function's presses in the first second, race / draw: "
        + (f"{over:.1f}x" if over is not None else "the draw let none through")
    )

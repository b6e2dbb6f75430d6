"""The issue's targets checked against a report, and the report as tables."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from benchmarks.crowd import print_crowd
from benchmarks.entries import print_entries


def _row(report: dict[str, Any], scenario: str, side: str = "ours") -> dict[str, Any] | None:
    rows = [
        r for r in report.get("experiment", {}).get("results", []) if r["scenario"] == scenario and r["side"] == side
    ]
    return max(rows, key=lambda r: r["workers"]) if rows else None  # the most workers (8 by default)


def _target(
    name: str, measured: float | None, goal: float, higher_is_better: bool, unit: str, why: str = ""
) -> dict[str, Any]:
    """``why``: what the same report says about a miss (kept only when the goal is missed)."""
    if measured is None:
        return {"target": name, "goal": goal, "unit": unit, "measured": None, "met": None, "margin": None, "why": ""}
    met = measured >= goal if higher_is_better else measured <= goal
    # How far from the goal, as a factor: > 1 is met by that much, < 1 is missed by that much.
    margin = (measured / goal if higher_is_better else goal / measured) if measured and goal else None
    return {
        "target": name,
        "goal": goal,
        "unit": unit,
        "measured": measured,
        "met": met,
        "margin": round(margin, 3) if margin else None,
        "why": "" if met else why,
    }


def _why_throughput(full: dict[str, Any], stand_in: str) -> str:
    return (
        f"SendMessage on {stand_in} is {full['transport_share']:.0%} of our presses' time; without it "
        f"{full['vs_baseline']['throughput_without_transport']:.2f}x "
        "(an estimate: each worker's time less its SQS calls)"
    )


def _why_p99(full: dict[str, Any], base: dict[str, Any] | None, stand_in: str) -> str:
    accepted = full["outcomes"].get("202", 0) / max(1, sum(full["outcomes"].values()))
    without = full["without_transport"]["latency"]["p99"]
    versus = f", {without / base['latency']['p99']:.2f}x the baseline's" if base and base["latency"]["p99"] else ""
    return (
        f"our p99 ({full['latency']['p99']:.1f} ms) is an accepted press ({accepted:.1%} of presses are accepted): "
        f"its round trips (gate, SendMessage on {stand_in}, promise) each wait for 2 cores "
        f"shared by {full['workers']} workers and every server; "
        f"without SendMessage's time it is {without:.1f} ms{versus}"
    )


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    storm, full = _row(report, "b"), _row(report, "a")
    stand_in = report.get("meta", {}).get("sqs_stand_in", "the SQS stand-in")
    if storm is not None:
        w = storm["workers"]
        found.append(
            _target(
                f"losers' storm, {w} workers: throughput vs baseline",
                storm["vs_baseline"]["throughput"],
                25.0,
                True,
                "x",
                f"a refusal takes {storm['latency']['p50']:.3f} ms at p50 with {storm['usage']['redis_commands']:.2f} "
                f"Redis commands; {w} workers and every server share 2 cores",
            )
        )
    if full is not None:
        w = full["workers"]
        found.append(
            _target(
                f"full experiment, {w} workers: throughput vs baseline (SQS included)",
                full["vs_baseline"]["throughput"],
                2.5,
                True,
                "x",
                _why_throughput(full, stand_in),
            )
        )
        found.append(
            _target(
                f"full experiment, {w} workers: p99 vs baseline's",
                full["vs_baseline"]["p99"],
                0.2,
                False,
                "x",
                _why_p99(full, _row(report, "a", "baseline"), stand_in),
            )
        )
    paths = {(r["kind"], r["contender"]): r for r in report.get("request_path", {}).get("results", [])}
    if ("refused_cache_off", "handler") in paths:
        handler, floor = paths[("refused_cache_off", "handler")], paths.get(("refused_cache_off", "evalsha"))
        place = paths.get(("refused_cache_off", "place_order"))
        found.append(
            _target(
                "refused press (cache off): handler vs bare EVALSHA",
                handler["vs_evalsha"],
                1.3,
                False,
                "x",
                f"the handler takes {handler['us']:.1f} µs, place_order {place['us']:.1f} µs, "
                f"a bare EVALSHA {floor['us']:.1f} µs (one process, one request at a time)"
                if place and floor
                else "",
            )
        )
    if ("accepted", "place_order") in paths:
        winner = paths[("accepted", "place_order")]
        found.append(
            _target(
                "a winning press in-process (place_order, SQS included): median",
                winner["us"] / 1000,
                1.0,
                False,
                "ms",
                f"{winner['us_without_transport']:.0f} µs without SendMessage; "
                f"{winner['redis_round_trips']:.2f} Redis round trips per press",
            )
        )
        found.append(
            _target(
                "a winning press: Redis round trips (gate, then promise and hint pipelined)",
                winner["redis_round_trips"],
                2.0,
                False,
                "",
                "the block lease adds one round trip per block of order ids",
            )
        )
    if ("refused_cache_warm", "handler") in paths:
        found.append(
            _target(
                "refused press (sold-out cache warm): handler",
                paths[("refused_cache_warm", "handler")]["us"],
                40.0,
                False,
                "µs",
                "place_order takes {:.1f} µs of it; the rest is the handler's event and answer".format(
                    paths[("refused_cache_warm", "place_order")]["us"]
                )
                if ("refused_cache_warm", "place_order") in paths
                else "",
            )
        )
    persister = {r["contender"]: r for r in report.get("persister", {}).get("results", [])}
    if "raw_per_batch_send" in persister:
        found.append(
            _target(
                "persister vs its floor: raw PyMySQL per batch plus one bare boto3 SendMessageBatch",
                persister["raw_per_batch_send"]["handler_share"],
                0.9,
                True,
                "x",
                "per row the handler runs {:.2f} MySQL statements and {:.2f} Redis commands, the floor {:.2f} "
                "statements".format(
                    persister["handler"]["usage"]["mysql_statements"],
                    persister["handler"]["usage"]["redis_commands"],
                    persister["raw_per_batch_send"]["usage"]["mysql_statements"],
                ),
            )
        )
        found.append(
            _target(
                "persister vs raw PyMySQL, per batch with merged decrement (a floor read beside the target)",
                persister["raw_per_batch_merged"]["handler_share"],
                0.7,
                True,
                "x",
                "per row the handler runs {:.2f} MySQL statements and {:.2f} Redis commands, the floor "
                "{:.2f} statements: it also locks the vouchers' rows and reads what is stored (per-record "
                "outcomes), pipelines the marks and hints to Redis, and goes through Powertools' batch "
                "processing".format(
                    persister["handler"]["usage"]["mysql_statements"],
                    persister["handler"]["usage"]["redis_commands"],
                    persister["raw_per_batch_merged"]["usage"]["mysql_statements"],
                ),
            )
        )
    for row in report.get("cold_start", {}).get("results", []):
        beyond = ", ".join(row["imported_beyond_libraries"]) or "nothing"
        found.append(
            _target(
                f"{row['function']}: init vs its libraries' bare imports",
                row["ratio"],
                1.2,
                False,
                "x",
                f"init {row['init_ms']:.0f} ms, bare imports {row['bare_imports_ms']:.0f} ms; "
                f"imported beyond its libraries: {beyond}",
            )
        )
    draws = {(r["kind"], r["mode"]): r for r in report.get("draw", {}).get("results", [])}
    if ("accepted", "draw") in draws:
        accepted, race = draws[("accepted", "draw")], draws[("accepted", "race")]
        found.append(
            _target(
                "accepted press, draw (pass and cursor) vs race: handler p50 (issue 25)",
                accepted["vs_race"]["p50_us"],
                1.2,
                False,
                "x",
                f"draw {accepted['p50_us']:,.0f} µs, race {race['p50_us']:,.0f} µs; the pass check alone "
                f"{report['draw']['verify_us']:.1f} µs",
            )
        )
    return found


def _ms(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def print_report(report: dict[str, Any], console: Console) -> None:
    if "experiment" in report:
        exp = report["experiment"]
        table = Table(title="(1) The original experiment: Seckill vs the synchronous baseline (medians of rounds)")
        for col in (
            "scn",
            "wrk",
            "side",
            "req/s",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "accepted p50",
            "SQS share",
            "MySQL/press",
            "Redis/press",
            "vs baseline",
        ):
            table.add_column(col, justify="right" if col not in {"side", "scn"} else "left")
        for r in exp["results"]:
            vs = r.get("vs_baseline")
            versus = f"{vs['throughput']:.2f}x req/s, {vs['p99']:.2f}x p99" if vs else ""
            table.add_row(
                r["scenario"],
                str(r["workers"]),
                r["side"],
                f"{r['throughput']:,.0f}",
                _ms(r["latency"]["p50"]),
                _ms(r["latency"]["p95"]),
                _ms(r["latency"]["p99"]),
                _ms(r["accepted_latency"]["p50"]),
                f"{r['transport_share']:.0%}" if r["side"] == "ours" else "",
                f"{r['usage']['mysql_statements']:.2f}",
                f"{r['usage']['redis_commands']:.2f}",
                versus,
            )
            if r["side"] == "ours" and r["transport_share"] > 0:
                wt = r["without_transport"]
                table.add_row(
                    "",
                    "",
                    "  without SQS (est.)",
                    f"{wt['throughput_estimate']:,.0f}",
                    _ms(wt["latency"]["p50"]),
                    "",
                    _ms(wt["latency"]["p99"]),
                    _ms(wt["accepted_latency"]["p50"]),
                    "",
                    "",
                    "",
                    f"{vs['throughput_without_transport']:.2f}x req/s" if vs else "",
                )
        console.print(table)
        bad = [c for c in exp["checks"] if not c["exact"]]
        sold = (
            "every side sold exactly the stock, one per user"
            if not bad
            else f"{len(bad)} phases did NOT sell exactly the stock"
        )
        s = exp["sizes"]
        console.print(
            f"a: {s['users']:,} users x {s['presses_per_user']} vs stock {s['stock']}; "
            f"b: fresh users pressing after sell-out for {s['storm_seconds']:g} s per side; "
            f"c: {s['inflight']} in flight, baseline's MySQL pool {s['mysql_pool']}. {sold}. "
            "Server counters: the least disturbed round (the servers are shared); "
            "Redis counts the commands run inside scripts too."
        )
    if "transport" in report:
        table = Table(title="(2) The SQS stand-ins: SQS's behaviours Seckill relies on, and SendMessage by queue depth")
        for col in ("stand-in", "behaviours", "depth", "p50 ms", "p95 ms", "p99 ms"):
            table.add_column(col, justify="left" if col in {"stand-in", "behaviours"} else "right")
        for r in report["transport"]["results"]:
            checks = r["conformance"]
            kept = f"{sum(checks.values())}/{len(checks)} kept"
            for i, p in enumerate(r["points"]):
                name, behaviours = (r["server"], kept) if i == 0 else ("", "")
                table.add_row(name, behaviours, f"{p['depth']:,}", _ms(p["p50"]), _ms(p["p95"]), _ms(p["p99"]))
        console.print(table)
        for r in report["transport"]["results"]:
            for check, kept in r["conformance"].items():
                if not kept:
                    console.print(f"  [red]{r['server']} does not keep: {check}[/]")
        for name, why in report["transport"]["not_usable"].items():
            console.print(f"  not measured: {name}: {why}")
    if "request_path" in report:
        table = Table(title="(3) The request path against its floor (µs per request, one process, medians of rounds)")
        for col in ("press", "contender", "µs", "µs without SQS", "vs EVALSHA", "Redis trips", "Redis cmds", "MySQL"):
            table.add_column(col, justify="left" if col in {"press", "contender"} else "right")
        for r in report["request_path"]["results"]:
            table.add_row(
                r["kind"],
                r["contender"],
                f"{r['us']:,.1f}",
                f"{r['us_without_transport']:,.1f}",
                f"{r['vs_evalsha']:.2f}x" if r["vs_evalsha"] else "",
                f"{r['redis_round_trips']:.2f}",
                f"{r['usage']['redis_commands']:.2f}",
                f"{r['usage']['mysql_statements']:.2f}",
            )
        console.print(table)
    if "persister" in report:
        p = report["persister"]
        table = Table(title="(4) The persister against MySQL's floor, one hot voucher row (rows/s, medians of rounds)")
        for col in ("contender", "rows/s", "handler as share", "MySQL/row", "Redis/row"):
            table.add_column(col, justify="left" if col == "contender" else "right")
        for r in p["results"]:
            table.add_row(
                r["contender"],
                f"{r['rows_per_s']:,.0f}",
                f"{r['handler_share']:.0%}",
                f"{r['usage']['mysql_statements']:.2f}",
                f"{r['usage']['redis_commands']:.2f}",
            )
        console.print(table)
        for d in (p["drain"], p["drain_via_sqs"]):
            transport_note = (
                f"; the pollers spent {d['transport_share']:.0%} of their time in SQS" if d["transport_share"] else ""
            )
            console.print(
                f"drain from {d['via']}: {d['stored']:,} of {d['orders']:,} orders stored in {d['seconds']:.1f} s "
                f"({d['rows_per_s']:,.0f} rows/s, {d['concurrency']} containers, batches of 10){transport_note}."
            )
    if "cold_start" in report:
        table = Table(
            title="(5) Cold start: fresh-process `import app` vs a bare import of every library its code names "
            "(and of those it imports at module level only), medians"
        )
        for col in (
            "function",
            "init ms",
            "bare ms",
            "ratio",
            "module-level only",
            "RSS MB",
            "bare RSS MB",
            "imported beyond its libraries",
        ):
            table.add_column(col, justify="left" if col in {"function", "imported beyond its libraries"} else "right")
        for r in report["cold_start"]["results"]:
            table.add_row(
                r["function"],
                f"{r['init_ms']:,.0f}",
                f"{r['bare_imports_ms']:,.0f}",
                f"{r['ratio']:.2f}x",
                f"{r['bare_module_level_ms']:,.0f} ms, {r['ratio_module_level']:.2f}x",
                f"{r['init_rss_mb']:.0f}",
                f"{r['bare_rss_mb']:.0f}",
                ", ".join(r["imported_beyond_libraries"]) or "-",
            )
        console.print(table)
    if "edge" in report:
        _print_edge(report["edge"], console)
    if "draw" in report:
        _print_draw(report["draw"], console)
    if "crowd" in report:
        print_crowd(report["crowd"], console)
    if "entries" in report:
        print_entries(report["entries"], console)
    table = Table(title="Targets (issues 8 and 25)")
    for col in ("target", "goal", "measured", "", "by"):
        table.add_column(col, justify="left" if col == "target" else "right")
    for t in report.get("targets", []):
        if t["measured"] is None:
            continue
        verdict = "[green]met[/]" if t["met"] else "[red]missed[/]"
        by = f"{t['margin']:.2f}x" if t["margin"] else ""
        table.add_row(t["target"], f"{t['goal']:g}{t['unit']}", f"{t['measured']:g}{t['unit']}", verdict, by)
    console.print(table)
    for t in report.get("targets", []):
        if t.get("why"):
            console.print(f"  missed, {t['target']}: {t['why']}")


def _print_edge(edge: dict[str, Any], console: Console) -> None:
    s = edge["sizes"]
    table = Table(
        title=f"(6) A sold-out voucher's refused presses, {s['concurrency']} in flight, contenders taking turns "
        "(medians of rounds)"
    )
    for col in ("contender", "presses/s", "p50 ms", "p95 ms", "p99 ms", "answers"):
        table.add_column(col, justify="left" if col in {"contender", "answers"} else "right")
    for r in edge["results"]:
        answers = ", ".join(f"{n:,} {label}" for label, n in r["answers"].items())
        lat = r["latency"]
        table.add_row(
            r["contender"], f"{r['throughput']:,.0f}", _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]), answers
        )
    console.print(table)
    q = edge["ratios"]
    console.print(
        f"edge vs api (the design it replaces), same run: {q['edge_vs_api_throughput']:.2f}x the presses/s, "
        f"api's p50 {q['api_vs_edge_p50']:.2f}x and p99 {q['api_vs_edge_p99']:.2f}x the edge's; "
        f"edge vs api_cache_off (every refusal through the gate in Redis): "
        f"{q['edge_vs_api_cache_off_throughput']:.2f}x the presses/s, its p50 {q['api_cache_off_vs_edge_p50']:.2f}x; "
        f"edge vs the floor (a bare HTTP round trip to Node.js): {q['edge_vs_floor_throughput']:.2f}x the presses/s, "
        f"p50 {q['edge_vs_floor_p50']:.2f}x. Bodies byte-identical to the function's: {edge['bodies_equal']}; "
        f"the edge server counted {edge['edge_counted']['answered']:,} answered, "
        f"{edge['edge_counted']['forwarded']:,} forwarded."
    )
    st = edge["state"]
    table = Table(
        title=f"The state's way: change in Redis -> notice -> EdgeStateQueue -> EdgePublisherFunction (local feeder) "
        f"-> the store -> the edge's answer ({len(st['changes'])} changes, probes every {st['probe_pause_ms']:g} ms)"
    )
    for col in ("change", "n", "p50 ms", "p95 ms", "p99 ms", "mean ms"):
        table.add_column(col, justify="left" if col == "change" else "right")
    for name, key, changes in (
        ("sold out (last unit sold)", "sold_out", ("sold out",)),
        ("given back", "given_back", ("given back",)),
        ("all", "lag", ("sold out", "given back")),
    ):
        n = sum(1 for c in st["changes"] if c["change"] in changes)
        lat = st[key]
        table.add_row(name, str(n), _ms(lat["p50"]), _ms(lat["p95"]), _ms(lat["p99"]), _ms(lat["mean"]))
    console.print(table)
    console.print(
        "Bounds: local stand-ins on the shared cores. 'api' is the local runner's HTTP server calling warm "
        "containers through process pools, not API Gateway and Lambda; 'edge' is edge/press.js on Node.js here, "
        "not CloudFront (no viewer network, no edge location); the state's way ends at the store in the edge's "
        "own process, so it leaves out the KeyValueStore's propagation to the edge locations, for which AWS "
        "gives no figure."
    )


def _print_draw(draw: dict[str, Any], console: Console) -> None:
    table = Table(
        title="(7) A draw's press against a race's: SeckillApiFunction's handler, one process, one press at a time, "
        "taking turns (µs, medians of rounds)"
    )
    for col in ("press", "admission", "p50 µs", "p99 µs", "p50 µs without SQS", "draw / race p50", "draw / race p99"):
        table.add_column(col, justify="left" if col in {"press", "admission"} else "right")
    for r in draw["results"]:
        ratios = r.get("vs_race")
        table.add_row(
            r["kind"],
            r["mode"],
            f"{r['p50_us']:,.1f}",
            f"{r['p99_us']:,.1f}",
            f"{r['p50_us_without_transport']:,.1f}",
            f"{ratios['p50_us']:.2f}x" if ratios else "",
            f"{ratios['p99_us']:.2f}x" if ratios else "",
        )
    console.print(table)
    share = draw["verify_share_of_accepted"]
    console.print(
        f"the pass check alone (seckill.passes.verify of a valid pass): {draw['verify_us']:.1f} µs"
        + (f", {share:.1%} of an accepted draw press's p50" if share is not None else "")
    )

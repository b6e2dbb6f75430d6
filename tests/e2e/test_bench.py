"""The benchmarks run (their smallest mode, as a subprocess, as ``make bench`` runs
them) and report what they promise; no figure is judged here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seckill_local.checkout import ROOT

pytestmark = pytest.mark.e2e

SECTIONS = ("experiment", "transport", "request_path", "persister", "cold_start", "edge", "draw", "crowd", "entries")


def test_smallest_bench_runs_and_reports_every_section(tmp_path: Path) -> None:
    done = subprocess.run(  # noqa: S603 (our own module)
        [sys.executable, "-m", "benchmarks", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    assert report["meta"]["profile"] == "smoke"
    assert report["meta"]["correct"] is True
    for section in SECTIONS:
        assert section in report, section

    experiment = report["experiment"]
    stock = experiment["sizes"]["stock"]
    sales = [c for c in experiment["checks"] if c["scenario"] in {"a", "c"}]
    assert {(c["scenario"], c["side"]) for c in sales} == {(s, side) for s in "ac" for side in ("ours", "baseline")}
    for check in sales:  # both sides sold exactly the stock, one order per user
        assert check["exact"] is True, check
        assert check["order_ids_answered"] == check["orders_in_mysql"] == check["users_in_mysql"] == stock
        assert check["users_with_two_order_ids"] == 0
        assert check["mysql_stock_left"] == 0
    assert all(c["presses_answered_ok"] == 0 for c in experiment["checks"] if c["scenario"] == "b")
    rows = {(r["scenario"], r["side"]): r for r in experiment["results"]}
    assert set(rows) == {(s, side) for s in "abc" for side in ("ours", "baseline")}
    for row in rows.values():
        assert row["throughput"] > 0
        assert set(row["latency"]) == {"p50", "p95", "p99", "mean"}
        assert {"mysql_statements", "redis_commands", "mysql", "redis"} <= set(row["usage"])
    # The baseline reads MySQL on every press; the servers' own counters say so.
    assert rows[("b", "baseline")]["usage"]["mysql_statements"] >= 1
    assert rows[("a", "ours")]["transport_share"] > 0
    assert "vs_baseline" in rows[("a", "ours")]

    # Every SQS stand-in, fauxqs (the default) included, keeps the behaviours Seckill relies on.
    assert report["meta"]["sqs_stand_in"] == "fauxqs on Node.js 22"
    stand_ins = {r["server"]: r["conformance"] for r in report["transport"]["results"]}
    assert set(stand_ins) == {"fauxqs", "werkzeug", "waitress", "gunicorn"}
    for server, checks in stand_ins.items():
        assert len(checks) == 7, (server, checks)
        assert all(checks.values()), (server, checks)

    kinds = {(r["kind"], r["contender"]) for r in report["request_path"]["results"]}
    for kind in ("refused_cache_off", "refused_cache_warm", "duplicate", "accepted"):
        assert (kind, "handler") in kinds
        assert (kind, "place_order") in kinds
    assert ("refused_cache_off", "evalsha") in kinds
    # Signed as on Lambda, whose runtime has no awscrt (installed here for the publisher).
    assert report["request_path"]["sigv4_signer"] == "SigV4Auth"

    persister = report["persister"]
    assert next(r["contender"] for r in persister["results"]) == "handler"
    assert persister["drain"]["complete"] is True
    assert persister["drain"]["curve"][-1][1] == persister["drain"]["orders"]

    cold = report["cold_start"]["results"]
    assert cold
    assert cold[0]["function"] == "SeckillApiFunction"
    assert cold[0]["libraries"]  # read from the source: what app.py and its layer modules import
    assert cold[0]["init_ms"] > 0
    assert cold[0]["bare_imports_ms"] > 0

    edge = report["edge"]
    refusals = {r["contender"]: r for r in edge["results"]}
    assert set(refusals) == {"edge", "api", "api_cache_off", "floor"}
    for contender, row in refusals.items():
        assert row["throughput"] > 0
        assert set(row["latency"]) == {"p50", "p95", "p99", "mean"}
        by_edge = " (edge)" if contender == "edge" else ""
        assert row["answers"] == {f"409 SOLD_OUT{by_edge}": edge["sizes"]["presses"]}, contender
    assert edge["bodies_equal"] is True
    assert edge["edge_counted"] == {"answered": edge["sizes"]["presses"], "forwarded": 0}
    assert {"edge_vs_api_throughput", "api_vs_edge_p50", "edge_vs_floor_throughput"} <= set(edge["ratios"])
    changes = [c["change"] for c in edge["state"]["changes"]]
    assert changes == ["sold out", "given back"][: edge["sizes"]["changes"]]
    assert all(c["ms"] > 0 for c in edge["state"]["changes"])
    assert "(6) A sold-out voucher's refused presses" in done.stdout

    draw = report["draw"]
    rows = {(r["kind"], r["mode"]): r for r in draw["results"]}
    assert set(rows) == {(kind, mode) for kind in ("accepted", "duplicate") for mode in ("race", "draw")}
    for (_, mode), row in rows.items():
        assert row["p50_us"] > 0
        assert row["p99_us"] >= row["p50_us"]
        assert ("vs_race" in row) is (mode == "draw"), row
    assert set(rows[("accepted", "draw")]["vs_race"]) == {"p50_us", "p99_us", "p50_us_without_transport"}
    assert draw["verify_us"] > 0
    assert draw["verify_share_of_accepted"] > 0
    assert any("draw (pass and cursor) vs race" in t["target"] for t in report["targets"])
    assert "(7) A draw's press against a race's" in done.stdout

    crowd = report["crowd"]
    (sales,) = crowd["rounds"]
    assert set(sales) == {"race", "draw"}
    for mode, sale in sales.items():
        assert sale["ok"] is True, sale  # the main job's every check held
        assert sale["presses"] == crowd["sizes"]["users"] * 3
        assert 0 < sale["first_second_at_function"] <= sale["first_second"] <= sale["presses"], mode
    # Only the admitted reach the function in a draw: the main job's own check, seen from here.
    assert 0 < sales["draw"]["at_function"] <= sales["draw"]["admitted"] * 3
    assert sales["race"]["admitted"] is None
    assert set(crowd["summary"]) == {"race", "draw"}
    assert "(8) The crowd's first second at the function" in done.stdout
    assert (tmp_path / "crowd-race.png").stat().st_size > 0

    entries = report["entries"]
    calls = {r["contender"]: r for r in entries["calls"]}
    assert set(calls) == {"enter_early", "enter_late", "look_up", "press_accepted", "press_refused"}
    for contender, row in calls.items():
        assert 0 < row["p50_us"] <= row["p99_us"], row
        assert ("vs" in row) is (contender in {"enter_early", "enter_late", "look_up"}), row
    assert set(calls["enter_late"]["vs"]) == {"press_accepted", "press_refused"}
    # Counted in the process: an entry makes at least its writes and COMMIT; a press makes none.
    assert calls["enter_early"]["mysql_round_trips"] >= 3
    assert calls["enter_late"]["mysql_round_trips"] >= 5
    assert calls["press_refused"]["mysql_round_trips"] == 0
    assert calls["press_refused"]["redis_round_trips"] >= 1
    rates = {(r["side"], r["entry"]): r for r in entries["rates"]}
    assert set(rates) == {(side, when) for side in ("handler", "floor") for when in ("early", "late")}
    for (side, _), row in rates.items():
        assert row["entries_per_s"] > 0
        assert ("vs_floor" in row) is (side == "handler"), row
    assert entries["checks"]
    assert all(check["exact"] for check in entries["checks"]), entries["checks"]
    assert "(9) Entries per second on one draw voucher" in done.stdout

    assert {"target", "goal", "measured", "met", "why"} <= set(report["targets"][0])
    for target in report["targets"]:  # a miss says why, from the same report
        assert bool(target["why"]) is (target["met"] is False), target
    for png in (
        "experiment_throughput",
        "experiment_latency",
        "transport",
        "request_path",
        "persister_drain",
        "edge",
        "draw",
    ):
        assert (tmp_path / f"{png}.png").stat().st_size > 0
    assert "Targets" in done.stdout

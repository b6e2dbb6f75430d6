"""seckill-capacity's model: its arithmetic on a sale small enough to count by hand, where
the first wall stands with the edge and without, the recommended admitRate, the prices, the
sources, the exit codes."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from seckill_local.checkout import ROOT
from seckill_local.template import Template
from seckill_ops.capacity import main
from seckill_ops.capacity import model as sale_model
from seckill_ops.capacity.assumptions import ASSUMPTIONS
from seckill_ops.capacity.costs import free_tier, plan_choice
from seckill_ops.capacity.draw import blind_seconds, draw_sale, model_draw, moves, origin_fetches, steps
from seckill_ops.capacity.flow import ramp_limit, throttle, through_api
from seckill_ops.capacity.kvs import Fleet, calls_before, kvs_calls
from seckill_ops.capacity.model import Check, Scenario, before_waf, model
from seckill_ops.capacity.pace import PACED, paced_wall, recommend
from seckill_ops.capacity.profile import Profile
from seckill_ops.capacity.sources import FIGURES

# 1,000 users x 3 presses for 10 units over 10 s: 1,500 presses in the first second, then
# 1,500 / 9 a second, none throttled. The 10 units are gone once API Gateway has let 10 x 3 =
# 30 presses through (0.02 s); with 5 s of propagation the edge answers from 5.02 s: the
# 1,500 x 4.98 / 9 = 830 presses left.
SMALL = Profile(users=1_000, presses=3, stock=10, seconds=10)
EDGE_SHARE = 830 / 3_000


def test_the_profile_counts_presses_and_derives_the_edge_share() -> None:
    assert SMALL.total == 3_000
    assert SMALL.cumulative(1) == pytest.approx(1_500)
    assert SMALL.cumulative(10) == pytest.approx(3_000)
    with_edge = model(SMALL, edge=True)
    assert with_edge.sold_out_at == pytest.approx(0.02)
    assert with_edge.edge_share == pytest.approx(EDGE_SHARE)
    # More units than users: nothing sells out, the edge never answers.
    assert model(Profile(users=5, presses=2, stock=10, seconds=10), edge=True).edge_share == 0


def test_without_the_edge_every_press_reaches_the_api() -> None:
    c = model(SMALL, edge=False).counts
    assert c["cloudfront_requests"] == c["waf_requests"] == c["function_invocations"] == 0
    assert c["apigw_requests"] == pytest.approx(3_000)
    assert c["apigw_throttled"] == 0  # 1,500 a second is under 10,000 and its burst
    assert c["api_invocations"] == pytest.approx(3_000)
    assert c["authorizer_invocations"] == pytest.approx(1_000)  # one per user: the 30 s cache outlasts the sale
    assert (c["accepted"], c["persister_invocations"], c["rds_statements"], c["rds_transactions"]) == (10, 1, 20, 1)
    assert c["sqs_sends"] == 11  # the 10 orders and the batch's expiries
    assert c["sqs_receives"] == c["sqs_deletes"] == 1
    assert c["redis_commands"] == pytest.approx(10 * 2 + 2_990 * 1 + 1_000 * 1)


def test_with_the_edge_the_edge_answers_its_share_and_the_api_the_rest() -> None:
    c = model(SMALL, edge=True).counts
    assert c["cloudfront_requests"] == c["waf_requests"] == c["function_invocations"] == c["kvs_reads"] == 3_000
    assert c["answered_at_edge"] == pytest.approx(830)
    assert c["apigw_requests"] == c["api_invocations"] == pytest.approx(2_170)
    # With the edge the authorizer's cache is off (ReauthorizeEvery 0): one call per request.
    assert c["authorizer_invocations"] == pytest.approx(2_170)
    assert c["publisher_invocations"] == 1
    assert c["sqs_sends"] == 12  # and the sold-out notice


def test_api_gateway_admits_its_rate_plus_what_the_bucket_holds() -> None:
    assert throttle([20_000, 20_000, 5_000, 20_000], 10_000, 5_000) == [15_000, 10_000, 5_000, 15_000]


def test_the_million_user_sale_meets_api_gateway_without_the_edge_and_cloudfront_with_it() -> None:
    sale = Profile(users=1_000_000, presses=3, stock=200, seconds=10)
    without, with_edge = model(sale, edge=False), model(sale, edge=True)
    wall = without.first_wall()
    assert wall is not None
    # 1.5 million presses in second 0 and the retries of its 429s after.
    assert (wall.layer, wall.exceeded_at) == ("API Gateway", 0)
    assert wall.peak > 1_500_000
    # 15,000 in the first second, then 10,000 a second until the last retries (2 x 1 s after
    # the window): the rest is answered 429.
    assert len(without.per_second["apigw"]) == 10 + 2
    assert without.counts["api_invocations"] == pytest.approx(15_000 + 11 * 10_000)
    wall = with_edge.first_wall()
    assert wall is not None
    assert (wall.layer, wall.exceeded_at) == ("CloudFront", 0)  # 1.5 million a second against 250,000


def test_the_edge_moves_the_wall_off_the_api_once_it_knows_the_sale_is_over() -> None:
    # 100,000 users, 1.5% of their 300,000 presses in the first second (4,500: under 10,000 plus
    # the 5,000 burst, and with their authorizer calls under Lambda's 10,000 a second), then
    # 32,833 a second: API Gateway's wall is in second 1.
    flat = Profile(users=100_000, presses=3, stock=200, seconds=10, burst_share=0.015, propagation_seconds=0)
    wall = model(flat, edge=False).first_wall()
    assert wall is not None
    assert (wall.layer, wall.exceeded_at) == ("API Gateway", 1)
    # The edge forwards the first second whatever it knows (its clock skew), then answers the rest.
    with_edge = model(flat, edge=True)
    assert with_edge.first_wall() is None
    assert with_edge.counts["apigw_requests"] == pytest.approx(4_500)
    # 12,000 presses in that first second fit API Gateway's rate and burst, but with their
    # authorizer calls (one each: no cache with the edge) they are over Lambda's 10,000 invocations a second.
    wall = model(replace(flat, burst_share=0.04), edge=True).first_wall()
    assert wall is not None
    assert (wall.layer, wall.quota, wall.exceeded_at) == ("Lambda", "invocation requests/s (10 x concurrency)", 0)


def test_the_edge_never_answers_within_its_skew_of_the_start() -> None:
    # Sold out at 0.02 s and known at once, yet the first second's 1,500 presses all reach the API.
    c = model(replace(SMALL, propagation_seconds=0), edge=True).counts
    assert c["apigw_requests"] == pytest.approx(1_500)


def test_the_reduced_regions_throttle_sooner() -> None:
    # 4,500 presses in the first second: under 10,000 plus 5,000, over 2,500 plus 1,250.
    sale = Profile(users=3_000, presses=3, stock=10, seconds=10)
    assert model(sale, edge=False).first_wall() is None
    reduced = model(replace(sale, reduced_region=True), edge=False)
    wall = reduced.first_wall()
    assert wall is not None
    assert (wall.layer, wall.limit, wall.exceeded_at) == ("API Gateway", 2_500 + 1_250, 0)
    assert reduced.counts["apigw_throttled"] == pytest.approx(4_500 - 3_750)


def test_the_persister_drains_as_lambda_adds_pollers() -> None:
    # 5 pollers the first minute whatever MaximumConcurrency allows, then 305.
    assert sale_model._pollers(0, 1_000) == 5
    assert sale_model._pollers(60, 1_000) == 305
    assert sale_model._pollers(600, 1_000) == 1_000
    assert sale_model._pollers(600, 5) == 5
    # 1 s batches: 300 batches in the first minute, the next 305 in 1 s.
    assert sale_model._drain_seconds(605, 1_000, 1.0) == pytest.approx(61)
    assert sale_model._drain_seconds(20, 5, 0.5) == pytest.approx(2)


def test_the_prices_sum_and_price_each_layer_by_hand() -> None:
    without, with_edge = model(SMALL, edge=False), model(SMALL, edge=True)
    for s in (without, with_edge):
        assert s.total_dollars == pytest.approx(sum(c.dollars for c in s.costs))
    lines = {(c.layer, c.item): c.dollars for c in without.costs}
    assert lines["API Gateway", "HTTP API requests (not the 429s)"] == pytest.approx(3_000 / 1e6 * 1.00)
    assert lines["Lambda", "requests"] == pytest.approx((3_000 + 1_000 + 1) / 1e6 * 0.20)
    # 512 MB: 10 accepted x 4 ms (3.6 billed as 4), 2,990 refused and 1,000 authorizer calls x 1 ms, one 18 ms batch.
    gb_s = (10 * 4 + 2_990 + 1_000 + 18) / 1000 * 0.5
    assert lines["Lambda", "duration"] == pytest.approx(gb_s * 0.00001667)
    assert lines["SQS", "requests"] == pytest.approx((11 + 1 + 1) / 1e6 * 0.40)
    # 300 bytes of Lambda's own log lines per invocation, a 350-byte access log line per request.
    assert lines["CloudWatch", "logs ingested"] == pytest.approx((4_001 * 300 + 3_000 * 350) / 1e9 * 0.50)
    edge_lines = {(c.layer, c.item): c.dollars for c in with_edge.costs}
    assert edge_lines["CloudFront", "HTTPS requests"] == pytest.approx(3_000 / 10_000 * 0.01)
    assert edge_lines["WAF", "requests inspected"] == pytest.approx(3_000 / 1e6 * 0.60)
    # A month: 3 secrets (5 with the edge's two) and the 9 alarms; the web ACL and its 4 rules.
    assert sum(c.dollars for c in without.monthly) == pytest.approx(3 * 0.40 + 9 * 0.10)
    assert sum(c.dollars for c in with_edge.monthly) == pytest.approx(5 * 0.40 + 9 * 0.10 + 5 + 4 * 1)
    # Bot Control: its subscription, two more rules (its group, the CAPTCHA), its fee on every
    # request, and a CAPTCHA attempt for a tenth of the users.
    bot = model(replace(SMALL, bot_control=True), edge=True)
    assert sum(c.dollars for c in bot.monthly) == pytest.approx(5 * 0.40 + 9 * 0.10 + 5 + 6 * 1 + 10)
    assert bot.total_dollars - with_edge.total_dollars == pytest.approx(3_000 / 1e6 * 1.00 + 100 / 1_000 * 0.40)


def test_every_figure_has_its_aws_page_and_every_input_its_origin() -> None:
    for f in FIGURES.values():
        # AWS's documentation, its pages and posts, or its own guides on aws.github.io.
        assert f.source.startswith(
            ("https://docs.aws.amazon.com/", "https://aws.amazon.com/", "https://aws.github.io/")
        ), f.name
        assert f.read, f.name
        assert f.unit, f.name
        assert f.value > 0, f.name
        assert f.checked or f.note, f"{f.name}: an unconfirmed value says why"
    for a in ASSUMPTIONS.values():
        assert a.origin, a.name
        assert a.unit, a.name
    # Every price a cost line uses is in the table.
    scenario = model(Profile(users=10, presses=1, stock=1, seconds=1, bot_control=True), edge=True)
    assert {c.price for c in scenario.costs + scenario.monthly} <= set(FIGURES)


def test_the_priced_waf_rules_are_the_deployed_ones() -> None:
    rules = Template.load(ROOT / "edge" / "waf.yaml").data["Resources"]["EdgeWebAcl"]["Properties"]["Rules"]
    always = [r for r in rules if "Fn::If" not in r]
    optional = [r for r in rules if "Fn::If" in r]
    assert ASSUMPTIONS["waf_rules"].value == len(always)
    bot = model(replace(SMALL, bot_control=True), edge=True)
    plain = model(SMALL, edge=True)
    rule_count = {(c.layer, c.item): c.quantity for c in bot.monthly}["WAF", "rules"]
    assert rule_count - {(c.layer, c.item): c.quantity for c in plain.monthly}["WAF", "rules"] == len(optional)


def test_docs_capacity_cites_every_figure_s_page() -> None:
    page = (ROOT / "docs" / "capacity.md").read_text(encoding="utf-8")
    missing = {f.name for f in FIGURES.values() if f.source not in page}
    assert not missing


def test_docs_capacity_shows_the_commands_current_output(capsys: pytest.CaptureFixture[str]) -> None:
    """Every run the page pastes is the command's output today: whole, or the lines a grep kept."""
    page = (ROOT / "docs" / "capacity.md").read_text(encoding="utf-8")
    runs = [block.split("\n```", 1)[0] for block in page.split("```text\n$ seckill-capacity ")[1:]]
    assert len(runs) >= 4
    for run in runs:
        command, _, pasted = run.partition("\n")
        if not pasted:  # --sources: its tables follow as Markdown, checked by the test above
            continue
        args = command.split(" | ", 1)[0].split()
        assert main(args) == 0
        out = capsys.readouterr().out.rstrip("\n")
        if " | grep " in command:
            missing = [line for line in pasted.splitlines() if line not in out.splitlines()]
            assert not missing, f"rerun {command} and paste its output"
        else:
            assert out == pasted, f"rerun {command} and paste its output"


def test_main_prints_both_scenarios_and_the_walls(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--users", "1000", "--stock", "10"]) == 0
    out = capsys.readouterr().out
    assert "First wall without the edge: none" in out
    assert "| SeckillApiFunction invocations" in out


def test_main_json_takes_the_edge_share_from_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"edge": {"share_of_presses": 0.9}}), encoding="utf-8")
    assert main(["--users", "1000", "--stock", "10", "--from-report", str(report), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    with_edge = result["scenarios"][1]
    assert with_edge["edge_share"] == 0.9
    assert with_edge["counts"]["answered_at_edge"] == pytest.approx(2_700)
    assert math.isclose(with_edge["total_dollars"], sum(c["dollars"] for c in with_edge["costs"]))


def test_a_report_without_an_edge_section_leaves_the_share_derived(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"invariants": {}}), encoding="utf-8")
    assert main(["--users", "1000", "--stock", "10", "--from-report", str(report), "--json"]) == 0
    captured = capsys.readouterr()
    assert "no edge.share_of_presses" in captured.err
    assert json.loads(captured.out)["scenarios"][1]["edge_share"] == pytest.approx(EDGE_SHARE)


@pytest.mark.parametrize(
    "args",
    [
        ["--users", "0"],
        ["--burst-share", "1.5"],
        ["--edge-share", "-0.1"],
        ["--seconds", "5", "--burst-seconds", "6"],
        ["--region-burst", "tiny"],
        ["--refused-ms", "-1"],
        ["--from-report", "/nonexistent/report.json"],
        ["--admission", "lottery"],
        ["--admit-factor", "0"],
        ["--draw-close-seconds", "4"],
        ["--wave-seconds", "3601"],
        ["--entry-minutes", "0"],
        ["--live-vouchers", "0"],
        ["--sweep-minutes", "-5"],
        ["--admit-rate", "0"],
        ["--admit-rate", "1000001"],
        ["--rush-share", "1.5"],
        ["--rush-minutes", "0"],
        ["--retries", "-1"],
        ["--retry-seconds", "0"],
        ["--cache-ops", "0"],
        ["--rds-commits", "-1"],
        ["--lambda-concurrency", "0"],
    ],
)
def test_bad_arguments_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err


def test_a_report_with_a_bad_share_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"edge": {"share_of_presses": "most"}}), encoding="utf-8")
    assert main(["--from-report", str(report)]) == 2
    assert "not a share" in capsys.readouterr().err


def test_plot_draws_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the [plot] extra; the ops install's lack of it: tests/e2e/test_installs.py
    target = tmp_path / "capacity.png"
    assert main(["--users", "1000", "--stock", "10", "--plot", str(target)]) == 0
    assert target.read_bytes().startswith(b"\x89PNG")


MILLION = Profile(users=1_000_000, presses=3, stock=200, seconds=10)


def _walls(scenario: Scenario, layers: tuple[str, ...]) -> list[Check]:
    return [c for c in scenario.checks if c.layer in layers and c.exceeded_at is not None]


def test_lambda_s_request_rate_is_a_wall_of_its_own() -> None:
    # Without the edge API Gateway admits 15,000 presses in second 0, hardly two of any user's,
    # so 15,000 authorizer calls follow: three times the 10,000 invocations a second Lambda
    # takes (10 x 1,000).
    checks = [c for c in model(MILLION, edge=False).checks if c.quota.startswith("invocation requests/s")]
    assert [(c.limit, c.peak, c.exceeded_at) for c in checks] == [(10_000, pytest.approx(30_000), 0)]
    small = [c for c in model(SMALL, edge=False).checks if c.quota.startswith("invocation requests/s")]
    assert small[0].peak == pytest.approx(1_500 + 500)  # the authorizer calls follow the presses
    assert small[0].exceeded_at is None


def test_the_draw_keeps_api_gateway_and_lambda_under_their_quotas_where_the_race_does_not() -> None:
    race = model(MILLION, edge=True)
    assert {c.layer for c in _walls(race, ("API Gateway", "Lambda"))} == {"API Gateway", "Lambda"}
    draw = model_draw(MILLION)
    assert not _walls(draw, ("API Gateway", "Lambda"))
    assert {c.phase for c in draw.checks} == {"entry", "sale"}  # both phases are checked
    # Only the 400 admitted entrants' presses reach API Gateway in the sale: their 600 of the
    # first second take the 200 units, and the edge answers theirs too 5 s later. Beside them,
    # the draw record's fetches: 375 a second over the 10 s.
    c = draw.counts
    assert draw.sold_out_at == pytest.approx(1)
    assert c["apigw_requests"] - c["entry_apigw"] == pytest.approx(600 + 600 * 5 / 9 + 375 * 10)
    assert c["answered_at_edge"] == pytest.approx(3_000_000 - 600 - 600 * 5 / 9)
    assert c["accepted"] == 200
    assert c["kvs_reads"] == pytest.approx(2 * 3_000_000)  # the voucher's entry and the key list
    # The entry phase: one POST per entrant and no look-up (the page keeps its entry), 90% of
    # them spread over the hour; the record's reads by the one page open in second 0.
    assert c["entrants"] == 1_000_000
    assert c["entry_polls"] == 0
    assert draw.per_second["entry_apigw"][0] == pytest.approx(250 + 250 / 300)


def test_the_draw_record_is_read_on_the_page_s_schedule_and_reaches_the_origin_once_per_edge_location() -> None:
    # Each page open reads the record every 300 s before the close: 250 entrants a second
    # make 250 / 300 reads in second 0, and by the hour's last second a million open pages
    # read it 3,333 times a second; at the close each reads once over 5 s (200,000 a
    # second), then every 10 s (100,000 a second).
    draw = model_draw(MILLION)
    viewers = draw.per_second["entry_cloudfront"]
    assert viewers[0] == pytest.approx(250 + 250 / 300)
    assert viewers[3_599] == pytest.approx(MILLION.entries()[-1] + 1_000_000 / 300)
    assert viewers[3_600:3_605] == pytest.approx([200_000] * 5)
    assert viewers[3_605:3_660] == pytest.approx([100_000] * 55)
    # 750 edge locations asking at most every 2 s send at most 375 of them to API Gateway.
    assert origin_fetches(MILLION, 3_333) == 375
    assert origin_fetches(MILLION, 100) == 100
    fetched = [a - e for a, e in zip(draw.per_second["entry_apigw"], [*MILLION.entries(), *[0.0] * 60], strict=False)]
    assert fetched[0] == pytest.approx(250 / 300)
    assert fetched[3_599] == pytest.approx(375)
    assert fetched[3_600:3_660] == pytest.approx([375] * 60)
    # Each read is priced at CloudFront and WAF: the pages' ones in the entry phase and the sale.
    sale = draw_sale(MILLION)
    assert sale.counts["draw_reads"] == pytest.approx(100_000 * len(sale.per_second["apigw"]))
    assert draw.counts["draw_reads"] == pytest.approx(sum(viewers) - 1_000_000 + sale.counts["draw_reads"])


def test_entries_squeezed_into_a_minute_meet_api_gateway_in_the_entry_phase() -> None:
    draw = model_draw(replace(MILLION, entry_minutes=1))
    wall = draw.first_wall()
    assert wall is not None
    assert (wall.phase, wall.layer, wall.exceeded_at) == ("entry", "API Gateway", 0)


def test_a_draw_closing_before_its_cursor_reaches_the_edge_lets_the_crowd_through() -> None:
    # 10 s of propagation against a close 5 s before the opening: the edge holds no cursor
    # for the sale's first 5 s and forwards every press.
    late = replace(MILLION, draw_close_seconds=5, propagation_seconds=10)
    assert blind_seconds(late) == 5
    walls = _walls(model_draw(late), ("API Gateway",))
    assert [(c.phase, c.exceeded_at) for c in walls] == [("sale", 0)]


def test_waves_admit_for_the_units_no_shows_leave() -> None:
    # 20 admitted, a quarter press: 5 units bought; each wave admits 2 x the units left.
    sale_ = replace(SMALL, seconds=30, no_show=0.75)
    assert moves(sale_) == [(0, 20), (10, 10), (20, 5)]
    draw = model_draw(sale_)
    assert draw.counts["admitted"] == 35
    assert draw.counts["waves"] == 2
    # Second 10: the first 20 entrants' share of the crowd (a quarter of them press), and half
    # the wave's presses (the arrival's first-second share); second 9 also forwards the presses
    # of the wave's 10 entrants, within the edge's clock skew of its start. Beside them every
    # second, the record's fetches: the 1,000 pages' 100 reads a second, under the 375 cap.
    crowd, fetches = 1_500 / 29, 100
    assert draw.per_second["apigw"][10] == pytest.approx(crowd * 20 * 0.25 / 1_000 + 10 * 0.25 * 3 * 0.5 + fetches)
    assert draw.per_second["apigw"][9] == pytest.approx(crowd * (20 * 0.25 + 10) / 1_000 + fetches)
    # Everyone presses: the first admission buys the stock and no wave follows.
    assert moves(replace(SMALL, seconds=30)) == [(0, 20)]


def test_waf_s_rate_rules_act_too_late_for_the_sale_s_first_seconds() -> None:
    # They usually take up to 30 s: every press of a 10 s sale arrives before them; of a 60 s
    # sale, the first second's half and 29 of the other 59 seconds' half.
    assert before_waf(MILLION) == 1
    assert before_waf(replace(MILLION, seconds=60)) == pytest.approx(0.5 + 0.5 * 29 / 59)


def test_store_calls_scale_with_live_vouchers_and_the_sweep_interval() -> None:
    def month(fleet: Fleet) -> dict[str, float]:
        return {line.item: line.calls for line in kvs_calls(fleet)}

    # A 30-day month: 8,640 sweeps every 5 minutes, each one ListKeys page of 50 keys.
    assert month(Fleet(live_vouchers=49))["sweep: ListKeys"] == 8_640
    assert month(Fleet(live_vouchers=50))["sweep: ListKeys"] == 2 * 8_640  # 51 keys with the key list
    assert month(Fleet(live_vouchers=49, sweep_minutes=10))["sweep: ListKeys"] == 4_320
    ten = month(Fleet(live_vouchers=10))
    # Created and sold out, each DescribeKeyValueStore, GetKey and UpdateKeys.
    assert ten["state changes"] == 10 * 2 * 3
    # Each ended voucher's delete rides in a sweep's UpdateKeys: that sweep's ETag, its second
    # listing under it and the UpdateKeys.
    assert ten["cleanup of ended vouchers"] == 10 * (1 + 1 + 1)
    assert month(Fleet(live_vouchers=50))["cleanup of ended vouchers"] == 50 * (1 + 2 + 1)
    assert "draw: cursor moves" not in ten
    assert month(Fleet(live_vouchers=10, cursor_moves=3))["draw: cursor moves"] == 10 * 3 * 3
    lines = kvs_calls(Fleet(live_vouchers=10))
    assert sum(line.dollars for line in lines) == pytest.approx(sum(line.calls for line in lines) / 1_000 * 1.00)
    assert calls_before(Fleet(live_vouchers=10)) == 10 * 8_640 * 2


def test_the_smallest_flat_rate_plan_holding_the_month_s_requests() -> None:
    with_edge = model(MILLION, edge=True)
    costs, monthly = with_edge.costs, with_edge.monthly
    assert plan_choice(costs, monthly, 3e6, 1).plan == "pro"
    assert plan_choice(costs, monthly, 3e6, 100).plan == "premium"
    # Premium's allowance can be raised to 6 billion requests a month ($10,000); past it, custom pricing.
    assert plan_choice(costs, monthly, 3e6, 2_000).plan == "premium_top"
    assert plan_choice(costs, monthly, 3e6, 2_001).plan is None
    # A month past Pro's 10 million but within 3x it: a first spike Pro takes without a change.
    assert plan_choice(costs, monthly, 3e6, 9).spike_of == "pro"
    assert plan_choice(costs, monthly, 3e6, 11).spike_of is None
    # Bot Control comes with Business and up.
    assert plan_choice(costs, monthly, 3e6, 1, bot_control=True).plan == "business"
    # Pay-as-you-go: the edge's requests, transfer and WAF inspection per sale, and WAF's $9 a month.
    choice = plan_choice(costs, monthly, 3e6, 1)
    lines = {(c.layer, c.item): c.dollars for c in costs}
    edge_lines = lines["CloudFront", "HTTPS requests"] + lines["CloudFront", "data transfer out"]
    assert choice.pay_as_you_go == pytest.approx(edge_lines + lines["WAF", "requests inspected"] + 9)


def test_main_draw_prints_the_draw_beside_the_race(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--admission", "draw"]) == 0
    out = capsys.readouterr().out
    assert "| entries (POST entry, before the sale)" in out
    assert "First wall draw: CloudFront, requests/s per distribution" in out
    assert "Cost per sale: without the edge $" in out
    assert "; draw $" in out
    assert "WAF's rate-based rules usually take up to 30 s" in out
    assert "not billed (no AWS page says either way" in out
    assert "Recommended admitRate 400" in out  # the whole first move fits in one second
    assert "| draw: cursor moves" in out
    assert "| draw             | API Gateway (entry phase)" in out


def test_main_draw_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--admission", "draw", "--users", "1000", "--stock", "10", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in result["scenarios"]] == ["without the edge", "with the edge", "draw"]
    assert result["kvs_calls_per_month"]["total"] == pytest.approx(8_640 + 10 * (2 + 1) * 3 + 10 * 3)
    pytest.importorskip("matplotlib")
    target = tmp_path / "draw.png"
    assert main(["--admission", "draw", "--users", "1000", "--stock", "10", "--plot", str(target)]) == 0
    assert target.read_bytes().startswith(b"\x89PNG")


def test_a_429_is_retried_and_not_billed() -> None:
    # 40,000 requests in one second against 10,000 a second and a 5,000 burst: 15,000 through,
    # 25,000 sent again a second later (10,000 through), 15,000 a third time (10,000 through),
    # and the 5,000 left give up after their two retries.
    flow = through_api([40_000], 10_000, 5_000, retries=2, after=1)
    assert flow.demand == pytest.approx([40_000, 25_000, 15_000])
    assert flow.admitted == pytest.approx([15_000, 10_000, 10_000])
    assert flow.retries == pytest.approx([0, 25_000, 15_000])
    assert flow.throttled == pytest.approx(80_000 - 35_000)
    # Without retries the 429s are final; with the edge answering from second 1, so are the retries.
    assert through_api([40_000], 10_000, 5_000, retries=0, after=1).demand == [40_000]
    edged = through_api([40_000], 10_000, 5_000, retries=2, after=1, passes=[1, 0, 0])
    assert edged.demand == pytest.approx([40_000, 0, 0])
    assert edged.retries == pytest.approx([0, 25_000, 0])
    # The sale's bill: only what API Gateway lets through (AWS's experts: a 429 is not billed).
    without = model(MILLION, edge=False)
    billed = {(c.layer, c.item): c.quantity for c in without.costs}["API Gateway", "HTTP API requests (not the 429s)"]
    assert billed == pytest.approx(without.counts["apigw_requests"] - without.counts["apigw_throttled"])
    assert billed == pytest.approx(without.counts["api_invocations"])
    assert model(replace(MILLION, retries=0), edge=False).counts["apigw_requests"] == pytest.approx(3_000_000)


def test_the_authorizer_s_cache_is_off_with_the_edge_as_the_template_deploys_it() -> None:
    api = Template.load(ROOT / "template.yaml").data["Resources"]["SeckillHttpApi"]["Properties"]
    every = api["Auth"]["Authorizers"]["TokenAuthorizer"]["Identity"]["ReauthorizeEvery"]
    assert every == {"Fn::If": ["HasEdge", 0, int(ASSUMPTIONS["authorizer_cache_s"].value)]}
    with_edge, without = model(SMALL, edge=True).counts, model(SMALL, edge=False).counts
    assert with_edge["authorizer_invocations"] == pytest.approx(with_edge["api_invocations"])
    assert without["authorizer_invocations"] == pytest.approx(SMALL.users)  # once per user and 30 s


def test_sell_out_is_timed_from_what_api_gateway_lets_through() -> None:
    # The phone launch: 15 million presses, but API Gateway lets 125,000 through (15,000, then
    # 10,000 a second until the last retries), 41,667 buyers' worth: the 100,000 units never
    # sell out in the race, so the edge never learns of a sell-out and answers nothing.
    launch = Profile(users=5_000_000, presses=3, stock=100_000, seconds=10)
    with_edge = model(launch, edge=True)
    assert with_edge.sold_out_at is None
    assert with_edge.edge_share == 0
    assert with_edge.counts["accepted"] == math.ceil(with_edge.counts["api_invocations"] / 3)
    assert with_edge.counts["accepted"] < launch.stock


def test_lambda_grows_each_function_by_10_000_requests_a_second_per_10_s_from_second_0() -> None:
    assert ramp_limit([5_000, 25_000, 25_000], 10_000) == [10_000, 10_000, 10_000]
    # What a function grew to by the end of a period, it keeps, and adds to in the next.
    served = [10_000] * 10 + [30_000] * 10 + [30_000]
    assert ramp_limit(served, 10_000)[10:12] == [20_000, 20_000]
    assert ramp_limit(served, 10_000)[20] == 30_000
    # API Gateway raised to 50,000 a second and Lambda's concurrency to 10,000: the 12,000
    # presses of second 0 (4% of 300,000) fit both, but not the function's first 10 s.
    raised = Profile(users=100_000, presses=3, stock=200, seconds=10, burst_share=0.04, apigw_rps=50_000)
    wall = model(replace(raised, lambda_concurrency=10_000), edge=True).first_wall()
    assert wall is not None
    assert (wall.quota, wall.exceeded_at) == ("scaling of SeckillApiFunction: requests/s (+10,000 per 10 s)", 0)


def test_a_new_account_s_lower_concurrency_quota_is_checked() -> None:
    # 1,500 presses and as many authorizer calls in second 0: under 10 x 1,000, over 10 x 100.
    assert model(SMALL, edge=True).first_wall() is None
    wall = model(replace(SMALL, lambda_concurrency=100), edge=True).first_wall()
    assert wall is not None
    assert (wall.layer, wall.limit, wall.exceeded_at) == ("Lambda", 1_000, 0)


def test_the_cache_node_and_the_database_are_checked_against_their_own_figures() -> None:
    def check(s: Scenario, layer: str) -> Check:
        return next(c for c in s.checks if c.layer == layer and c.phase == "sale")

    # Without the edge 15,000 presses and 15,000 authorizer reads in second 0: 30,200 commands
    # with the 200 buyers' second command, on the voucher's one shard.
    without = model(MILLION, edge=False)
    cache = check(without, "ElastiCache")
    assert (cache.limit, cache.peak, cache.exceeded_at) == (25_000, pytest.approx(30_200), 0)
    assert check(model(replace(MILLION, cache_ops=40_000), edge=False), "ElastiCache").exceeded_at is None
    # The persister's 20 transactions in second 0, under the writer's 1,500 commits a second ...
    assert (check(without, "RDS").peak, check(without, "RDS").exceeded_at) == (pytest.approx(20), None)
    # ... and a rush of entries over it: 10% of 5 million in the last 5 minutes, rising to 4,578
    # entries a second at the close (API Gateway and Lambda raised to let them all through),
    # each a durable write.
    launch = Profile(users=5_000_000, presses=3, stock=100_000, seconds=10, apigw_rps=50_000, lambda_concurrency=5_000)
    entries = next(
        c for c in model_draw(replace(launch, admit_rate=1_000)).checks if c.phase == "entry" and c.layer == "RDS"
    )
    assert entries.peak == pytest.approx(max(launch.entries()))
    assert entries.exceeded_at is not None
    assert ASSUMPTIONS["rds_commits"].value == FIGURES["rds_gp3_iops"].value / 2


def test_the_entry_phase_rush_rises_to_the_close_beside_an_even_spread() -> None:
    entries = MILLION.entries()
    assert len(entries) == 3_600
    assert sum(entries) == pytest.approx(1_000_000)
    # 900,000 over the hour, 100,000 rising over the last 300 s: (2 x 299 + 1) / 300^2 of them in the last.
    assert entries[0] == pytest.approx(250)
    assert entries[-1] == pytest.approx(250 + 100_000 * 599 / 300**2)
    assert replace(MILLION, rush_share=0).entries() == pytest.approx([1_000_000 / 3_600] * 3_600)
    draw = model_draw(MILLION)
    rushed = {c.quota: c.peak for c in draw.checks if c.phase == "entry" and c.layer == "API Gateway"}
    even = {c.quota: c.peak for c in draw.entry_even if c.layer == "API Gateway"}
    # One POST per entrant and, once 112,500 pages are open, the record's 375 fetches a second.
    assert list(even.values()) == [pytest.approx(1_000_000 / 3_600 + 375)]
    assert list(rushed.values()) == [pytest.approx(entries[-1] + 375)]


def test_a_move_is_made_in_steps_of_admit_rate_and_waves_resume_after_the_last() -> None:
    # 20 entrants at 6 a second: steps at 0, 1, 2 and 3 s, the last of 2.
    paced = replace(SMALL, admit_rate=6)
    assert steps(paced) == [(0, 6), (1, 6), (2, 6), (3, 2)]
    # Waves every 5 s, a quarter pressing: the first move's 7 steps of 3 end at 6 s, so the wave
    # due at 5 s is not made and the next comes at 10 s; its 4 steps end at 13 s, the next at 15 s.
    waved = replace(SMALL, seconds=30, no_show=0.75, wave_seconds=5, admit_rate=3)
    assert moves(waved)[:3] == [(0, 20), (10, 10), (15, 5)]
    made = steps(waved)
    assert all(size <= 3 for _, size in made)
    assert [t for t, _ in made][:11] == [0, 1, 2, 3, 4, 5, 6, 10, 11, 12, 13]
    # Without admitRate a move is one step.
    assert steps(SMALL) == [(0, 20)]


def test_the_recommended_admit_rate_is_the_largest_whose_sale_stays_under_the_quotas() -> None:
    launch = Profile(users=5_000_000, presses=3, stock=100_000, seconds=10)
    pacing = recommend(launch)
    assert pacing.rate is not None
    assert paced_wall(draw_sale(replace(launch, admit_rate=pacing.rate))) is None
    over = paced_wall(draw_sale(replace(launch, admit_rate=pacing.rate + 1)))
    assert over is not None
    assert over.layer in PACED
    assert pacing.wall == over
    # The first move's 200,000 entrants, a step a second.
    assert pacing.admission_seconds == math.ceil(200_000 / pacing.rate) - 1
    # A move that fits in one second needs no pacing.
    assert recommend(MILLION).rate == 400
    assert recommend(MILLION).wall is None


def test_the_phone_launch_at_the_recommended_admit_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """5 million users, 100,000 units, 3 presses each, entries over the hour before with a
    last-minute rush, AWS's default quotas: the draw at the admitRate the model recommends has
    no second over API Gateway's or Lambda's quotas (the authorizer's among them) in its entry
    phase or its sale, and its report gives the time to admit everyone and the cost per sale
    beside the race with and without the edge. The writer is the wall left, and the report
    says what it needs."""
    launch = ["--users", "5000000", "--stock", "100000", "--presses", "3", "--admission", "draw"]
    assert main([*launch, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    race, race_edge, draw = result["scenarios"]
    rate = result["pacing"]["admit_rate"]
    assert rate is not None
    assert result["profile"]["rush_share"] > 0
    assert result["profile"]["apigw_rps"] is None
    assert result["profile"]["lambda_concurrency"] is None
    assert any(note.startswith(f"admitRate {rate:,}: ") for note in draw["notes"])  # the draw at that rate
    walls = [c for c in draw["checks"] if c["layer"] in ("API Gateway", "Lambda") and c["exceeded_at"] is not None]
    assert not walls
    assert {c["phase"] for c in draw["checks"]} == {"entry", "sale"}
    assert any("the authorizer" in c["quota"] and c["phase"] == "entry" for c in draw["checks"])
    assert not [
        c for c in draw["checks"] if c["phase"] == "sale" and c["layer"] in PACED and c["exceeded_at"] is not None
    ]
    # The rush's peak second is 4,578 entries, each a commit: over the writer's assumed 1,500.
    writer = next(c for c in draw["checks"] if c["phase"] == "entry" and c["layer"] == "RDS")
    assert writer["exceeded_at"] is not None
    assert draw["needs"]["rds_commits"] == 4_578
    # No 429 is billed: API Gateway's line prices what it let through, in each scenario.
    for s in (race, race_edge, draw):
        billed = next(c for c in s["costs"] if c["layer"] == "API Gateway")["quantity"]
        assert billed == pytest.approx(s["counts"]["apigw_requests"] - s["counts"]["apigw_throttled"])
    assert race["counts"]["apigw_throttled"] > 0
    assert draw["counts"]["apigw_throttled"] == 0
    # The report prints the rate, the time to admit everyone, the cost per sale of the three
    # and what the writer needs; no quota raise for the entry phase.
    assert main(launch) == 0
    out = capsys.readouterr().out
    seconds = result["pacing"]["admission_seconds"]
    assert f"Recommended admitRate {rate:,}" in out
    assert f"are all admitted by {seconds} s after the opening" in out
    assert (
        f"Cost per sale: without the edge ${race['total_dollars']:,.2f}; with the edge "
        f"${race_edge['total_dollars']:,.2f}; draw ${draw['total_dollars']:,.2f}." in out
    )
    assert "goes through without a 429 with" not in out
    assert "(--rds-commits 4578)" in out


def test_the_deployed_secrets_and_alarms_are_the_priced_ones() -> None:
    templates = [Template.load(ROOT / name).data["Resources"] for name in ("template.yaml", "data/template.yaml")]
    resources = [r for t in templates for r in t.values()]
    secrets = [r for r in resources if r["Type"] == "AWS::SecretsManager::Secret"]
    managed = [
        r for r in resources if r["Type"] == "AWS::RDS::DBInstance" and r["Properties"].get("ManageMasterUserPassword")
    ]
    always = [r for r in secrets if r.get("Condition") != "HasEdge"]
    assert ASSUMPTIONS["secrets"].value == len(always) + len(managed)
    assert len(secrets) - len(always) == ASSUMPTIONS["edge_secrets"].value
    alarms = [r for r in resources if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert ASSUMPTIONS["alarms"].value == len(alarms)


def test_the_free_tier_takes_at_most_a_month_s_allowance_off() -> None:
    with_edge = model(MILLION, edge=True)
    lines = {c.price: c for c in with_edge.costs}
    # Every Lambda request and GB-second, SQS request, and the first 10 million CloudFront requests
    # and 2 million function invocations of the sale's.
    functions = lines["price_cf_function"]
    expected = (
        lines["price_lambda_request"].dollars
        + lines["price_lambda_gb_s"].dollars
        + lines["price_sqs_request"].dollars
        + lines["price_cf_https_request"].dollars
        + functions.dollars * 2e6 / functions.quantity
    )
    assert functions.quantity > 2e6
    assert free_tier(with_edge.costs) == pytest.approx(expected)

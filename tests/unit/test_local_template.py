"""What the local runner reads from template.yaml: functions, routes, queues, schedules."""

from __future__ import annotations

import pytest

from seckill_local.checkout import ROOT
from seckill_local.runner import rate_seconds, scheduled_event
from seckill_local.template import Template


def test_template_functions_and_their_handlers_exist(template: Template) -> None:
    # The three of the contract (the template may hold more, e.g. scheduled jobs).
    assert {"SeckillApiFunction", "OrderPersisterFunction", "AuthorizerFunction"} <= set(template.functions)
    for fn in template.functions.values():
        module, _, attr = fn.handler.rpartition(".")
        source = fn.code_uri / f"{module.replace('.', '/')}.py"
        assert source.is_file(), source
        assert f"def {attr}(" in source.read_text(encoding="utf-8")
        assert fn.code_uri.is_relative_to(ROOT / "functions")
    assert template.functions["OrderPersisterFunction"].timeout == 30
    assert template.functions["AuthorizerFunction"].timeout == 3
    assert template.functions["SeckillApiFunction"].timeout == 10  # from Globals
    # Globals' variables, then the function's own.
    env = template.functions["SeckillApiFunction"].environment
    assert env["REDIS_URL"]["Fn::Sub"].startswith("rediss://")  # the stack's own ElastiCache, TLS
    assert env["ORDER_QUEUE_URL"] == {"Ref": "OrderQueue"}
    assert template.functions["AuthorizerFunction"].environment["POWERTOOLS_SERVICE_NAME"] == "seckill-authorizer"


def test_template_routes_with_their_auth(template: Template) -> None:
    routes = {(route.method, route.path, route.auth, fn.logical_id) for route, fn in template.routes()}
    assert routes == {
        ("POST", "/voucher-order/seckill/{voucherId}", "default", "SeckillApiFunction"),
        ("GET", "/voucher-order/seckill/{voucherId}", "default", "SeckillApiFunction"),
        ("POST", "/voucher-order/seckill/{voucherId}/entry", "default", "SeckillApiFunction"),
        ("GET", "/voucher-order/seckill/{voucherId}/entry", "default", "SeckillApiFunction"),
        ("GET", "/voucher/seckill/{voucherId}/draw", "NONE", "SeckillApiFunction"),
        ("GET", "/voucher-order/{orderId}", "default", "SeckillApiFunction"),
        ("POST", "/voucher-order/{orderId}/payment", "AWS_IAM", "SeckillApiFunction"),
        ("POST", "/voucher-order/{orderId}/cancel", "default", "SeckillApiFunction"),
        ("GET", "/voucher/list/{shopId}", "NONE", "SeckillApiFunction"),
        ("POST", "/voucher/seckill", "AWS_IAM", "SeckillApiFunction"),
        ("POST", "/voucher", "AWS_IAM", "SeckillApiFunction"),
        ("POST", "/voucher/seckill/{voucherId}/stop", "AWS_IAM", "SeckillApiFunction"),
    }
    by_route = {(route.method, route.path): route for route, _ in template.routes()}
    seckill = by_route["POST", "/voucher-order/seckill/{voucherId}"]
    assert seckill.match("POST", "/voucher-order/seckill/42") == {"voucherId": "42"}
    assert seckill.match("post", "/voucher-order/seckill/42") == {"voucherId": "42"}
    assert seckill.match("GET", "/voucher-order/seckill/42") is None
    assert seckill.match("POST", "/voucher-order/seckill/42/x") is None
    assert seckill.match("POST", "/voucher-order/seckill/") is None
    mine = by_route["GET", "/voucher-order/seckill/{voucherId}"]
    assert mine.match("GET", "/voucher-order/seckill/42") == {"voucherId": "42"}
    assert mine.match("GET", "/voucher-order/seckill/42/entry") is None
    assert mine.match("GET", "/voucher-order/42") is None
    status = by_route["GET", "/voucher-order/{orderId}"]
    assert status.match("GET", "/voucher-order/seckill/42") is None
    assert status.match("GET", "/voucher-order/42/payment") is None
    assert by_route["POST", "/voucher-order/{orderId}/cancel"].match("POST", "/voucher-order/42/cancel") == {
        "orderId": "42"
    }
    assert by_route["POST", "/voucher"].match("POST", "/voucher/seckill") is None


def test_template_authorizer_queues_and_event_source(template: Template) -> None:
    assert template.authorizer() == ("AuthorizerFunction", 30)
    assert {"OrderDeadLetterQueue", "OrderQueue"} <= set(template.queues())
    redrive = template.resource("OrderQueue")["Properties"]["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["OrderDeadLetterQueue", "Arn"]}
    assert int(redrive["maxReceiveCount"]) >= 5
    # Visibility at least six times the persister's timeout (AWS's advice for SQS event sources).
    visibility = int(template.resource("OrderQueue")["Properties"]["VisibilityTimeout"])
    assert visibility >= 6 * template.functions["OrderPersisterFunction"].timeout
    (source,) = template.functions["OrderPersisterFunction"].sqs_events
    assert source["Queue"] == {"Fn::GetAtt": ["OrderQueue", "Arn"]}
    assert "ReportBatchItemFailures" in source["FunctionResponseTypes"]
    assert template.resolve(source["BatchSize"], {}) == "10"
    assert template.resolve(source["ScalingConfig"]["MaximumConcurrency"], {"PersisterMaxConcurrency": "3"}) == "3"
    assert template.resolve({"Fn::Sub": "x"}, {}) is None


def test_template_schedules_are_read(template: Template) -> None:
    reconcile, edge_notice = template.functions["ReconcilerFunction"].schedules
    assert template.resolve(reconcile["Schedule"], {}) == "rate(5 minutes)"
    assert template.resolve(edge_notice["Schedule"], {}) == "rate(1 minute)"
    assert scheduled_event(edge_notice) == {"edgeOnly": True}  # the target's Input


@pytest.mark.parametrize(
    ("expression", "seconds"),
    [("rate(1 minute)", 60), ("rate(5 minutes)", 300), ("rate(2 hours)", 7200), ("cron(0 12 * * ? *)", None)],
)
def test_rate_expressions(expression: str, seconds: int | None) -> None:
    assert rate_seconds(expression) == seconds


def test_scheduled_event_is_eventbridges_or_the_targets_input() -> None:
    assert scheduled_event({})["detail-type"] == "Scheduled Event"
    assert scheduled_event({"Input": '{"pendingAgeSeconds": 30}'}) == {"pendingAgeSeconds": 30}

"""Refusals are counted without a metrics document per request (seckill.press.tally): summed
in memory, published as CloudWatch EMF when due, read here from stdout as CloudWatch would."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from seckill.press.tally import Tally
from tests.helpers import body, module_of, new_user, seckill_event

Handler = Callable[[dict[str, Any], Any], dict[str, Any]]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def emf(out: str) -> list[dict[str, Any]]:
    """The EMF documents among the printed lines (logs are JSON too, without ``_aws``)."""
    documents = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [d for d in documents if "_aws" in d]


def published(document: dict[str, Any]) -> dict[str, float]:
    """Each metric the document declares, with its value summed as CloudWatch sums it."""
    names = [m["Name"] for directive in document["_aws"]["CloudWatchMetrics"] for m in directive["Metrics"]]
    return {name: sum(document[name]) if isinstance(document[name], list) else document[name] for name in names}


@pytest.fixture
def metrics(monkeypatch: pytest.MonkeyPatch) -> Iterator[Metrics]:
    """Powertools Metrics, enabled (the suite disables them), starting empty."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    metrics = Metrics(namespace="Seckill", service="seckill")
    metrics.clear_metrics()
    yield metrics
    metrics.clear_metrics()


def test_refusals_are_summed_and_published_once_due(metrics: Metrics, capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    tally = Tally(metrics, every=10, clock=clock)
    refuse = tally.log_metrics(lambda code: tally.count(f"Refused{code}"))
    for _ in range(700):
        refuse("SOLD_OUT")
    refuse("DUPLICATE_ORDER")
    clock.now += 9.9
    refuse("SOLD_OUT")
    assert emf(capsys.readouterr().out) == []  # not one document for 702 refusals

    clock.now += 0.1
    refuse("SOLD_OUT")
    (document,) = emf(capsys.readouterr().out)
    assert published(document) == {"RefusedSOLD_OUT": 702, "RefusedDUPLICATE_ORDER": 1}
    assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Seckill"
    assert document["service"] == "seckill"

    # Counted once: the next period starts from zero.
    clock.now += 10
    refuse("ENDED")
    (document,) = emf(capsys.readouterr().out)
    assert published(document) == {"RefusedENDED": 1}


def test_a_metric_of_its_own_publishes_the_pending_counts_with_it(
    metrics: Metrics, capsys: pytest.CaptureFixture[str]
) -> None:
    tally = Tally(metrics, every=3600, clock=Clock())

    @tally.log_metrics
    def press(accepted: bool) -> None:
        if accepted:
            metrics.add_metric(name="OrdersAccepted", unit=MetricUnit.Count, value=1)
        else:
            tally.count("RefusedSOLD_OUT")

    press(False)
    press(False)
    assert emf(capsys.readouterr().out) == []
    press(True)
    (document,) = emf(capsys.readouterr().out)
    assert published(document) == {"OrdersAccepted": 1, "RefusedSOLD_OUT": 2}


def test_an_invocation_that_raises_still_publishes_when_due(
    metrics: Metrics, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = Clock()
    tally = Tally(metrics, every=1, clock=clock)

    @tally.log_metrics
    def fail() -> None:
        tally.count("RefusedSOLD_OUT")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        fail()
    clock.now += 1
    with pytest.raises(RuntimeError):
        fail()
    (document,) = emf(capsys.readouterr().out)
    assert published(document) == {"RefusedSOLD_OUT": 2}


def test_the_api_counts_its_refusals_without_printing_each(
    handlers: dict[str, Handler],
    context: Any,
    make_voucher: Callable[..., int],
    order_queue: str,
    metrics: Metrics,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through SeckillApiFunction's handler: the winner's 202 publishes at once; the
    refusals are summed until the tally is due."""
    handler = handlers["SeckillApiFunction"]
    module = module_of(handler)
    clock = Clock()
    monkeypatch.setattr(module.tally, "clock", clock)
    monkeypatch.setattr(module.tally, "_published", clock.now)
    module.tally.counts.clear()
    voucher_id = make_voucher(stock=1)

    def press(user_id: int) -> int:
        response = handler(seckill_event(voucher_id, user_id), context)
        return int(response["statusCode"]) if response["statusCode"] != 409 else body(response)["code"]

    winner = new_user()
    assert press(winner) == 202
    (accepted,) = emf(capsys.readouterr().out)
    assert published(accepted) == {"OrdersAccepted": 1}

    losers = [press(new_user()) for _ in range(25)]
    assert set(losers) == {"SOLD_OUT"}
    assert emf(capsys.readouterr().out) == []

    clock.now += module.tally.every
    assert press(new_user()) == "SOLD_OUT"
    (refused,) = emf(capsys.readouterr().out)
    assert published(refused) == {"RefusedSOLD_OUT": 26}

"""Which key signs a pass, given what the edge holds (seckill.edge.passkeys), and the
last good value of a secret whose refresh fails (seckill.infra.secrets)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools import Metrics

from seckill.edge import passkeys
from seckill.edge.passkeys import PROPAGATION_SECONDS, Held
from seckill.infra import secrets
from seckill.infra.errors import TryAgain
from seckill.passes import KeyRing

NOW = 1_800_000_000.0
RING = KeyRing("k2", {"k1": bytes([1]) * 32, "k2": bytes([2]) * 32})


def test_without_an_edge_or_with_none_held_the_active_key_signs() -> None:
    assert passkeys.signing_kid(RING, None, NOW) == "k2"
    # The store has no `pass-keys`: the edge forwards every pass for the function to verify.
    assert passkeys.signing_kid(RING, Held({}), NOW) == "k2"


def test_the_active_key_signs_only_once_the_edge_holds_it() -> None:
    held = Held({"k1": NOW - 3600, "k2": NOW + 10})
    assert passkeys.signing_kid(RING, held, NOW) == "k1"
    assert passkeys.signing_kid(RING, held, NOW + 9.9) == "k1"
    assert passkeys.signing_kid(RING, held, NOW + 10) == "k2"


def test_else_the_key_of_the_ring_held_the_shortest_time_signs() -> None:
    ring = KeyRing("k3", {**RING.keys, "k3": bytes([3]) * 32})
    held = Held({"k1": NOW - 3600, "k2": NOW - 60, "k3": NOW + 30, "k9": NOW - 1})  # k9: not in the ring
    assert passkeys.signing_kid(ring, held, NOW) == "k2"


def test_a_ring_whose_every_key_the_edge_lacks_is_a_503_not_a_refused_pass() -> None:
    replaced = KeyRing("k3", {"k3": bytes([3]) * 32})
    with pytest.raises(TryAgain, match="on its way to the edge"):
        passkeys.signing_kid(replaced, Held({"k1": NOW - 3600, "k2": NOW - 60}), NOW)
    with pytest.raises(TryAgain):
        passkeys.signing_kid(replaced, Held({"k1": NOW - 3600, "k3": NOW + 1}), NOW)


def test_a_new_key_is_held_after_the_propagation_an_old_one_keeps_its_time() -> None:
    stored = passkeys.value(RING, 5)
    previous = Held({"k1": NOW - 3600, "k0": NOW - 7200})  # k0: retired from the store
    assert passkeys.confirmed(previous, stored, NOW) == Held({"k1": NOW - 3600, "k2": NOW + PROPAGATION_SECONDS})
    # The first keys ever: the edge forwarded every pass until now, so they hold at once.
    assert passkeys.confirmed(Held({}), stored, NOW) == Held({"k1": NOW, "k2": NOW})
    # No usable value in the store: nothing held.
    assert passkeys.confirmed(previous, None, NOW) == Held({})
    assert passkeys.confirmed(previous, "{}", NOW) == Held({})


def test_held_reads_back_what_it_wrote() -> None:
    held = Held({"k2": NOW + 60, "k1": NOW})
    assert Held.from_json(held.to_json()) == held
    assert json.loads(held.to_json()) == {"keys": {"k1": NOW, "k2": NOW + 60}}


def test_the_store_takes_a_ring_only_over_an_older_one() -> None:
    old, new = passkeys.value(KeyRing("k1", {"k1": RING.keys["k1"]}), 1000), passkeys.value(RING, 2000)
    assert passkeys.replaces(new, old)
    assert passkeys.replaces(new, None)
    assert passkeys.replaces(new, "not json")
    assert passkeys.replaces(new, json.dumps({"keys": {}}))  # without a version: the oldest
    assert not passkeys.replaces(new, new)
    # A publisher that read the ring before the operator's change never takes k2 back out.
    assert not passkeys.replaces(old, new)
    # The same version (a local ring): the ring given wins.
    assert passkeys.replaces(passkeys.value(RING, 0), passkeys.value(KeyRing("k1", {"k1": RING.keys["k1"]}), 0))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Source:
    """Stands in for Secrets Manager behind Powertools' cache: a value, or a failure."""

    def __init__(self) -> None:
        self.value: Any = "v1"
        self.failing = False
        self.calls = 0

    def __call__(self, arn: str, max_age: int, transform: str | None) -> Any:
        self.calls += 1
        if self.failing:
            raise ConnectionError("Secrets Manager unreachable")
        return self.value


@pytest.fixture
def metrics() -> Any:
    shared = Metrics(namespace="Seckill")  # the set every Metrics instance of the process adds to
    shared.clear_metrics()
    yield shared
    shared.clear_metrics()


def test_a_failed_refresh_serves_the_last_good_value_within_the_bound_and_counts_it(metrics: Metrics) -> None:
    clock, source = Clock(), Source()
    cache = secrets.StaleIfError(source, clock=clock, stale_max=3600, retry=10)
    assert cache.get("arn", 60) == "v1"
    source.failing = True
    clock.now = 61
    assert cache.get("arn", 60) == "v1"
    assert metrics.metric_set[secrets.METRIC]["Value"] == [1.0]
    # Not asked again on every request while it fails: after the retry pause only.
    calls = source.calls
    clock.now = 70
    assert cache.get("arn", 60) == "v1"
    assert source.calls == calls
    clock.now = 71.5
    assert cache.get("arn", 60) == "v1"
    assert source.calls == calls + 1
    # Past the bound the failure is the caller's.
    clock.now = 3601
    with pytest.raises(ConnectionError):
        cache.get("arn", 60)
    # A refresh that works again ends it.
    source.failing, source.value = False, "v2"
    assert cache.get("arn", 60) == "v2"


def test_a_secret_never_read_fails_and_is_counted(metrics: Metrics) -> None:
    source = Source()
    source.failing = True
    with pytest.raises(ConnectionError):
        secrets.StaleIfError(source, clock=Clock()).get("arn", 60)
    assert metrics.metric_set[secrets.METRIC]["Value"] == [1.0]


def test_each_transform_of_a_secret_is_its_own_value() -> None:
    source = Source()
    cache = secrets.StaleIfError(source, clock=Clock())
    assert cache.get("arn", 60) == "v1"
    source.value = {"current": "x"}
    assert cache.get("arn", 60, "json") == {"current": "x"}

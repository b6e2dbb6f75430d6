"""The gate on Redis Cluster: with ``REDIS_CLUSTER=true`` the same scripts run
unchanged, because every key of a voucher carries its ``{voucherId}`` hash tag.

A three-node cluster of the suite's own is started on free ports (redis-server
and redis-cli, as installed with Redis) and removed at the end.
"""

from __future__ import annotations

import functools
import json
import random
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from seckill import hints, holds
from seckill.edge.state import claim
from seckill.infra import keys
from seckill.infra.clients import redis_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.errors import Refusal
from seckill.infra.lua_scripts import Scripts
from seckill.messages import OrderQueue
from seckill.persist.persistence import Decision, persist_orders
from seckill.press.gate import Gate, Reservation
from seckill.press.orders import place_order
from seckill.repair.counter import restore_order_counter
from seckill.vouchers import create_seckill_voucher, preload
from tests.helpers import accept, closed_port, new_user, on_sale, wait_for

NODES = 3


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    assert shutil.which("redis-server"), "Redis must be installed"
    assert shutil.which("redis-cli"), "Redis must be installed"
    workdir = tmp_path_factory.mktemp("cluster")
    ports = cluster_ports()
    processes = []
    for port in ports:
        node = workdir / str(port)
        node.mkdir()
        command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes"]
        command += ["--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no", "--dir", str(node)]
        processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # noqa: S603
    try:
        for port in ports:
            wait_for(functools.partial(ping, port), f"the Redis node on port {port}", timeout=20, interval=0.1)
        create = ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports), "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)  # noqa: S603
        wait_for(
            lambda: info(ports[0]),
            "cluster_state:ok",
            until=lambda text: "cluster_state:ok" in text,
            timeout=20,
            interval=0.1,
        )
        yield f"redis://127.0.0.1:{ports[0]}/0"
    finally:
        for process in processes:
            process.kill()
            process.wait()


def cluster_ports() -> list[int]:
    """Free ports whose cluster-bus twins (port + 10000) are free too."""
    ports: list[int] = []
    while len(ports) < NODES:
        port = random.randint(20000, 29999)
        if port not in ports and all(free(p) for p in (port, port + 10000)):
            ports.append(port)
    return ports


def free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cli(port: int, *args: str) -> str:
    done = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, check=False)  # noqa: S603, S607
    return done.stdout


def ping(port: int) -> bool:
    return cli(port, "ping").strip() == "PONG"


def info(port: int) -> str:
    return cli(port, "cluster", "info")


@pytest.fixture(scope="module")
def cluster(cluster_url: str, db: Database) -> Any:
    """A new Redis for the suite's database: before it is marked loaded, its order-id
    counter is raised as recovery raises it (seckill.repair.counter). Marked loaded at 0,
    it leased the very blocks the suite's own Redis had, and an order stored through it
    took the id a later test's reservation was given in the same second."""
    settings = Settings.from_env({"REDIS_URL": cluster_url, "REDIS_CLUSTER": "true"})
    client = redis_client(settings)
    restore_order_counter(db, Scripts.register(client))
    client.set(keys.loaded(), 1)
    return client


def test_redis_cluster_flag_switches_to_the_cluster_client(cluster: Any) -> None:
    assert isinstance(cluster, RedisCluster)
    assert len(cluster.get_nodes()) == NODES


def test_the_gate_and_its_scripts_run_unchanged_on_a_cluster(cluster: Any) -> None:
    scripts = Scripts.register(cluster)
    gate = Gate(cluster, scripts, refusal_cache_seconds=0)
    # Vouchers land in different slots (and so on different nodes), each voucher in one.
    voucher_ids = [new_user() for _ in range(6)]
    slots = {cluster.keyslot(keys.stock(v)) for v in voucher_ids}
    assert len(slots) > 1
    now = datetime.now(UTC)
    for voucher_id in voucher_ids:
        preload(cluster, voucher_id, 2, now - timedelta(minutes=1), now + timedelta(hours=1))
        assert {cluster.keyslot(k(voucher_id)) for k in (keys.stock, keys.buyers, keys.window, keys.pending)} == {
            cluster.keyslot(keys.stock(voucher_id))
        }
        first, second, late = new_user(), new_user(), new_user()
        # The order id's block comes from icr:order:*, in a slot of its own.
        reservation = gate.reserve(voucher_id, first, uuid.uuid4().hex)
        assert isinstance(reservation, Reservation)
        order_id = reservation.order_id
        assert gate.promise(voucher_id, first, order_id)
        gate.reserve(voucher_id, second, uuid.uuid4().hex)
        assert gate.reserve(voucher_id, late, uuid.uuid4().hex) == Refusal(409, "SOLD_OUT", "sold out")
        # Stock is checked before the buyers set.
        assert gate.reserve(voucher_id, first, uuid.uuid4().hex) == Refusal(409, "SOLD_OUT", "sold out")
        assert gate.settle(voucher_id, first, order_id)
        assert gate.release(reservation) is False  # settled: nothing of that request left to release
        assert cluster.get(keys.stock(voucher_id)) == "0"
        assert cluster.smembers(keys.buyers(voucher_id)) == {str(first), str(second)}
        # A closed hold's unit goes back in the voucher's slot too (and the buyer stays).
        assert holds.give_back(scripts, voucher_id, order_id) == 1
        assert holds.give_back(scripts, voucher_id, order_id) == 0
        assert cluster.get(keys.stock(voucher_id)) == "1"
        assert cluster.keyslot(keys.returned(voucher_id)) == cluster.keyslot(keys.stock(voucher_id))
        # The contract's names, as written there (what outside tools read).
        assert cluster.sismember(f"seckill:returned:{{{voucher_id}}}", str(order_id))
        # The edge's election reads and writes in that slot too.
        claimed = claim(scripts, voucher_id)
        assert claimed is not None
        assert not claimed.sold_out
        assert cluster.keyslot(keys.edge(voucher_id)) == cluster.keyslot(keys.stock(voucher_id))
        assert cluster.exists(f"seckill:edge:{{{voucher_id}}}") == 1


def test_an_unreachable_cluster_is_a_clear_error() -> None:
    settings = Settings.from_env({"REDIS_URL": f"redis://127.0.0.1:{closed_port()}/0", "REDIS_CLUSTER": "true"})
    with pytest.raises((RedisError, RedisClusterException)):
        redis_client(settings).ping()


def test_a_batch_is_written_back_across_slots_in_one_pipeline(cluster: Any, db: Database) -> None:
    """The persister's Redis side on a cluster: a batch's vouchers, and its orders' status
    hints (by order id alone), live in many slots on several nodes; and the nodes have
    lost their scripts (a restart), which the write-back loads again."""
    scripts = Scripts.register(cluster)
    gate = Gate(cluster, scripts, refusal_cache_seconds=0)
    voucher = on_sale(stock=3)
    voucher_ids = [create_seckill_voucher(db, cluster, voucher) for _ in range(4)]
    messages = [accept(gate, voucher_id) for voucher_id in voucher_ids for _ in range(2)]
    for m in messages:
        hints.write_pending(cluster, m, 60)
    assert len({cluster.keyslot(keys.pending(v)) for v in voucher_ids}) > 1
    assert len({cluster.get_node_from_key(keys.order_status(m.order_id)).name for m in messages}) > 1
    cluster.script_flush()
    assert cluster.script_exists(scripts.settle.sha) == [False]

    outcomes = persist_orders(db, cluster, scripts, messages)

    assert outcomes == [Decision("CONFIRMED")] * len(messages)
    for m in messages:
        assert not cluster.hexists(keys.pending(m.voucher_id), str(m.user_id))
        assert json.loads(cluster.get(keys.order_status(m.order_id)))["status"] == "CONFIRMED"


def test_a_press_is_promised_with_its_hint_across_slots_after_the_nodes_lost_their_scripts(
    cluster: Any, db: Database, sqs: Any, queues: dict[str, str]
) -> None:
    """The press's last round trip on a cluster: the promise (the voucher's slot) and the
    PENDING hint (the order id's) in one pipeline, with the promise script loaded again."""
    scripts = Scripts.register(cluster)
    gate = Gate(cluster, scripts, refusal_cache_seconds=0)
    voucher = on_sale(stock=1)
    voucher_id, buyer = create_seckill_voucher(db, cluster, voucher), new_user()
    queue = OrderQueue(sqs, queues["OrderQueue"])
    cluster.script_flush()

    order_id = place_order(gate, cluster, queue, db, voucher_id, buyer, status_ttl=60)

    assert cluster.hget(keys.pending(voucher_id), str(buyer)).endswith(f":{order_id}:promised")
    assert json.loads(cluster.get(keys.order_status(order_id)))["status"] == "PENDING"

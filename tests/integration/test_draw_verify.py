"""seckill-draw verify against a real draw: a draw voucher made, entered (before and after
the close), moved and stopped through SeckillApiFunction and the draw clock, its record
served over HTTP as the route serves it; real Redis, MariaDB and a moto SQS server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from seckill.draw.moves import ClockQueue, Tick
from seckill.infra.db import Database
from seckill_ops.draw import MISMATCH, NOT_REVEALED, OK, main
from tests.helpers import load_event, new_user, with_path
from tests.integration.test_draw import Call, clock, decide, draw_event, draws, enter, shift

__all__ = ["clock", "draws"]  # the fixtures this module shares with test_draw


@pytest.fixture
def draw_route(call: Call) -> Iterator[str]:
    """GET /voucher/seckill/{v}/draw over HTTP, answered by SeckillApiFunction as API Gateway would."""

    class Route(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            response = call(draw_event(self.path.split("/")[3]))
            data = response["body"].encode()
            self.send_response(response["statusCode"])
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Route)  # one request at a time: the handler is called in-process
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_verify_audits_admitted_waiting_and_late_entrants_of_a_real_draw(
    call: Call,
    db: Database,
    redis: Any,
    draws: Callable[..., int],
    clock: ClockQueue,
    draw_route: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    voucher_id = draws(stock=2, admitFactor=2)
    users = [new_user() for _ in range(8)]
    tickets = {u: enter(call, voucher_id, u)["ticket"] for u in users}
    shift(db, redis, voucher_id, 21)  # the draw closed a second ago
    late_user = new_user()
    late = enter(call, voucher_id, late_user)
    assert late["late"] is True
    assert decide(db, redis, clock, voucher_id).tick is Tick.MOVED  # the first move: 2 x 2 admitted
    ranked = sorted(users, key=tickets.__getitem__)
    verify = ["verify", "--endpoint", draw_route, "--voucher", str(voucher_id), "--json", "--user"]

    def audit(*args: str) -> tuple[int, dict[str, Any]]:
        code = main([*verify, *args])
        return code, json.loads(capsys.readouterr().out)

    # Before the reveal: a ticket the user holds can be placed, the seed not checked.
    code, before = audit(str(ranked[0]), "--ticket", tickets[ranked[0]])
    assert code == NOT_REVEALED
    assert before["admitted"] is True

    stop = with_path(load_event("seckill_api_stop_voucher.json"), f"/voucher/seckill/{voucher_id}/stop",
                     voucherId=str(voucher_id))  # fmt: skip
    assert call(stop)["statusCode"] == 200

    for user in ranked[:4]:
        code, audited = audit(str(user))
        assert code == OK, audited
        assert audited["ticket"] == tickets[user]  # derived from the revealed seed: the entry's own
        assert audited["admitted"] is True
    for user in ranked[4:]:
        code, audited = audit(str(user))
        assert code == OK, audited
        assert audited["admitted"] is False
    code, audited = audit(str(late_user), "--ticket", late["ticket"])
    assert code == OK, audited
    assert audited["admitted"] is False
    # Another user's ticket is not this user's: a mismatch.
    code, audited = audit(str(ranked[0]), "--ticket", tickets[ranked[1]])
    assert code == MISMATCH
    assert [c["name"] for c in audited["checks"] if not c["ok"]] == ["the ticket is the user's"]

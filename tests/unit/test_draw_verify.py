"""seckill-draw verify: the audit of a draw record, on a known answer computed outside
Python (openssl: ``printf 7:42 | openssl dgst -sha256 -mac HMAC -macopt hexkey:<seed>``
and ``sha256sum`` of the seed's bytes), and the command's exit codes against a small
HTTP server standing in for the draw route."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from seckill_ops.draw import MISMATCH, NOT_REVEALED, OK, UNREACHABLE, audit, main
from tests.helpers import closed_port

SEED = bytes(range(32)).hex()
COMMITMENT = "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd"  # sha256sum of the seed's bytes
TICKET_7_42 = "06fcb749bc5c17f36"  # "0" + openssl's HMAC of "7:42", first 16 hex


def record(**changes: Any) -> dict[str, Any]:
    """A draw record of voucher 7: three moves, two late entrants, the seed revealed."""
    return {
        "commitment": COMMITMENT,
        "closesAt": "2026-12-01T11:59:00Z",
        "entrants": 1000,
        "lateEntrants": 2,
        "cursor": "10000000000000003",
        "cursorHistory": [
            {"at": "2026-12-01T11:59:00Z", "cursor": "0400000000000000a"},
            {"at": "2026-12-01T12:00:10Z", "cursor": "07000000000000000"},
            {"at": "2026-12-01T12:00:20Z", "cursor": "10000000000000003"},
        ],
        "seed": SEED,
    } | changes


def test_a_drawn_ticket_is_admitted_by_the_first_move_above_it() -> None:
    result = audit(record(), 7, 42)
    assert result.exit_code == OK
    assert result.ticket == TICKET_7_42
    # 06fc... is not below 0400... but below 0700...: the second move admitted it.
    assert (result.admitted_at, result.admitted_by) == ("2026-12-01T12:00:10Z", "07000000000000000")


def test_a_ticket_above_every_move_is_not_admitted_and_still_passes() -> None:
    history = record()["cursorHistory"][:1]
    result = audit(record(cursorHistory=history, cursor=history[0]["cursor"]), 7, 42)
    assert result.exit_code == OK
    assert result.admitted_by is None


def test_a_seed_that_does_not_match_the_commitment_fails() -> None:
    result = audit(record(seed="ff" * 32), 7, 42)
    assert result.exit_code == MISMATCH
    assert [c.name for c in result.checks if not c.ok] == ["the seed matches the commitment"]


def test_a_ticket_the_seed_does_not_give_fails() -> None:
    result = audit(record(), 7, 42, ticket="06fcb749bc5c17f37")
    assert result.exit_code == MISMATCH
    assert "the seed gives this user 06fcb749bc5c17f36" in result.checks[-1].detail


def test_a_late_ticket_within_the_late_count_passes_and_beyond_it_fails() -> None:
    late = audit(record(), 7, 42, ticket="10000000000000002")
    assert late.exit_code == OK
    assert late.admitted_by == "10000000000000003"  # the last move admitted every late entrant
    beyond = audit(record(), 7, 42, ticket="10000000000000003")
    assert beyond.exit_code == MISMATCH
    assert "late entry number 3 of 2" in beyond.checks[-1].detail


def test_a_cursor_moving_back_fails() -> None:
    history = record()["cursorHistory"]
    history[1], history[2] = history[2], history[1]
    result = audit(record(cursorHistory=history), 7, 42)
    assert result.exit_code == MISMATCH
    assert not next(c for c in result.checks if c.name == "the cursor never moved back").ok


def test_a_seed_not_revealed_yet_is_its_own_exit_code() -> None:
    result = audit(record(seed=None), 7, 42)
    assert result.exit_code == NOT_REVEALED
    assert result.ticket is None
    assert result.admitted_by is None
    # With the ticket the entry route gave, admission can be told before the reveal.
    told = audit(record(seed=None), 7, 42, ticket=TICKET_7_42)
    assert told.exit_code == NOT_REVEALED
    assert told.admitted_by == "07000000000000000"


def test_a_malformed_record_fails_without_a_crash() -> None:
    result = audit(record(cursorHistory=[{"at": 1, "cursor": "not hex"}]), 7, 42)
    assert result.exit_code == MISMATCH
    assert result.checks[0].name == "the record is well formed"


@pytest.fixture
def draw_route() -> Iterator[tuple[str, dict[int, tuple[int, Any]]]]:
    """A local HTTP server answering GET /voucher/seckill/{v}/draw from ``answers``: v -> (status, body)."""
    answers: dict[int, tuple[int, Any]] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, payload = answers.get(int(self.path.split("/")[3]), (404, {"code": "VOUCHER_NOT_FOUND"}))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


def ok_body(data: dict[str, Any]) -> dict[str, Any]:
    return {"success": True, "data": data, "errorMsg": None, "code": None}


def test_the_command_exits_by_what_it_found(
    draw_route: tuple[str, dict[int, tuple[int, Any]]], capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint, answers = draw_route
    answers[7] = (200, ok_body(record()))
    answers[8] = (200, ok_body(record(seed=None)))
    answers[9] = (200, ok_body(record(seed="00" * 32)))
    verify = ["verify", "--endpoint", endpoint, "--user", "42", "--voucher"]
    assert main([*verify, "7"]) == OK
    assert "admitted at 2026-12-01T12:00:10Z" in capsys.readouterr().out
    assert main([*verify, "8"]) == NOT_REVEALED
    assert main([*verify, "9"]) == MISMATCH
    assert main([*verify, "10"]) == UNREACHABLE  # 404: not a draw
    assert "404 VOUCHER_NOT_FOUND" in capsys.readouterr().err
    assert main([*verify, "7", "--json"]) == OK
    assert json.loads(capsys.readouterr().out)["admitted"] is True


def test_an_unreachable_endpoint_exits_4(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["verify", "--voucher", "7", "--user", "42", "--endpoint", f"http://127.0.0.1:{closed_port()}"])
    assert code == UNREACHABLE
    assert "did not answer" in capsys.readouterr().err

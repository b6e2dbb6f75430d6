"""docs/openapi.json: current with the code, every route of the template with its auth,
and every status and error code of docs/contract.md's HTTP table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openapi_spec_validator import validate

from seckill.ids import MAX_ID, parse_id
from seckill.infra.errors import BadRequest
from seckill.infra.timeutil import parse_iso
from seckill.openapi import ADMIN, USER
from seckill_local.checkout import ROOT
from seckill_local.openapi_command import DOCUMENT
from seckill_local.template import Template

CONTRACT = ROOT / "docs" / "contract.md"
# What a status means wherever the contract names no code for it (its bullets say so).
IMPLIED = {400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 503: "TRY_AGAIN"}
AUTH = {"default": {USER}, "AWS_IAM": {ADMIN}, "NONE": set()}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(DOCUMENT.read_text(encoding="utf-8"))
    return document


def openapi_command(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "seckill_local.openapi_command", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)  # noqa: S603


def test_the_committed_document_is_what_the_code_describes() -> None:
    result = openapi_command("--check")
    assert result.returncode == 0, f"{result.stderr}{result.stdout}\nRegenerate it with `make openapi` and commit it."


def test_a_stale_document_is_refused_with_the_command_to_run(tmp_path: Path) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text("{}\n", encoding="utf-8")
    result = openapi_command("--check", "--out", str(stale))
    assert result.returncode == 1
    assert "make openapi" in result.stderr
    assert stale.read_text(encoding="utf-8") == "{}\n"  # --check writes nothing

    assert openapi_command("--out", str(stale)).returncode == 0
    assert stale.read_text(encoding="utf-8") == DOCUMENT.read_text(encoding="utf-8")


def test_the_document_is_valid_openapi(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    validate(spec)  # raises on anything OpenAPI 3.1 does not allow


def test_every_route_of_the_template_with_its_auth(spec: dict[str, Any], template: Template) -> None:
    documented = {
        (method.upper(), path, frozenset(name for requirement in op.get("security", []) for name in requirement))
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    }
    routes = {(route.method, route.path, frozenset(AUTH[route.auth])) for route, _ in template.routes()}
    assert documented == routes
    assert set(spec["components"]["securitySchemes"]) == {USER, ADMIN}


def codes_of(response: dict[str, Any]) -> set[str]:
    """The ``code`` values a documented answer may carry."""
    schema = response["content"]["application/json"]["schema"]
    return {
        code
        for branch in schema.get("oneOf", [schema])
        for code in branch["properties"].get("code", {}).get("enum", [])
    }


def contract_rows() -> list[tuple[str, str, str, str]]:
    rows = []
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        found = re.fullmatch(r"\| `(GET|POST) (/[^`?]*)[^`]*` \| [^|]+ \| ([^|]+) \| ([^|]+) \|", line)
        if found:
            rows.append((found[1], found[2], found[3], found[4]))
    return rows


def test_every_status_and_code_of_the_contract(spec: dict[str, Any]) -> None:
    rows = contract_rows()
    assert len(rows) == 12
    for method, path, success, failures in rows:
        responses = spec["paths"][path][method.lower()]["responses"]
        assert re.match(r"\d{3}", success)[0] in responses, (method, path)  # type: ignore[index]
        for part in failures.split(";"):
            status = int(re.search(r"\d{3}", part)[0])  # type: ignore[index]
            codes = set(re.findall(r"`([A-Z_]+)`", part)) or {IMPLIED[status]}
            assert str(status) in responses, (method, path, status)
            assert codes <= codes_of(responses[str(status)]), (method, path, status)


def patterns(spec: dict[str, Any]) -> dict[str, str]:
    """The pattern of each path or query parameter and of each body's times, by name."""
    found = {
        parameter["name"]: parameter["schema"]["pattern"]
        for ops in spec["paths"].values()
        for op in ops.values()
        for parameter in op.get("parameters", [])
    }
    properties = spec["components"]["schemas"]["SeckillVoucherIn"]["properties"]
    return {**found, "beginTime": properties["beginTime"]["pattern"], "endTime": properties["endTime"]["pattern"]}


def test_the_id_pattern_admits_exactly_the_ids_the_service_takes(spec: dict[str, Any]) -> None:
    pattern = re.compile(patterns(spec)["voucherId"])
    assert {patterns(spec)[name] for name in ("voucherId", "orderId", "shopId", "after")} == {pattern.pattern}
    edges = [1, 9, 10, 10**18 - 1, 10**18, MAX_ID - 1, MAX_ID, MAX_ID + 1, 9223372036854775810, 10**19 - 1, 10**19]
    for number in [*edges, *(int(str(MAX_ID)[:i] + "9" * (19 - i)) for i in range(19))]:
        assert (pattern.fullmatch(str(number)) is not None) == (1 <= number <= MAX_ID), number
        if number <= MAX_ID:
            assert parse_id(str(number), "id") == number
        else:
            with pytest.raises(BadRequest):
                parse_id(str(number), "id")


def test_the_limit_pattern_admits_exactly_1_to_100(spec: dict[str, Any]) -> None:
    pattern = re.compile(patterns(spec)["limit"])
    for number in range(1000):
        assert (pattern.fullmatch(str(number)) is not None) == (1 <= number <= 100), number
    assert pattern.fullmatch("007")
    assert not pattern.fullmatch("0")


@settings(derandomize=True, max_examples=500, database=None)
@given(data=st.data())
def test_every_time_the_document_admits_parses(spec: dict[str, Any], data: st.DataObject) -> None:
    text = data.draw(st.from_regex(patterns(spec)["beginTime"], fullmatch=True))
    parse_iso(text)  # raises if the document admits a time the service refuses


@pytest.mark.parametrize("text", ["2030-02-29T00:00", "2100-02-29T00:00", "0000-01-01T00:00", "2030-04-31T00:00"])
def test_the_time_pattern_refuses_days_the_calendar_lacks(spec: dict[str, Any], text: str) -> None:
    assert re.fullmatch(patterns(spec)["beginTime"], text) is None
    assert re.fullmatch(patterns(spec)["beginTime"], "2000-02-29T00:00")  # a leap year of a 400


def test_an_order_may_fail_for_every_reason_of_the_contract(spec: dict[str, Any]) -> None:
    reasons = spec["components"]["schemas"]["OrderStatus"]["properties"]["reason"]["anyOf"][0]["enum"]
    failed = set(re.findall(r"FAILED `([A-Z_]+)`", CONTRACT.read_text(encoding="utf-8")))
    assert "VOUCHER_NOT_FOUND" in failed
    assert set(reasons) == failed


@pytest.mark.parametrize(("model", "kind"), [("VoucherIn", 0), ("SeckillVoucherIn", 1)])
def test_each_voucher_route_documents_its_one_type(spec: dict[str, Any], model: str, kind: int) -> None:
    assert spec["components"]["schemas"][model]["properties"]["type"]["const"] == kind

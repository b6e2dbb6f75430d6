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
from openapi_spec_validator import validate

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
    assert len(rows) == 6
    for method, path, success, failures in rows:
        responses = spec["paths"][path][method.lower()]["responses"]
        assert re.match(r"\d{3}", success)[0] in responses, (method, path)  # type: ignore[index]
        for part in failures.split(";"):
            status = int(re.search(r"\d{3}", part)[0])  # type: ignore[index]
            codes = set(re.findall(r"`([A-Z_]+)`", part)) or {IMPLIED[status]}
            assert str(status) in responses, (method, path, status)
            assert codes <= codes_of(responses[str(status)]), (method, path, status)

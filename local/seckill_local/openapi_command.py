"""``seckill-openapi``: write docs/openapi.json, the OpenAPI document of the HTTP API,
from the routes of SeckillApiFunction (Powertools generates it from each route's
path, parameters and declared answers; ``seckill.openapi`` holds the schemas).

  seckill-openapi            write the document
  seckill-openapi --check    exit 1 if the committed document is not what the code says
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from seckill import openapi
from seckill_local.checkout import ROOT, write_or_check
from seckill_local.lambdas import load_handler
from seckill_local.sqs import LOCAL_AWS
from seckill_local.template import Template

DOCUMENT = ROOT / "docs" / "openapi.json"
EVENTS = ROOT / "events"
DESCRIPTION = (
    "Seckill's HTTP API: a flash sale of vouchers. Every body is hm-dianping's `Result` "
    '(`{"success", "data", "errorMsg", "code"}`) except the answers API Gateway gives itself '
    '(`{"message"}`). Order ids travel as strings. An integer is written as one (`1`, not `1.0` or `1e0`, '
    "which JSON Schema's `integer` admits too). docs/contract.md is the contract in words."
)


def document() -> str:
    """The document as the code describes it, as JSON text."""
    # Importing the function builds its clients; none connects, but boto3 needs a region.
    for name, value in {**LOCAL_AWS, "POWERTOOLS_TRACE_DISABLED": "true"}.items():
        os.environ.setdefault(name, value)
    handler = load_handler(Template.load().functions["SeckillApiFunction"])
    app = sys.modules[handler.__module__].app
    spec: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(
            title="Seckill",
            version=version("seckill"),
            description=DESCRIPTION,
            security_schemes=openapi.SECURITY_SCHEMES,
        )
    )
    # Every body is one of these; what Powertools adds for its validation errors is never answered (no 422).
    spec["components"]["schemas"] = openapi.component_schemas()
    add_examples(spec)
    return json.dumps(spec, indent=2, ensure_ascii=False) + "\n"


def add_examples(spec: dict[str, Any]) -> None:
    """Each request body's example: the body of the route's events/ file (what ``sam local invoke`` sends)."""
    for path in sorted(EVENTS.glob("seckill_api_*.json")):
        event = json.loads(path.read_text(encoding="utf-8"))
        if event.get("body"):
            method, route = event["routeKey"].split(" ", 1)
            body = spec["paths"][route][method.lower()]["requestBody"]["content"]["application/json"]
            body["example"] = json.loads(event["body"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seckill-openapi", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=DOCUMENT, help="where the document goes (default %(default)s)")
    parser.add_argument(
        "--check", action="store_true", help="compare with the file instead of writing it; exit 1 if they differ"
    )
    args = parser.parse_args(argv)
    text = document()
    return write_or_check(
        args.out,
        text,
        check=args.check,
        stale=f"{args.out} is not what the code describes: run `make openapi` and commit it",
        current=f"{args.out} is current",
        written=f"wrote {args.out} ({len(json.loads(text)['paths'])} paths)",
    )


if __name__ == "__main__":
    sys.exit(main())

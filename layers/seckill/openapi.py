"""The HTTP API as its OpenAPI document describes it (docs/contract.md): the bodies
each route answers and takes, and the two ways a caller proves who it is.

Description, not validation: the handlers build their bodies with ``seckill.infra.results``
and check their input by hand (``seckill.ids``, ``seckill.vouchers``), which keeps
every refusal worded as the contract has it; the only thing Powertools does with
these types at run time is hand the list route its query parameters, as text. The
models are built when the document is, so a cold start pays next to nothing for
them, and the fuzz run (tests/e2e/test_fuzz.py) checks real answers against them.
``seckill-openapi`` writes the document from the routes of SeckillApiFunction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic.json_schema import models_json_schema

from seckill.holds import PaymentIn
from seckill.ids import ID_PATTERN
from seckill.vouchers import MAX_PAGE_SIZE, PAGE_SIZE, PAGE_SIZE_PATTERN, SeckillVoucherIn, VoucherIn

JSON = "application/json"
REF = "#/components/schemas/{model}"

# Ids in a path or query: what seckill.ids.parse_id accepts (anything else is a 400).
IdText = Annotated[
    str, WithJsonSchema({"type": "string", "pattern": ID_PATTERN, "description": "a positive 64-bit integer"})
]


def _joined(value: Any) -> Any:
    # API Gateway hands a repeated query parameter over as one value, its values joined by commas.
    return ",".join(value) if isinstance(value, list) else value


# The list's query parameters, as text (Powertools passes them to the handler, which checks them
# and names the bad one in a 400).
PageSize = Annotated[
    str | None,
    BeforeValidator(_joined),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": PAGE_SIZE_PATTERN,
            "description": f"1 to {MAX_PAGE_SIZE}; {PAGE_SIZE} if absent",
        }
    ),
]
IdQuery = Annotated[
    str | None,
    BeforeValidator(_joined),
    WithJsonSchema({"type": "string", "pattern": ID_PATTERN, "description": "the last id seen"}),
]

# The security schemes of template.yaml: its Lambda authorizer on user routes, AWS IAM on admin
# routes and on the payment service's.
USER, ADMIN = "userToken", "awsSigV4"
SECURITY_SCHEMES: dict[str, Any] = {
    USER: {
        "type": "apiKey",
        "in": "header",
        "name": "authorization",
        "description": "A login token (`Bearer ` optional), looked up by AuthorizerFunction in the Redis hash "
        "`login:token:<token>`; the function trusts only the user id the authorizer hands it.",
    },
    ADMIN: {
        "type": "apiKey",
        "in": "header",
        "name": "authorization",
        "description": "AWS IAM: a request signed with Signature Version 4 (service `execute-api`) by a "
        "principal allowed to invoke the route.",
        "x-amazon-apigateway-authtype": "awsSigv4",
    },
}


class _Doc(BaseModel):
    # Built only when a schema is asked for: these classes cost a cold start next to nothing.
    model_config = ConfigDict(alias_generator=to_camel, defer_build=True, extra="forbid")


class OrderStatus(_Doc):
    """An order: ``payBy`` once it is stored (CONFIRMED and after), ``paidAt`` once PAID,
    ``reason`` only when FAILED."""

    order_id: IdText
    voucher_id: int
    user_id: int
    status: Literal["PENDING", "CONFIRMED", "PAID", "EXPIRED", "CANCELLED", "FAILED"]
    reason: Literal["DUPLICATE_ORDER", "SOLD_OUT", "VOUCHER_NOT_FOUND", "NOT_QUEUED", "NOT_ADMITTED"] | None
    created_at: datetime | None
    pay_by: datetime | None
    paid_at: datetime | None


class ListedVoucher(_Doc):
    """A voucher on sale; a seckill one (``type`` 1) with its stock, sale window and hold (seconds an order
    stays payable), an ordinary one with nulls."""

    id: int
    shop_id: int
    title: str
    sub_title: str | None
    rules: str | None
    pay_value: int
    actual_value: int
    type: Literal[0, 1]
    status: Literal[1]
    stock: int | None
    begin_time: datetime | None
    end_time: datetime | None
    hold_seconds: int | None
    admission: Literal["race", "draw"] | None
    closes_at: datetime | None
    admit_rate: int | None = Field(description="A paced draw's most entrants newly admitted in a second; else null")


Ticket = Annotated[str, WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{17}$"})]


class Entry(_Doc):
    """A draw's entry: the pass to show (header ``x-seckill-pass``) on every press, the
    ticket, and whether it was entered after the draw closed."""

    pass_: Annotated[str, Field(alias="pass")]
    ticket: Ticket
    late: bool


class EntryStatus(_Doc):
    """An entrant's ticket and chance; ``ahead`` is an estimate of the entrants not yet
    admitted before this one."""

    ticket: Ticket
    late: bool
    admitted: bool
    ahead: int
    chance: Literal["waiting", "admitted", "over"]


class CursorMove(_Doc):
    at: datetime
    cursor: Ticket


class DrawRecord(_Doc):
    """A draw's public record: ``cursor`` is null before the draw closes, ``seed`` (hex) until
    the window is over or the sale stopped."""

    commitment: Annotated[str, WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{64}$"})]
    closes_at: datetime
    entrants: int
    late_entrants: int
    cursor: Ticket | None
    cursor_history: list[CursorMove]
    seed: Annotated[str | None, WithJsonSchema({"type": ["string", "null"], "pattern": "^[0-9a-f]{64}$"})]


class _Ok(_Doc):
    """hm-dianping's ``Result`` of a success."""

    success: Literal[True]
    error_msg: None
    code: None


class OrderAccepted(_Ok):
    data: IdText


class OrderStatusResult(_Ok):
    data: OrderStatus


class VoucherPage(_Ok):
    data: list[ListedVoucher]


class VoucherIdResult(_Ok):
    data: int


class EntryResult(_Ok):
    data: Entry


class EntryStatusResult(_Ok):
    data: EntryStatus


class DrawRecordResult(_Ok):
    data: DrawRecord


class Failure(_Doc):
    """hm-dianping's ``Result`` of a refusal: ``code`` says which, ``errorMsg`` says why in words."""

    success: Literal[False]
    data: None
    error_msg: str
    code: str


class GatewayError(BaseModel):
    """What API Gateway answers itself, before or instead of the function."""

    model_config = ConfigDict(defer_build=True, extra="forbid")
    message: str


SCHEMAS: tuple[type[BaseModel], ...] = (
    OrderAccepted,
    OrderStatusResult,
    VoucherPage,
    VoucherIdResult,
    EntryResult,
    EntryStatusResult,
    DrawRecordResult,
    Failure,
    GatewayError,
    VoucherIn,
    SeckillVoucherIn,
    PaymentIn,
)


def component_schemas() -> dict[str, Any]:
    """The ``components.schemas`` of the document: every model above, with what they nest."""
    _, schemas = models_json_schema([(model, "validation") for model in SCHEMAS], ref_template=REF)
    return dict(sorted(schemas["$defs"].items()))


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``requestBody`` (for ``openapi_extensions``): a JSON body of this model."""
    return {"requestBody": {"required": True, "content": {JSON: {"schema": _ref(model)}}}}


def answer(description: str, model: type[BaseModel], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A success: the ``Result`` model, and the headers it carries (name -> what it says)."""
    response: dict[str, Any] = {"description": description, "content": {JSON: {"schema": _ref(model)}}}
    if headers:
        response["headers"] = {
            name: {"description": text, "schema": {"type": "string"}} for name, text in headers.items()
        }
    return response


def _failure(*codes: str) -> dict[str, Any]:
    return {**_ref(Failure), "properties": {"code": {"enum": list(codes)}}}


def _gateway(message: str) -> dict[str, Any]:
    return {**_ref(GatewayError), "properties": {"message": {"const": message}}}


def _response(description: str, *schemas: dict[str, Any]) -> dict[str, Any]:
    schema = schemas[0] if len(schemas) == 1 else {"oneOf": list(schemas)}
    return {"description": description, "content": {JSON: {"schema": schema}}}


def refused(description: str, *codes: str) -> dict[str, Any]:
    """A refusal of the function with one of these codes."""
    return _response(description, _failure(*codes))


UNAVAILABLE = refused("Redis, MySQL or SQS is unavailable: try again (never a 500)", "TRY_AGAIN")


def user_route(responses: dict[int, dict[str, Any]], *, no_pass: bool = False) -> dict[str, Any]:
    """The OpenAPI arguments of a route behind the Lambda authorizer: its own answers, and API
    Gateway's; ``no_pass``: the press, whose draw refuses a press without a valid pass."""
    forbidden = [_gateway("Forbidden"), *([_failure("NO_PASS")] if no_pass else [])]
    return {
        "security": [{USER: []}],
        "responses": {
            **responses,
            401: _response(
                "No `authorization` header (API Gateway), or no user id from the authorizer (the function)",
                _gateway("Unauthorized"),
                _failure("UNAUTHORIZED"),
            ),
            403: _response(
                "The token is not a logged-in user's, or (with the edge) the request came around CloudFront,"
                " without its origin header (API Gateway)"
                + ("; on a draw, no valid `x-seckill-pass` for this voucher, user and token" if no_pass else ""),
                *forbidden,
            ),
            500: _response(
                "The authorizer failed (API Gateway); the function itself never answers 500",
                _gateway("Internal Server Error"),
            ),
            503: UNAVAILABLE,
        },
    }


def admin_route(responses: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI arguments of a route behind AWS IAM: its own answers, and the refusal of an unsigned request."""
    return {
        "security": [{ADMIN: []}],
        "responses": {
            **responses,
            403: _response(
                "Not signed by an allowed IAM principal (API Gateway), or no IAM context (the function);"
                " through the edge, which does not serve it, the edge's own `FORBIDDEN`",
                _gateway("Forbidden"),
                _failure("FORBIDDEN"),
            ),
            503: UNAVAILABLE,
        },
    }


def public_route(responses: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The OpenAPI arguments of a route anyone may call, through the edge when the stack has one."""
    return {
        "responses": {
            **responses,
            403: _response(
                "(With the edge) the request came around CloudFront, without its origin header: the function "
                "answers as API Gateway answers a user route's",
                _gateway("Forbidden"),
            ),
            503: UNAVAILABLE,
        }
    }

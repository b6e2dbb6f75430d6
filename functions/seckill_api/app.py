"""SeckillApiFunction: every HTTP route of the service (docs/contract.md).

Thin by design: Powertools wiring and module-level clients here, the rules in
the ``seckill`` package.

The press (POST /voucher-order/seckill/{voucherId}) skips the resolver and
returns refusals as values: why, and what that buys, in docs/architecture.md
("The fast path of a press").
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from seckill import holds, openapi, passes, vouchers
from seckill.draw import entries, moves
from seckill.edge import passkeys
from seckill.edge.state import StateQueue
from seckill.ids import parse_id
from seckill.infra import results, tracing, warmup
from seckill.infra.clients import redis_client, sqs_client
from seckill.infra.config import Settings
from seckill.infra.db import Database
from seckill.infra.errors import BadRequest, Forbidden, Refusal, SeckillError, TryAgain, Unauthorized
from seckill.infra.lazy import OnFirstUse
from seckill.infra.logcontext import LogContext
from seckill.infra.lua_scripts import Scripts
from seckill.infra.unreachable import unreachable
from seckill.messages import OrderQueue
from seckill.origin import AroundTheEdge, OriginCheck
from seckill.press import orders
from seckill.press.gate import Gate
from seckill.press.tally import Tally
from seckill.tokens import token_from_header, user_of

logger = Logger()
log_context = LogContext(logger, correlation_id=lambda event: event.get("requestContext", {}).get("requestId"))
# The SQL statements and SQS calls show as subsegments of a sampled invocation.
tracer = tracing.tracer(patch_modules=["pymysql", "botocore"])
metrics = Metrics(namespace="Seckill")
tally = Tally(metrics)
# Invocations that publish nothing (their counts wait in the tally) are normal, not a warning.
warnings.filterwarnings("ignore", "No application metrics to publish", UserWarning)
app = APIGatewayHttpResolver()

settings = Settings.from_env()
redis = redis_client(settings)
scripts = Scripts.register(redis)
gate = Gate(redis, scripts, settings.refusal_cache_seconds)
sqs = OnFirstUse(sqs_client)
queue = OrderQueue(sqs, settings.order_queue_url)
edge = StateQueue(sqs, settings.edge_state_queue_url, metrics)
clock = moves.ClockQueue(sqs, settings.draw_clock_queue_url)
db = Database.from_settings(settings)
origin = OriginCheck.from_env(os.environ)  # the public routes': the authorizer checks the user routes'
# The draw record's cache: the edge's where the stack has one (docs/draw.md, "The public record").
records = entries.Records(db, max_age=0 if origin.edge else entries.RECORD_MAX_AGE)
warmup.prepare(warmup.Connections(redis, db, [sqs]))

PRESS = "POST /voucher-order/seckill/{voucherId}"


def place(event: dict[str, Any]) -> int | Refusal:
    """The press's order id or refusal; a request without a valid user or voucher id, or
    a service that cannot answer, raises the error that answers it."""
    user_id = user_of(event)
    voucher_id = parse_id(event["pathParameters"]["voucherId"], "voucherId")
    headers = event.get("headers") or {}
    shown = headers.get(passes.PASS_HEADER)
    # The token only binds a pass: a press without one (every race's) does not parse it.
    token = token_from_header(headers.get("authorization")) if shown else None
    ticket = passes.press_ticket(shown, voucher_id, user_id, token, time.time())
    return orders.place_order(
        gate,
        redis,
        queue,
        db,
        voucher_id,
        user_id,
        status_ttl=settings.status_ttl_seconds,
        ticket=ticket,
        edge=edge,
        clock=clock,
    )


def press(event: dict[str, Any]) -> dict[str, Any]:
    """POST /voucher-order/seckill/{voucherId}, as the HTTP API integration answers it:
    202 with the order id, or the refusal (prebuilt: a sale repeats a handful of them)."""
    try:
        answer = place(event)
    except Exception as error:
        return results.http_api(error_response(error), event)
    if isinstance(answer, Refusal):
        count_refusal(answer.code)
        return results.refusal(answer.status, answer.code, answer.message)
    return results.http_api(accepted(answer), event)


def accepted(order_id: int) -> Response[str]:
    metrics.add_metric(name="OrdersAccepted", unit=MetricUnit.Count, value=1)
    return results.ok(str(order_id), status=202, headers={"Location": f"/voucher-order/{order_id}"})


@app.post(
    "/voucher-order/seckill/<voucherId>",
    operation_id="placeSeckillOrder",
    summary="Press the seckill button: the order id, or why not",
    description="On a draw voucher the press also shows the entrant's pass in the header `x-seckill-pass` "
    "(from the entry route): no valid pass is 403 `NO_PASS`, a ticket not below the cursor in effect 409 "
    "`NOT_ADMITTED`.",
    **openapi.user_route(
        {
            202: openapi.answer(
                "Accepted: the order is queued; it ends CONFIRMED or FAILED",
                openapi.OrderAccepted,
                {"Location": "the order's status route, /voucher-order/{orderId}"},
            ),
            400: openapi.refused("The voucher id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No such seckill voucher", "VOUCHER_NOT_FOUND"),
            409: openapi.refused(
                "Refused: sold out, one order per user, or outside the sale window; on a draw, a ticket "
                "not below the cursor in effect",
                "SOLD_OUT",
                "DUPLICATE_ORDER",
                "NOT_STARTED",
                "ENDED",
                "NOT_ADMITTED",
            ),
        },
        no_pass=True,
    ),
)
def press_route(voucherId: openapi.IdText) -> Response[str]:
    answer = place(app.current_event.raw_event)
    if isinstance(answer, Refusal):
        return refused(answer)
    return accepted(answer)


def require_iam(caller: str = "admin") -> None:
    """Admin and payment routes are IAM-authorized by API Gateway; refuse anything it did not sign off."""
    context = app.current_event.raw_event.get("requestContext", {}).get("authorizer") or {}
    if not context.get("iam"):
        raise Forbidden(f"{caller} credentials required")


def request_body() -> str | None:
    """The request body as text; a body that is not UTF-8 (or not base64 when flagged so) is the client's error."""
    try:
        return app.current_event.decoded_body
    except ValueError:  # UnicodeDecodeError, binascii.Error
        raise BadRequest("body: must be UTF-8 JSON") from None


@app.get(
    "/voucher-order/<orderId>",
    operation_id="getOrderStatus",
    summary="An order's status: PENDING, CONFIRMED (payable until payBy), PAID, EXPIRED, CANCELLED or FAILED "
    "(with its reason)",
    **openapi.user_route(
        {
            200: openapi.answer("The order, as its owner sees it", openapi.OrderStatusResult),
            400: openapi.refused("The order id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No such order, or another user's", "ORDER_NOT_FOUND"),
        }
    ),
)
def order_status(orderId: openapi.IdText) -> Response[str]:
    user_id = user_of(app.current_event.raw_event)
    order_id = parse_id(orderId, "orderId")
    return results.ok(orders.order_status(db, redis, order_id, user_id))


@app.get(
    "/voucher-order/seckill/<voucherId>",
    operation_id="getMyOrder",
    summary="The caller's own order on this voucher, as the status route shows it (PENDING from its press's 202): "
    "how a buyer whose answer was lost learns its order id; 503 also while that press is still being placed, "
    "and for 2 minutes after Redis lost the voucher's state (an order accepted before may be on its way)",
    **openapi.user_route(
        {
            200: openapi.answer("The caller's order", openapi.OrderStatusResult),
            400: openapi.refused("The voucher id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused(
                "The caller has no order on it, or no such seckill voucher", "ORDER_NOT_FOUND", "VOUCHER_NOT_FOUND"
            ),
        }
    ),
)
def my_order(voucherId: openapi.IdText) -> Response[str]:
    user_id = user_of(app.current_event.raw_event)
    return results.ok(orders.my_order(db, redis, parse_id(voucherId, "voucherId"), user_id))


def answered(answer: dict[str, Any] | Refusal) -> Response[str]:
    """A hold's new fate, or the refusal that says why not."""
    return refused(answer) if isinstance(answer, Refusal) else results.ok(answer)


@app.post(
    "/voucher-order/<orderId>/payment",
    operation_id="payOrder",
    summary="Pay a confirmed order before its payBy (the payment service, by AWS IAM)",
    openapi_extensions=openapi.request_body(holds.PaymentIn),
    **openapi.admin_route(
        {
            200: openapi.answer(
                "Paid now, or paid already by this very paymentId (nothing changes): the order, PAID",
                openapi.OrderStatusResult,
            ),
            400: openapi.refused(
                "The order id is not a positive 64-bit integer, or paymentId is missing or invalid", "BAD_REQUEST"
            ),
            404: openapi.refused("No such order", "ORDER_NOT_FOUND"),
            409: openapi.refused(
                "Not payable: past its payBy (it expires now if no expiry has yet), cancelled, failed, "
                "not decided yet, paid by another paymentId, or this paymentId paid another order",
                "EXPIRED",
                "CANCELLED",
                "FAILED",
                "PENDING",
                "ALREADY_PAID",
                "PAYMENT_USED",
            ),
        }
    ),
)
def pay_order(orderId: openapi.IdText) -> Response[str]:
    require_iam("payment service")
    order_id = parse_id(orderId, "orderId")
    payment = vouchers.parse_model(request_body(), holds.PaymentIn)
    answer = holds.pay(db, redis, scripts, order_id, payment.payment_id, edge=edge)
    if not isinstance(answer, Refusal):
        logger.info("order paid", extra={"orderId": str(order_id), "paymentId": payment.payment_id})
    return answered(answer)


@app.post(
    "/voucher-order/<orderId>/cancel",
    operation_id="cancelOrder",
    summary="Give up a confirmed order before paying: its unit goes back on sale",
    **openapi.user_route(
        {
            200: openapi.answer(
                "Cancelled now, or already (nothing changes): the order, CANCELLED", openapi.OrderStatusResult
            ),
            400: openapi.refused("The order id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No such order, or another user's", "ORDER_NOT_FOUND"),
            409: openapi.refused(
                "Not cancellable: paid, past its payBy (it expires now if no expiry has yet), failed, "
                "or not decided yet",
                "PAID",
                "EXPIRED",
                "FAILED",
                "PENDING",
            ),
        }
    ),
)
def cancel_order(orderId: openapi.IdText) -> Response[str]:
    user_id = user_of(app.current_event.raw_event)
    order_id = parse_id(orderId, "orderId")
    return answered(holds.cancel(db, redis, scripts, order_id, user_id, edge=edge))


@app.get(
    "/voucher/list/<shopId>",
    operation_id="listVouchers",
    summary="A page of a shop's vouchers on sale",
    description=f"Paged by id: `limit` (default {vouchers.PAGE_SIZE}, at most {vouchers.MAX_PAGE_SIZE}) and `after` "
    '(the last id seen); a `Link: <...>; rel="next"` header names the next page while there is one.',
    # Powertools hands the query parameters over (as text: the checks below name them in a 400).
    enable_validation=True,
    **openapi.public_route(
        {
            200: openapi.answer(
                "The page, by id", openapi.VoucherPage, {"Link": '`<url>; rel="next"` while more vouchers follow'}
            ),
            400: openapi.refused("A parameter is malformed; the message names it", "BAD_REQUEST"),
        }
    ),
)
def list_vouchers(
    shopId: openapi.IdText, limit: openapi.PageSize = None, after: openapi.IdQuery = None
) -> Response[str]:
    origin.require(app.current_event.headers)
    shop_id = parse_id(shopId, "shopId")
    page_limit = vouchers.page_size(limit)
    page = vouchers.list_vouchers(db, shop_id, limit=page_limit, after=0 if after is None else parse_id(after, "after"))
    return results.ok(page.vouchers, headers=vouchers.page_headers(shop_id, page_limit, page))


@app.post(
    "/voucher-order/seckill/<voucherId>/entry",
    operation_id="enterDraw",
    summary="Enter a draw sale: the ticket, and the pass every press shows",
    **openapi.user_route(
        {
            200: openapi.answer(
                "Entered (now, or before: the same ticket; the pass issued afresh)", openapi.EntryResult
            ),
            400: openapi.refused("The voucher id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No such seckill voucher", "VOUCHER_NOT_FOUND"),
            409: openapi.refused(
                "The window is over or the sale stopped, or the sale is a race", "ENDED", "NOT_A_DRAW"
            ),
        }
    ),
)
def enter_draw(voucherId: openapi.IdText) -> Response[str]:
    event = app.current_event.raw_event
    user_id = user_of(event)
    voucher_id = parse_id(voucherId, "voucherId")
    token = token_from_header((event.get("headers") or {}).get("authorization"))
    if token is None:
        raise Unauthorized("login required")
    return results.ok(entries.enter_with_pass(db, passkeys.signing_ring(), voucher_id, user_id, token))


@app.get(
    "/voucher-order/seckill/<voucherId>/entry",
    operation_id="getEntry",
    summary="A draw entrant's ticket and chance: waiting, admitted or over",
    **openapi.user_route(
        {
            200: openapi.answer("The entry", openapi.EntryStatusResult),
            400: openapi.refused("The voucher id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No entry of this user, or no such voucher", "ENTRY_NOT_FOUND", "VOUCHER_NOT_FOUND"),
        }
    ),
)
def get_entry(voucherId: openapi.IdText) -> Response[str]:
    user_id = user_of(app.current_event.raw_event)
    voucher_id = parse_id(voucherId, "voucherId")
    return results.ok(entries.look_up(db, redis, voucher_id, user_id))


@app.get(
    "/voucher/seckill/<voucherId>/draw",
    operation_id="getDraw",
    summary="A draw's public record: commitment, close, entrants, the cursor and its moves, the seed once over",
    **openapi.public_route(
        {
            200: openapi.answer("The record", openapi.DrawRecordResult),
            400: openapi.refused("The voucher id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No such seckill voucher, or not a draw", "VOUCHER_NOT_FOUND"),
        }
    ),
)
def get_draw(voucherId: openapi.IdText) -> Response[str]:
    origin.require(app.current_event.headers)
    return results.ok(records.get(parse_id(voucherId, "voucherId")))


@app.post(
    "/voucher/seckill",
    operation_id="createSeckillVoucher",
    summary="Put a seckill voucher on sale (stock and sale window)",
    openapi_extensions=openapi.request_body(vouchers.SeckillVoucherIn),
    **openapi.admin_route(
        {
            201: openapi.answer("Created and on sale at its window; `data` is its id", openapi.VoucherIdResult),
            400: openapi.refused(
                "A field is missing or invalid (also: a window already ended, times outside the years 1-9999 "
                "in UTC); the message names it",
                "BAD_REQUEST",
            ),
        }
    ),
)
def add_seckill_voucher() -> Response[str]:
    require_iam()
    voucher = vouchers.parse_voucher(request_body(), vouchers.SeckillVoucherIn, settings.timezone)
    voucher_id = vouchers.create_seckill_voucher(db, redis, voucher, functools.partial(moves.start, clock))
    # Its window, for the edge to refuse presses before it opens; a creation whose
    # preload is still provisional is not on sale, and the reconciler's sweep sends it.
    edge.notice(scripts, voucher_id)
    logger.info("seckill voucher created", extra={"voucherId": voucher_id})
    return results.ok(voucher_id, status=201)


@app.post(
    "/voucher",
    operation_id="createVoucher",
    summary="Create an ordinary voucher",
    openapi_extensions=openapi.request_body(vouchers.VoucherIn),
    **openapi.admin_route(
        {
            201: openapi.answer("Created; `data` is its id", openapi.VoucherIdResult),
            400: openapi.refused("A field is missing or invalid; the message names it", "BAD_REQUEST"),
        }
    ),
)
def add_voucher() -> Response[str]:
    require_iam()
    voucher = vouchers.parse_voucher(request_body(), vouchers.VoucherIn, settings.timezone)
    return results.ok(vouchers.create_voucher(db, voucher), status=201)


@app.post(
    "/voucher/seckill/<voucherId>/stop",
    operation_id="stopSeckillVoucher",
    summary="Withdraw a seckill voucher: every later press answers 409 ENDED",
    **openapi.admin_route(
        {
            200: openapi.answer("Withdrawn (again, if it was); `data` is its id", openapi.VoucherIdResult),
            400: openapi.refused("The voucher id is not a positive 64-bit integer", "BAD_REQUEST"),
            404: openapi.refused("No such seckill voucher", "VOUCHER_NOT_FOUND"),
        }
    ),
)
def stop_seckill_voucher(voucherId: openapi.IdText) -> Response[str]:
    require_iam()
    voucher_id = parse_id(voucherId, "voucherId")
    vouchers.stop_seckill_voucher(db, redis, voucher_id)
    records.forget(voucher_id)
    edge.notice(scripts, voucher_id)
    logger.info("seckill voucher stopped", extra={"voucherId": voucher_id})
    return results.ok(voucher_id)


@app.exception_handler(Exception)  # type: ignore[untyped-decorator]  # Powertools leaves it unannotated
def error_response(error: Exception) -> Response[str]:
    """Every error's answer, for the press and the resolver's routes alike."""
    if isinstance(error, TryAgain):
        logger.warning("answered 503 TRY_AGAIN", extra={"reason": error.refusal.message}, exc_info=error.__cause__)
        metrics.add_metric(name="TryAgain", unit=MetricUnit.Count, value=1)
        return results.fail(error.refusal.status, error.refusal.code, error.refusal.message)
    if isinstance(error, SeckillError):
        return refused(error.refusal)
    if isinstance(error, AroundTheEdge):
        metrics.add_metric(name="OriginRefused", unit=MetricUnit.Count, value=1)
        return results.gateway(403, "Forbidden")
    if unreachable(error):
        # A dependency that cannot be reached is the client's cue to try again; an error
        # MySQL reports about the statement itself stays a 500.
        logger.warning("dependency unavailable", exc_info=error)
        metrics.add_metric(name="DependencyUnavailable", unit=MetricUnit.Count, value=1)
        return results.fail(503, "TRY_AGAIN", "the service is briefly unavailable, please try again")
    # Logged whole for us, never shown to the client.
    logger.error("unhandled error", exc_info=error)
    return results.fail(500, "INTERNAL_ERROR", "internal error")


def refused(refusal: Refusal) -> Response[str]:
    """A refusal's answer, returned by the gate or raised in a SeckillError: summed in the tally."""
    count_refusal(refusal.code)
    return results.fail(refusal.status, refusal.code, refusal.message)


def count_refusal(code: str) -> None:
    tally.count(f"Refused{code}")
    if tracing.sampled(tracer):
        tracer.put_annotation(key="refusal", value=code)


@app.not_found
def no_route(_: NotFoundError) -> Response[str]:
    return results.fail(404, "NOT_FOUND", "no such route")


def respond(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # The press on its own path, not the resolver's: a refusal from the warm sold-out cache
    # took 4.4 µs against 71 µs through it (benchmarks/README.md, section 3's `resolver`).
    if event.get("routeKey") == PRESS:
        return press(event)
    resolved: dict[str, Any] = app.resolve(event, context)
    return resolved


@log_context.inject
@tally.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if not tracing.sampled(tracer):
        return respond(event, context)
    answer: dict[str, Any] = traced_handler(event, context)  # the tracer's decorator is untyped
    return answer


@tracer.capture_lambda_handler(capture_response=False)
def traced_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    response = respond(event, context)
    tracer.put_annotation(key="route", value=event.get("routeKey", ""))
    tracer.put_annotation(key="status", value=response["statusCode"])
    return response

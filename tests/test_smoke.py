from tests.conftest import body, load_event


def test_seckill_event_through_the_handler(handlers, make_voucher, context, order_queue, sqs):
    voucher_id = make_voucher(stock=1)
    event = load_event("seckill_api_seckill.json", pathParameters={"voucherId": str(voucher_id)})
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/voucher-order/seckill/{voucher_id}"
    response = handlers["SeckillApiFunction"](event, context)
    assert response["statusCode"] == 202, response
    assert isinstance(body(response)["data"], str)

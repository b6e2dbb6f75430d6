import cf from 'cloudfront';

// Placeholder until the real function lands: answers SOLD_OUT for a sold-out
// voucher inside its window, forwards everything else.
const PRESS = /^\/voucher-order\/seckill\/([1-9][0-9]{0,18})$/;
const SKEW_MS = 1000;

async function handler(event) {
  const request = event.request;
  const found = request.method === 'POST' && PRESS.exec(request.uri);
  if (!found || !request.headers.authorization) return request;
  let state;
  try {
    state = JSON.parse(await cf.kvs().get(found[1]));
  } catch (e) {
    return request;
  }
  const now = Date.now();
  if (state.soldOut && !state.stopped && now >= state.begin + SKEW_MS && now < state.end - SKEW_MS) {
    return {
      statusCode: 409,
      statusDescription: 'Conflict',
      headers: { 'content-type': { value: 'application/json' }, 'x-seckill-edge': { value: '1' } },
      body: '{"success": false, "data": null, "errorMsg": "sold out", "code": "SOLD_OUT"}',
    };
  }
  return request;
}

import cf from 'cloudfront';

// Answers at the edge a seckill press whose refusal is already decided (docs/edge.md),
// from the sale's state the gate publishes to the KeyValueStore: key = the voucher id,
// value = {"v":version,"begin":ms,"end":ms,"soldOut":bool,"stopped":bool}. Whenever it
// is unsure it returns the request unchanged, so the API decides as without an edge.
const kvs = cf.kvs();

// The clock difference between this edge and Redis's TIME that the rules tolerate:
// within SKEW_MS of an opening or a close the gate alone decides.
const SKEW_MS = 1000;
const PRESS = /^\/voucher-order\/seckill\/([1-9][0-9]{0,18})$/;
const ID_MAX = '9223372036854775807';

// Byte for byte the Lambda's bodies: Python's json.dumps of the Result.
const BODIES = {
  NOT_STARTED: '{"success": false, "data": null, "errorMsg": "the sale has not started", "code": "NOT_STARTED"}',
  ENDED: '{"success": false, "data": null, "errorMsg": "the sale has ended", "code": "ENDED"}',
  SOLD_OUT: '{"success": false, "data": null, "errorMsg": "sold out", "code": "SOLD_OUT"}',
};

async function handler(event) {
  const request = event.request;
  const token = request.headers.authorization;
  if (request.method !== 'POST' || !token || !token.value) {
    // No token: API Gateway's 401 stays the answer.
    return request;
  }
  const match = PRESS.exec(request.uri);
  if (!match || !positive64(match[1])) {
    return request;
  }
  let state;
  try {
    state = JSON.parse(await kvs.get(match[1], { format: 'string' }));
  } catch (e) {
    // A voucher the store has no key for (get throws), or a store that failed.
    return request;
  }
  if (!wellFormed(state)) {
    return request;
  }
  const code = refusal(state, Date.now());
  return code ? refuse(code) : request;
}

// A 19-digit id may still exceed 2^63 - 1; compared as text (no BigInt at the edge).
function positive64(id) {
  return id.length < ID_MAX.length || id <= ID_MAX;
}

function wellFormed(state) {
  return (
    state !== null &&
    typeof state === 'object' &&
    count(state.v) &&
    count(state.begin) &&
    count(state.end) &&
    typeof state.soldOut === 'boolean' &&
    typeof state.stopped === 'boolean'
  );
}

function count(value) {
  return typeof value === 'number' && value >= 0 && value % 1 === 0;
}

// lua/gate.lua's precedence: NOT_STARTED, then ENDED, then SOLD_OUT; null = forward.
function refusal(state, now) {
  if (now < state.begin - SKEW_MS) {
    return 'NOT_STARTED';
  }
  if (now < state.begin + SKEW_MS) {
    return null;
  }
  if (state.stopped || now > state.end + SKEW_MS) {
    return 'ENDED';
  }
  if (now >= state.end - SKEW_MS) {
    return null;
  }
  return state.soldOut ? 'SOLD_OUT' : null;
}

function refuse(code) {
  return {
    statusCode: 409,
    statusDescription: 'Conflict',
    headers: {
      'content-type': { value: 'application/json' },
      'x-seckill-edge': { value: '1' },
    },
    body: { encoding: 'text', data: BODIES[code] },
  };
}

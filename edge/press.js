import cf from 'cloudfront';
import crypto from 'crypto';

// Answers at the edge a seckill press whose refusal is already decided (docs/edge.md),
// from the sale's state the gate publishes to the KeyValueStore: key = the voucher id,
// value = {"v":version,"begin":ms,"end":ms,"soldOut":bool,"stopped":bool}, and for a draw
// also "draw":true, "close":ms, "decided":ms (every move taking effect before it is in
// "moves") and "moves":[[atMs,"cursor"],...]; key "pass-keys" = {"keys":{kid:hex}}.
// Whenever its store leaves it unsure it returns the request unchanged, so the API decides
// as without an edge.
const kvs = cf.kvs();

// The clock difference between this edge and Redis's TIME that the rules tolerate:
// within SKEW_MS of an opening, a close, a pass's expiry or a cursor's move the gate
// alone decides.
const SKEW_MS = 1000;
const PRESS = /^\/voucher-order\/seckill\/([1-9][0-9]{0,18})$/;
const ID_MAX = '9223372036854775807';
// <kid>.<voucherId>.<userId>.<th>.<ticket>.<exp>.<sig> (docs/edge.md, "A draw").
const PASS = /^([a-z0-9]{1,16})\.([1-9][0-9]{0,18})\.([1-9][0-9]{0,18})\.([0-9a-f]{32})\.([0-9a-f]{17})\.([1-9][0-9]{0,11})\.([A-Za-z0-9_-]{43})$/;
const CURSOR = /^[0-9a-f]{17}$/;
const KEY = /^[0-9a-f]{64}$/;
const KID = /^[a-z0-9]{1,16}$/;
const MOVES_MAX = 16;

// Byte for byte the Lambda's bodies (Python's json.dumps of the Result), and API
// Gateway's own 401 when the token header is missing.
const BODIES = {
  NOT_STARTED: '{"success": false, "data": null, "errorMsg": "the sale has not started", "code": "NOT_STARTED"}',
  ENDED: '{"success": false, "data": null, "errorMsg": "the sale has ended", "code": "ENDED"}',
  SOLD_OUT: '{"success": false, "data": null, "errorMsg": "sold out", "code": "SOLD_OUT"}',
  NO_PASS: '{"success": false, "data": null, "errorMsg": "no valid pass for this voucher", "code": "NO_PASS"}',
  NOT_ADMITTED: '{"success": false, "data": null, "errorMsg": "not admitted yet", "code": "NOT_ADMITTED"}',
  UNAUTHORIZED: '{"message":"Unauthorized"}',
};
const STATUS = {
  NO_PASS: [403, 'Forbidden'],
  UNAUTHORIZED: [401, 'Unauthorized'],
};

async function handler(event) {
  const request = event.request;
  if (request.method !== 'POST') {
    return request;
  }
  const match = PRESS.exec(request.uri);
  if (!match || !positive64(match[1])) {
    return request;
  }
  const token = header(request, 'authorization');
  const state = await read(match[1]);
  if (!state) {
    return request;
  }
  const now = Date.now();
  let code;
  if (state.draw) {
    code = await drawRefusal(state, match[1], token, header(request, 'x-seckill-pass'), now);
  } else {
    // No token: API Gateway's 401 stays the answer.
    code = token ? refusal(state, null, now) : null;
  }
  return code ? refuse(code) : request;
}

// A header's text as API Gateway passes it on: repeated values joined by commas; '' if absent.
function header(request, name) {
  const entry = request.headers[name];
  if (!entry) {
    return '';
  }
  return entry.multiValue ? entry.multiValue.map((item) => item.value).join(',') : entry.value || '';
}

// A 19-digit id may still exceed 2^63 - 1; compared as text (no BigInt at the edge).
function positive64(id) {
  return id.length < ID_MAX.length || id <= ID_MAX;
}

// The voucher's entry, or null when the store has none (get throws) or it is no state.
async function read(key) {
  try {
    const state = JSON.parse(await kvs.get(key, { format: 'string' }));
    return wellFormed(state) ? state : null;
  } catch (e) {
    return null;
  }
}

function wellFormed(state) {
  if (
    state === null ||
    typeof state !== 'object' ||
    !count(state.v) ||
    !count(state.begin) ||
    !count(state.end) ||
    typeof state.soldOut !== 'boolean' ||
    typeof state.stopped !== 'boolean'
  ) {
    return false;
  }
  const moves = state.moves;
  if (state.draw === undefined) {
    return moves === undefined && state.close === undefined && state.decided === undefined;
  }
  if (
    state.draw !== true ||
    !count(state.close) ||
    !count(state.decided) ||
    !Array.isArray(moves) ||
    moves.length > MOVES_MAX
  ) {
    return false;
  }
  for (let i = 0; i < moves.length; i++) {
    const move = moves[i];
    if (
      !Array.isArray(move) ||
      move.length !== 2 ||
      !count(move[0]) ||
      typeof move[1] !== 'string' ||
      !CURSOR.test(move[1]) ||
      (i > 0 && (move[0] <= moves[i - 1][0] || move[1] < moves[i - 1][1]))
    ) {
      return false;
    }
  }
  return true;
}

function count(value) {
  return typeof value === 'number' && value >= 0 && value % 1 === 0;
}

// The draw's order: 401, NO_PASS, then the window and the cursor (refusal); null = forward.
// Nothing a pass says is believed before its signature is verified.
async function drawRefusal(state, voucherId, authorization, shown, now) {
  if (!authorization) {
    return 'UNAUTHORIZED';
  }
  // Surrounding whitespace is not part of a field's value (RFC 9110, 5.5).
  const text = shown.replace(/^[ \t]+|[ \t]+$/g, '');
  const pass = PASS.exec(text);
  if (!pass) {
    return 'NO_PASS';
  }
  const keys = await passKeys();
  if (!keys) {
    // No key list to verify it with: the store leaves the edge unsure.
    return null;
  }
  const key = Object.prototype.hasOwnProperty.call(keys, pass[1]) ? keys[pass[1]] : null;
  if (!key || !sameText(pass[7], sign(key, text.slice(0, text.length - 44)))) {
    return 'NO_PASS';
  }
  if (
    pass[2] !== voucherId ||
    !positive64(pass[3]) ||
    pass[4] !== tokenHash(authorization) ||
    now > pass[6] * 1000 + SKEW_MS
  ) {
    return 'NO_PASS';
  }
  // An expiry too close to call.
  return now >= pass[6] * 1000 - SKEW_MS ? null : refusal(state, pass[5], now);
}

// The token as the authorizer reads it (Bearer removed), hashed as a pass binds it.
function tokenHash(authorization) {
  let token = authorization.trim();
  if (token.slice(0, 7).toLowerCase() === 'bearer ') {
    token = token.slice(7).trim();
  }
  return crypto.createHash('sha256').update(token).digest('hex').slice(0, 32);
}

// The ring's verifying keys (kid -> 64 hex), or null when the store has no usable list.
async function passKeys() {
  try {
    const ring = JSON.parse(await kvs.get('pass-keys', { format: 'string' }));
    const keys = ring.keys;
    if (keys === null || typeof keys !== 'object' || Array.isArray(keys)) {
      return null;
    }
    for (const kid in keys) {
      if (!KID.test(kid) || typeof keys[kid] !== 'string' || !KEY.test(keys[kid])) {
        return null;
      }
    }
    return keys;
  } catch (e) {
    return null;
  }
}

function sign(key, text) {
  return crypto.createHmac('sha256', Buffer.from(key, 'hex')).update(text).digest('base64url');
}

// Compared in time independent of where they differ.
function sameText(a, b) {
  let diff = a.length ^ b.length;
  for (let i = 0; i < a.length && i < b.length; i++) {
    diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  }
  return diff === 0;
}

// lua/gate.lua's precedence: NOT_STARTED, ENDED, SOLD_OUT for a race; for a draw (a
// ticket) ENDED, NOT_ADMITTED, NOT_STARTED, SOLD_OUT. null = forward.
function refusal(state, ticket, now) {
  if (ticket === null && now < state.begin + SKEW_MS) {
    return now < state.begin - SKEW_MS ? 'NOT_STARTED' : null;
  }
  if (state.stopped || now > state.end + SKEW_MS) {
    return 'ENDED';
  }
  if (now >= state.end - SKEW_MS) {
    return null;
  }
  if (ticket !== null) {
    const admitted = admittedAt(state, ticket, now);
    if (admitted === undefined) {
      return null;
    }
    if (!admitted) {
      return 'NOT_ADMITTED';
    }
  }
  if (now < state.begin - SKEW_MS) {
    return 'NOT_STARTED';
  }
  if (now < state.begin + SKEW_MS) {
    return null;
  }
  return state.soldOut ? 'SOLD_OUT' : null;
}

// Whether the gate admits the ticket at every moment within SKEW_MS of now by its clock
// (true), at none (false), or undefined. Before the close nobody is refused NOT_ADMITTED:
// the gate answers NOT_STARTED, as to an admitted ticket. After it the cursor in effect
// (the move with the largest at <= the gate's now; none before the first: nobody
// admitted) decides. The cursor never moves back, so a ticket below one already in
// effect is admitted whichever move comes; a refusal needs every move up to now + SKEW_MS,
// which the entry holds only while that is before `decided`.
function admittedAt(state, ticket, now) {
  if (now + SKEW_MS < state.close) {
    return true;
  }
  let before = null; // the cursor in effect at the earliest of those moments
  let latest = null; // and at the latest
  for (let i = 0; i < state.moves.length; i++) {
    const move = state.moves[i];
    if (move[0] < now - SKEW_MS || move[0] <= state.close) {
      before = move[1];
    }
    if (move[0] <= now + SKEW_MS) {
      latest = move[1];
    }
  }
  if (before !== null && ticket < before) {
    return true;
  }
  if (now + SKEW_MS >= state.decided || now - SKEW_MS <= state.close) {
    return undefined;
  }
  // No move in effect yet refuses, unless older moves than the entry's first may be.
  if (latest === null) {
    return state.moves.length === 0 ? false : undefined;
  }
  return ticket < latest ? undefined : false;
}

function refuse(code) {
  const status = STATUS[code] || [409, 'Conflict'];
  return {
    statusCode: status[0],
    statusDescription: status[1],
    headers: {
      'content-type': { value: 'application/json' },
      'x-seckill-edge': { value: '1' },
    },
    body: { encoding: 'text', data: BODIES[code] },
  };
}

// edge/press.js loaded as CloudFront Functions runs it, over a Map-backed key value
// store and a clock the test sets.
import { createHash, createHmac } from 'node:crypto';
import { fileURLToPath } from 'node:url';

import { loadFunction, mapStore } from '../../../local/seckill_local/edge/cloudfront.mjs';

export const PRESS_JS = fileURLToPath(new URL('../../../edge/press.js', import.meta.url));
export const NOW = Date.UTC(2026, 11, 1, 12, 0, 0);

// The function with `entries` (voucher id -> value) in its store and the clock at NOW;
// `failing` makes every store call throw, as a store the edge cannot read.
export function edge({ entries = {}, failing = false } = {}) {
  const store = mapStore(new Map(Object.entries(entries)));
  if (failing) {
    store.get = store.exists = async () => {
      throw new Error('the key value store is unavailable');
    };
  }
  const clock = { ms: NOW };
  const handler = loadFunction(PRESS_JS, store, { now: () => clock.ms });
  return { handler, store, clock };
}

// The compact JSON the publisher writes for one voucher (fields may be overridden).
export function state(fields = {}) {
  return JSON.stringify({ v: 1, begin: NOW - 60_000, end: NOW + 60_000, soldOut: false, stopped: false, ...fields });
}

// A draw voucher's entry: the state plus "draw", its close (two minutes ago), how far its
// moves are decided (until the window's end, a minute ahead) and its moves ([atMs, cursor],
// ascending).
export function drawState(fields = {}) {
  return state({ draw: true, close: NOW - 120_000, decided: NOW + 60_000, moves: [], ...fields });
}

// The key ring the service signs passes with, and the store's `pass-keys` value for it.
export const KEYS = { k1: 'a1'.repeat(32), k2: 'b2'.repeat(32) };
export function passKeys(keys = KEYS) {
  return JSON.stringify({ keys });
}

// A pass as the service issues it (docs/edge.md, "A draw"): bound to the voucher, the user, the
// token's hash and the ticket, valid until `exp` (epoch s), signed with `kid`'s key.
export function makePass({
  kid = 'k1',
  key = KEYS[kid],
  voucher = 42,
  user = 7,
  token = 'token-of-user-7',
  ticket = '0' + 'c'.repeat(16),
  exp = Math.floor(NOW / 1000) + 3600,
} = {}) {
  const th = createHash('sha256').update(token).digest('hex').slice(0, 32);
  const text = `${kid}.${voucher}.${user}.${th}.${ticket}.${exp}`;
  const sig = createHmac('sha256', Buffer.from(key, 'hex')).update(text).digest('base64url');
  return `${text}.${sig}`;
}

// A viewer-request event as CloudFront passes it (header names in lowercase).
export function request({
  method = 'POST',
  uri = '/voucher-order/seckill/42',
  token = 'Bearer t',
  pass = null,
} = {}) {
  const headers = { host: { value: 'd111111abcdef8.cloudfront.net' } };
  if (token !== null) {
    headers.authorization = { value: token };
  }
  if (pass !== null) {
    headers['x-seckill-pass'] = { value: pass };
  }
  return {
    version: '1.0',
    context: { eventType: 'viewer-request' },
    viewer: { ip: '192.0.2.1' },
    request: { method, uri, querystring: {}, headers, cookies: {} },
  };
}

// edge/press.js loaded as CloudFront Functions runs it, over a Map-backed key value
// store and a clock the test sets.
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

// A viewer-request event as CloudFront passes it (header names in lowercase).
export function request({ method = 'POST', uri = '/voucher-order/seckill/42', token = 'Bearer t' } = {}) {
  const headers = { host: { value: 'd111111abcdef8.cloudfront.net' } };
  if (token !== null) {
    headers.authorization = { value: token };
  }
  return {
    version: '1.0',
    context: { eventType: 'viewer-request' },
    viewer: { ip: '192.0.2.1' },
    request: { method, uri, querystring: {}, headers, cookies: {} },
  };
}

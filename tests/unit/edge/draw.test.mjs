// edge/press.js on a draw voucher: 401, NO_PASS and NOT_ADMITTED answered at the edge in
// the function's order, every other answer left to the API (docs/edge.md, "A draw").
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { KEYS, NOW, drawState, edge, makePass, passKeys, request } from './harness.mjs';

const SKEW = 1000;
const TOKEN = 'token-of-user-7';
const MESSAGES = {
  NOT_STARTED: 'the sale has not started',
  ENDED: 'the sale has ended',
  SOLD_OUT: 'sold out',
  NO_PASS: 'no valid pass for this voucher',
  NOT_ADMITTED: 'not admitted yet',
};
const STATUS = { NO_PASS: [403, 'Forbidden'] };
const TICKET = '0' + 'c'.repeat(16);
// Tickets just below, at and above TICKET.
const BELOW = '0' + 'c'.repeat(15) + 'b';
const ABOVE = '0' + 'c'.repeat(15) + 'd';

function refusal(code) {
  const [statusCode, statusDescription] = STATUS[code] ?? [409, 'Conflict'];
  return {
    statusCode,
    statusDescription,
    headers: { 'content-type': { value: 'application/json' }, 'x-seckill-edge': { value: '1' } },
    body: {
      encoding: 'text',
      data: `{"success": false, "data": null, "errorMsg": "${MESSAGES[code]}", "code": "${code}"}`,
    },
  };
}

const UNAUTHORIZED = {
  statusCode: 401,
  statusDescription: 'Unauthorized',
  headers: { 'content-type': { value: 'application/json' }, 'x-seckill-edge': { value: '1' } },
  body: { encoding: 'text', data: '{"message":"Unauthorized"}' },
};

// The answer to a press on draw voucher 42 whose entry is drawState(fields), with the
// ring's keys in the store unless `keys` says otherwise (null: no `pass-keys` at all).
async function press(fields = {}, { keys = passKeys(), at = NOW, ...options } = {}) {
  const entries = { 42: drawState(fields) };
  if (keys !== null) {
    entries['pass-keys'] = keys;
  }
  const { handler, clock } = edge({ entries });
  clock.ms = at;
  const event = request({ token: `Bearer ${TOKEN}`, pass: makePass(), ...options });
  const answer = await handler(event);
  return { answer, event };
}

async function assertRefused(code, fields, options) {
  const { answer } = await press(fields, options);
  assert.deepEqual(answer, refusal(code));
}

async function assertForwarded(fields, options) {
  const { answer, event } = await press(fields, options);
  assert.equal(answer, event.request, 'the request itself goes on to the API');
}

// Moves that admitted every ticket below `cursor` 10 s ago.
const CLOSED_AT = NOW - 10_000;
function admittedBelow(cursor) {
  return { moves: [[CLOSED_AT, cursor]] };
}

describe('a press without a token', () => {
  it("gets API Gateway's own 401, whatever else it sends", async () => {
    for (const token of [null, '']) {
      assert.deepEqual((await press({}, { token })).answer, UNAUTHORIZED);
      assert.deepEqual((await press({}, { token, pass: null })).answer, UNAUTHORIZED);
      assert.deepEqual((await press({}, { token, keys: null })).answer, UNAUTHORIZED);
      assert.deepEqual((await press({ stopped: true }, { token })).answer, UNAUTHORIZED);
    }
  });
});

describe('the pass', () => {
  it('lets a valid pass of an admitted ticket through to the sale (open, stock left: forwarded)', async () => {
    await assertForwarded(admittedBelow(ABOVE));
  });

  it('is read from a token with or without Bearer, as the authorizer reads it', async () => {
    for (const token of [TOKEN, `Bearer ${TOKEN}`, `bearer  ${TOKEN} `, `BEARER ${TOKEN}`]) {
      await assertRefused('SOLD_OUT', { soldOut: true, ...admittedBelow(ABOVE) }, { token });
    }
  });

  it('refuses NO_PASS without one, even with no key list in the store', async () => {
    await assertRefused('NO_PASS', {}, { pass: null });
    await assertRefused('NO_PASS', {}, { pass: '' });
    await assertRefused('NO_PASS', {}, { pass: null, keys: null });
  });

  it('refuses NO_PASS for each malformed pass', async () => {
    const good = makePass();
    const parts = good.split('.');
    const malformed = [
      parts.slice(0, 6).join('.'),
      `${good}.x`,
      `${good}=`,
      good.slice(0, -1),
      `${good.slice(0, 10)} ${good.slice(10)}`,
      good.toUpperCase(),
      ['K1', ...parts.slice(1)].join('.'),
      ['k'.repeat(17), ...parts.slice(1)].join('.'),
      [parts[0], '042', ...parts.slice(2)].join('.'),
      [parts[0], parts[1], '0', ...parts.slice(3)].join('.'),
      [parts[0], parts[1], '07', ...parts.slice(3)].join('.'),
      [parts[0], parts[1], '9223372036854775808', ...parts.slice(3)].join('.'),
      [...parts.slice(0, 3), parts[3].slice(1), ...parts.slice(4)].join('.'),
      [...parts.slice(0, 3), parts[3].toUpperCase(), ...parts.slice(4)].join('.'),
      [...parts.slice(0, 4), TICKET.slice(1), ...parts.slice(5)].join('.'),
      [...parts.slice(0, 4), 'g' + TICKET.slice(1), ...parts.slice(5)].join('.'),
      [...parts.slice(0, 5), '0', parts[6]].join('.'),
      [...parts.slice(0, 5), `0${parts[5]}`, parts[6]].join('.'),
      [...parts.slice(0, 6), `${parts[6]}A`].join('.'),
      [...parts.slice(0, 6), `${parts[6].slice(0, -1)}+`].join('.'),
      [...parts.slice(0, 6), `${parts[6].slice(0, -1)}${parts[6].endsWith('A') ? 'B' : 'A'}`].join('.'),
    ];
    for (const pass of malformed) {
      await assertRefused('NO_PASS', {}, { pass });
    }
  });

  it("refuses NO_PASS for another voucher's pass, another token's, a changed ticket", async () => {
    await assertRefused('NO_PASS', {}, { pass: makePass({ voucher: 43 }) });
    await assertRefused('NO_PASS', {}, { pass: makePass({ token: 'token-of-user-8' }) });
    await assertRefused('NO_PASS', {}, { token: 'Bearer token-of-user-8' });
    const parts = makePass({ ticket: ABOVE }).split('.');
    const moved = [...parts.slice(0, 4), BELOW, ...parts.slice(5)].join('.');
    await assertRefused('NO_PASS', admittedBelow(TICKET), { pass: moved });
  });

  it('reads the pass without the whitespace around it, as CloudFront and API Gateway pass it', async () => {
    const fields = { soldOut: true, ...admittedBelow(ABOVE) };
    for (const pass of [`${makePass()} `, ` ${makePass()}`, `\t${makePass()} \t`]) {
      await assertRefused('SOLD_OUT', fields, { pass });
    }
  });

  it('refuses NO_PASS for a pass shown twice (API Gateway joins repeated headers)', async () => {
    const { handler } = edge({ entries: { 42: drawState(), 'pass-keys': passKeys() } });
    const event = request({ token: `Bearer ${TOKEN}` });
    const pass = makePass();
    event.request.headers['x-seckill-pass'] = { value: pass, multiValue: [{ value: pass }, { value: pass }] };
    assert.deepEqual(await handler(event), refusal('NO_PASS'));
  });

  it('verifies with any key of the ring: a rotated key', async () => {
    const fields = { soldOut: true, ...admittedBelow(ABOVE) };
    await assertRefused('SOLD_OUT', fields, { pass: makePass({ kid: 'k2' }) });
    await assertRefused('SOLD_OUT', fields, { keys: passKeys({ k2: KEYS.k2 }), pass: makePass({ kid: 'k2' }) });
  });

  it('refuses NO_PASS for an unknown kid, a retired key, a key of the wrong bytes', async () => {
    await assertRefused('NO_PASS', {}, { pass: makePass({ kid: 'k3', key: '33'.repeat(32) }) });
    await assertRefused('NO_PASS', {}, { keys: passKeys({ k2: KEYS.k2 }) });
    await assertRefused('NO_PASS', {}, { pass: makePass({ key: KEYS.k2 }) });
    await assertRefused('NO_PASS', {}, { keys: passKeys({}) });
  });

  it('never reads an inherited property as a key id', async () => {
    for (const kid of ['constructor', 'tostring', 'valueof']) {
      await assertRefused('NO_PASS', {}, { pass: makePass({ kid, key: '33'.repeat(32) }) });
    }
  });

  it('refuses NO_PASS once expired beyond the skew, forwards within it', async () => {
    const exp = Math.floor(NOW / 1000);
    await assertRefused('NO_PASS', {}, { pass: makePass({ exp }), at: exp * 1000 + SKEW + 1 });
    for (const at of [exp * 1000 + SKEW, exp * 1000, exp * 1000 - SKEW]) {
      await assertForwarded({ soldOut: true, end: NOW + 60_000 }, { pass: makePass({ exp }), at });
    }
    const admitted = { soldOut: true, ...admittedBelow(ABOVE) };
    await assertRefused('SOLD_OUT', admitted, { pass: makePass({ exp }), at: exp * 1000 - SKEW - 1 });
  });

  it('forwards a well-formed pass when the store has no usable key list', async () => {
    const unusable = [
      null,
      'not json',
      '[]',
      '{}',
      '{"keys":null}',
      '{"keys":[]}',
      JSON.stringify({ keys: { k1: KEYS.k1.slice(1) } }),
      JSON.stringify({ keys: { k1: KEYS.k1.toUpperCase() } }),
      JSON.stringify({ keys: { K1: KEYS.k1 } }),
      JSON.stringify({ keys: { k1: 1 } }),
    ];
    for (const keys of unusable) {
      await assertForwarded({ soldOut: true }, { keys });
    }
  });

  it('forwards when the key list cannot be read', async () => {
    const { handler, store } = edge({ entries: { 42: drawState({ soldOut: true }) } });
    const get = store.get;
    store.get = async (key, options) => {
      if (key === 'pass-keys') {
        throw new Error('the key value store is unavailable');
      }
      return get(key, options);
    };
    const event = request({ token: `Bearer ${TOKEN}`, pass: makePass() });
    assert.equal(await handler(event), event.request);
  });
});

describe('the signature, verified before anything the pass says', () => {
  // A pass of this voucher, user and token, but signed with a key the ring does not hold,
  // or with a signature of the right form that is no key's.
  const forged = (exp) => [
    makePass({ exp, key: '33'.repeat(32) }),
    makePass({ exp }).replace(/[^.]+$/, 'A'.repeat(43)),
  ];
  const nowS = Math.floor(NOW / 1000);
  // Expired long ago and beyond the skew, now, within the skew on either side, to come.
  const expiries = [nowS - 3600, nowS - 2, nowS - 1, nowS, nowS + 1, nowS + 3600];

  it('refuses NO_PASS a forged signature, whatever its exp', async () => {
    for (const exp of expiries) {
      for (const pass of forged(exp)) {
        for (const fields of [{}, { soldOut: true, ...admittedBelow('f'.repeat(17)) }, { stopped: true }]) {
          await assertRefused('NO_PASS', fields, { pass });
        }
      }
    }
  });

  it('forwards it when the store holds no key list to verify it with, whatever its exp', async () => {
    for (const exp of expiries) {
      for (const pass of forged(exp)) {
        await assertForwarded({ soldOut: true }, { pass, keys: null });
        await assertForwarded({ soldOut: true }, { pass: makePass({ exp, voucher: 43 }), keys: null });
      }
    }
  });
});

describe('the order of the refusals', () => {
  it('NO_PASS before ENDED', async () => {
    await assertRefused('NO_PASS', { stopped: true }, { pass: null });
    await assertRefused('NO_PASS', { end: NOW - 60_000 }, { pass: makePass({ voucher: 43 }) });
  });

  it('ENDED before NOT_ADMITTED', async () => {
    await assertRefused('ENDED', { stopped: true, begin: 0, end: 0, ...admittedBelow(BELOW) });
    await assertRefused('ENDED', { begin: NOW - 120_000, end: NOW - SKEW - 1, ...admittedBelow(BELOW) });
  });

  it('forwards within the skew of the close, admitted or not', async () => {
    for (const end of [NOW + SKEW, NOW, NOW - SKEW]) {
      await assertForwarded({ end, soldOut: true, ...admittedBelow(BELOW) });
    }
  });

  it('NOT_ADMITTED before NOT_STARTED, then NOT_STARTED for an admitted ticket', async () => {
    const before = { begin: NOW + 60_000, end: NOW + 120_000 };
    await assertRefused('NOT_ADMITTED', { ...before, ...admittedBelow(TICKET) });
    await assertRefused('NOT_STARTED', { ...before, ...admittedBelow(ABOVE) });
    await assertRefused('NOT_STARTED', { ...before, close: NOW + 30_000, moves: [] });
  });

  it('NOT_ADMITTED before SOLD_OUT, then SOLD_OUT for an admitted ticket', async () => {
    await assertRefused('NOT_ADMITTED', { soldOut: true, ...admittedBelow(TICKET) });
    await assertRefused('SOLD_OUT', { soldOut: true, ...admittedBelow(ABOVE) });
  });

  it('forwards an admitted ticket within the skew of the opening', async () => {
    for (const begin of [NOW + SKEW, NOW, NOW - SKEW + 1]) {
      await assertForwarded({ begin, soldOut: true, ...admittedBelow(ABOVE) });
    }
  });
});

describe('the cursor', () => {
  it('admits a ticket strictly below it', async () => {
    await assertRefused('NOT_ADMITTED', admittedBelow(TICKET));
    await assertRefused('NOT_ADMITTED', admittedBelow(BELOW));
    await assertForwarded(admittedBelow(ABOVE));
    await assertRefused('NOT_ADMITTED', admittedBelow('0' + '0'.repeat(16)));
    await assertForwarded(admittedBelow('1' + '0'.repeat(15) + '1'));
  });

  it('is null before the draw closed: no NOT_ADMITTED', async () => {
    const before = { begin: NOW + 60_000, end: NOW + 120_000, close: NOW + 30_000 };
    await assertRefused('NOT_STARTED', { ...before, moves: [[NOW + 30_000, BELOW]] });
    await assertRefused('NOT_STARTED', { ...before, moves: [] }, { at: NOW + 30_000 - SKEW - 1 });
  });

  it('admits nobody after the close until a move is in effect', async () => {
    await assertRefused('NOT_ADMITTED', { soldOut: true, moves: [] });
    // Unless the entry's first move is a later one than the close's: older ones may be in effect.
    await assertForwarded({ soldOut: true, moves: [[NOW + SKEW + 1, ABOVE]] });
    // Within the skew of the close the gate may not have closed the draw yet.
    const closing = { begin: NOW + 60_000, end: NOW + 120_000, close: NOW, moves: [] };
    for (const at of [NOW - SKEW, NOW, NOW + SKEW]) {
      await assertForwarded(closing, { at });
    }
    await assertRefused('NOT_STARTED', closing, { at: NOW - SKEW - 1 });
    await assertRefused('NOT_ADMITTED', closing, { at: NOW + SKEW + 1 });
  });

  it('is the move with the largest at not after now', async () => {
    const moves = [
      [NOW - 30_000, BELOW],
      [NOW - 10_000, TICKET],
      [NOW + 10_000, ABOVE],
    ];
    await assertRefused('NOT_ADMITTED', { moves });
    await assertForwarded({ moves }, { at: NOW + 10_000 + SKEW + 1 });
    await assertRefused('NOT_ADMITTED', { moves }, { at: NOW + 10_000 - SKEW - 1 });
  });

  it("forwards within the skew of a move's at, on both sides, the tickets the cursors around it disagree on", async () => {
    const at = NOW;
    const moves = [
      [at - 20_000, BELOW],
      [at, TICKET],
      [at + 20_000, ABOVE],
    ];
    // The pass's ticket is TICKET: from BELOW to TICKET it stays refused, from TICKET to ABOVE it is admitted.
    for (const now of [at + 20_000 - SKEW, at + 20_000, at + 20_000 + SKEW]) {
      await assertForwarded({ soldOut: true, moves }, { at: now });
    }
    for (const now of [at - SKEW - 1, at - SKEW, at, at + SKEW, at + SKEW + 1, at + 20_000 - SKEW - 1]) {
      await assertRefused('NOT_ADMITTED', { soldOut: true, moves }, { at: now });
    }
    await assertRefused('SOLD_OUT', { soldOut: true, moves }, { at: at + 20_000 + SKEW + 1 });
    // A ticket below the cursor on both sides of a move is admitted whichever applies.
    const below = [
      [at - 20_000, ABOVE],
      [at, ABOVE.slice(0, 16) + 'e'],
    ];
    await assertRefused('SOLD_OUT', { soldOut: true, moves: below }, { at });
    // Within the skew of the first move, the draw's close: a ticket it would refuse may meet no
    // cursor yet, so it is forwarded; one it admits is not started either way.
    const closing = { begin: NOW + 60_000, end: NOW + 120_000, close: NOW };
    await assertForwarded({ ...closing, moves: [[NOW, BELOW]] });
    await assertRefused('NOT_STARTED', { ...closing, moves: [[NOW, ABOVE]] });
  });
});

describe('how far the moves are decided', () => {
  // A wave every 10 s from the opening (20 s ago); the close's move admitted below BELOW.
  const sale = { begin: NOW - 20_000, close: NOW - 80_000, moves: [[NOW - 80_000, BELOW]] };

  it('refuses a ticket the moves leave behind while every move up to now + SKEW is decided', async () => {
    // The wave at NOW was decided as no move (nobody admitted): decided is the next wave's time.
    const still = { ...sale, decided: NOW + 10_000 };
    for (const at of [NOW - 5_000, NOW, NOW + 10_000 - SKEW - 1]) {
      await assertRefused('NOT_ADMITTED', still, { at });
    }
    await assertForwarded(still, { at: NOW + 10_000 - SKEW });
  });

  it('forwards, never refuses, once the store lags behind the next move (it may admit the ticket)', async () => {
    // The wave at NOW was decided 5 s before it, but the store has not heard of it yet.
    const lagging = { ...sale, decided: NOW };
    for (const at of [NOW - SKEW, NOW, NOW + 5_000, NOW + 60_000 - SKEW - 1]) {
      await assertForwarded({ ...lagging, soldOut: true }, { at });
    }
    await assertRefused('NOT_ADMITTED', lagging, { at: NOW - SKEW - 1 });
    // A ticket below a cursor already in effect is admitted whichever move comes.
    await assertRefused('SOLD_OUT', { ...lagging, soldOut: true, moves: [[NOW - 80_000, ABOVE]] }, { at: NOW + 5_000 });
  });

  it('is unsure of the close itself until its move is decided', async () => {
    const closed = { close: NOW - 10_000, begin: NOW + 50_000, end: NOW + 120_000, moves: [] };
    await assertForwarded({ ...closed, decided: NOW - 10_000 });
    await assertForwarded({ ...closed, decided: 0 });
    await assertRefused('NOT_ADMITTED', { ...closed, decided: NOW + 60_000 });
    // Before the close, whatever is decided: not started.
    await assertRefused('NOT_STARTED', { ...closed, decided: 0 }, { at: NOW - 10_000 - SKEW - 1 });
  });
});

describe('an entry it cannot trust', () => {
  it('forwards every press when the draw entry is malformed', async () => {
    const bad = [
      { draw: false },
      { draw: 1 },
      { moves: null },
      { moves: {} },
      { moves: [[NOW - 10_000]] },
      { moves: [[NOW - 10_000, TICKET, 1]] },
      { moves: [['1', TICKET]] },
      { moves: [[-1, TICKET]] },
      { moves: [[NOW - 10_000.5, TICKET]] },
      { moves: [[NOW - 10_000, TICKET.toUpperCase()]] },
      { moves: [[NOW - 10_000, TICKET.slice(1)]] },
      { moves: [[NOW - 10_000, 7]] },
      // Not ascending, or a cursor that moved back.
      { moves: [[NOW - 10_000, BELOW], [NOW - 20_000, TICKET]] },
      { moves: [[NOW - 10_000, BELOW], [NOW - 10_000, TICKET]] },
      { moves: [[NOW - 20_000, TICKET], [NOW - 10_000, BELOW]] },
      // A draw's close and how far its moves are decided: missing, or no count.
      { close: undefined },
      { decided: undefined },
      { close: '1' },
      { decided: -1 },
      { decided: 1.5 },
      { close: null },
      // More moves than an entry holds.
      { moves: Array.from({ length: 17 }, (_, i) => [NOW - 170_000 + i * 10_000, TICKET]) },
    ];
    for (const fields of bad) {
      await assertForwarded({ soldOut: true, ...fields });
      await assertForwarded({ soldOut: true, ...fields }, { token: null });
    }
  });

  it('holds sixteen moves', async () => {
    const moves = Array.from({ length: 16 }, (_, i) => [NOW - 160_000 + i * 10_000, TICKET]);
    await assertRefused('NOT_ADMITTED', { moves });
  });
});

describe('the routes beside the press', () => {
  it('forwards the entry routes and the draw record untouched, token or not', async () => {
    const routes = [
      ['POST', '/voucher-order/seckill/42/entry'],
      ['GET', '/voucher-order/seckill/42/entry'],
      ['GET', '/voucher/seckill/42/draw'],
      ['GET', '/voucher-order/seckill/42'],
    ];
    for (const [method, uri] of routes) {
      for (const token of [null, `Bearer ${TOKEN}`]) {
        await assertForwarded({ soldOut: true, ...admittedBelow(BELOW) }, { method, uri, token, pass: null });
      }
    }
  });
});

describe('never a 202', () => {
  it('answers only 401, 403 and 409, or forwards, over many states, passes and clocks', async () => {
    let seed = 25;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const pick = (items) => items[Math.floor(random() * items.length)];
    const seen = new Set();
    for (let i = 0; i < 400; i++) {
      const begin = NOW + pick([-60_000, -SKEW, 0, SKEW, 60_000]);
      const fields = {
        begin,
        end: begin + pick([1_000, 30_000, 120_000]),
        soldOut: random() < 0.5,
        stopped: random() < 0.1,
        moves: pick([[], [[NOW - 5_000, TICKET]], [[NOW - 500, ABOVE]], [[NOW + 5_000, BELOW]]]),
      };
      const options = {
        pass: pick([makePass(), makePass({ kid: 'k2' }), makePass({ voucher: 43 }), null, 'x']),
        token: pick([`Bearer ${TOKEN}`, null, 'Bearer other-token']),
        keys: pick([passKeys(), null]),
        at: NOW + pick([-2_000, 0, 2_000]),
      };
      const { answer, event } = await press(fields, options);
      if (answer === event.request) {
        seen.add('forwarded');
        continue;
      }
      assert.ok([401, 403, 409].includes(answer.statusCode), JSON.stringify(answer));
      seen.add(answer.statusCode);
    }
    assert.deepEqual([...seen].sort(), [401, 403, 409, 'forwarded'].sort());
  });
});

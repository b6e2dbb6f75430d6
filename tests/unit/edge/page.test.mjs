// The buyer's page's audit (edge/page/audit.js) and clock (edge/page/clock.js), on Node's
// WebCrypto, the same API as the browser's: the known answer of docs/draw.md, a seed that
// does not match its commitment, a late ticket, a cursor that moved back; and the clock's
// bounds from HTTP Date headers.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';

import { auditDraw, earlyTicket } from '../../../edge/page/audit.js';
import { ServiceClock } from '../../../edge/page/clock.js';

// docs/draw.md: with the seed 000102…1f, user 1010's ticket for voucher 7 is 02826302b6e246995.
const SEED = Buffer.from([...Array(32).keys()]).toString('hex');
const COMMITMENT = createHash('sha256').update(Buffer.from(SEED, 'hex')).digest('hex');
const TICKET = '02826302b6e246995';
const FIRST = { at: '2030-11-30T11:59:00.000Z', cursor: '02826302b6e246990' }; // just below the ticket
const WAVE = { at: '2030-11-30T12:00:10.000Z', cursor: '0f000000000000000' };

function record(changes = {}) {
  return {
    commitment: COMMITMENT,
    closesAt: FIRST.at,
    entrants: 3,
    lateEntrants: 1,
    cursor: WAVE.cursor,
    cursorHistory: [FIRST, WAVE],
    seed: SEED,
    ...changes,
  };
}

const texts = (result) => result.checks.map((c) => `${c.ok ? 'pass' : 'FAIL'} ${c.text}`);

describe('the audit', () => {
  it('derives the documented ticket', async () => {
    assert.equal(await earlyTicket(SEED, '7', '1010'), TICKET);
  });

  it('passes an honest record and finds the move that admitted the ticket', async () => {
    const result = await auditDraw(record(), { voucherId: '7', userId: '1010', ticket: TICKET, committed: COMMITMENT });
    assert.ok(result.ok, texts(result).join('\n'));
    assert.equal(result.checks.length, 5);
    assert.equal(result.admittedAt, WAVE.at);
    assert.deepEqual(
      result.steps.map((s) => s.below),
      [false, true],
    );
  });

  it('fails, in words, a seed that is not the one committed to', async () => {
    const other = 'ff'.repeat(32);
    const result = await auditDraw(record({ seed: other }), { voucherId: '7', userId: '1010', ticket: TICKET });
    assert.equal(result.ok, false);
    const failed = result.checks.filter((c) => !c.ok).map((c) => c.text);
    assert.match(failed[0], /^The revealed seed is NOT the one committed to: its SHA-256 is [0-9a-f]{64}, but the commitment is /);
    assert.match(failed[1], /^Your ticket 02826302b6e246995 is NOT the one the seed gives you/);
  });

  it('fails a commitment other than the one seen before the close', async () => {
    const result = await auditDraw(record(), { voucherId: '7', userId: '1010', ticket: TICKET, committed: 'a'.repeat(64) });
    assert.deepEqual(
      result.checks.filter((c) => !c.ok).map((c) => c.text.split(':')[0]),
      ['The commitment changed'],
    );
  });

  it('checks a late ticket against the late count, not the seed', async () => {
    const late = '10000000000000001';
    assert.ok((await auditDraw(record(), { voucherId: '7', userId: '1011', ticket: late })).ok);
    const beyond = await auditDraw(record(), { voucherId: '7', userId: '1011', ticket: '10000000000000002' });
    assert.equal(beyond.ok, false);
  });

  it('fails a cursor that moved back, and a record not well formed', async () => {
    const back = await auditDraw(record({ cursorHistory: [WAVE, FIRST] }), { voucherId: '7', userId: '1010', ticket: TICKET });
    assert.equal(back.checks[1].text, 'The cursor moved back at move 2.');
    const short = await auditDraw(record({ seed: 'abc' }), { voucherId: '7', userId: '1010', ticket: TICKET });
    assert.deepEqual([short.ok, short.checks.length], [false, 1]);
  });

  it('checks the seed alone for a buyer with no ticket', async () => {
    const result = await auditDraw(record(), { voucherId: '7', userId: null, ticket: null });
    assert.ok(result.ok);
    assert.deepEqual([result.steps, result.admittedAt], [[], null]);
  });
});

describe('the service clock', () => {
  const date = (ms) => new Date(ms).toUTCString();

  it('is the device clock before any answer', () => {
    const clock = new ServiceClock();
    assert.deepEqual([clock.known, clock.offset, clock.now(5000)], [false, 0, 5000]);
  });

  it('narrows the offset with each answer, whole-second Dates included', () => {
    const clock = new ServiceClock();
    // The service is 2.3 s ahead. Answers take 100 ms; the Date header drops the milliseconds.
    const ahead = 2300;
    for (const sent of [1_000_000, 1_000_450, 1_000_820, 1_001_130]) {
      const service = sent + 50 + ahead;
      clock.learn(date(service - (service % 1000)), sent, sent + 100);
    }
    assert.ok(clock.low <= ahead && ahead <= clock.high, `${clock.low} .. ${clock.high}`);
    assert.ok(clock.margin < 500, String(clock.margin));
    // What the service's time surely is, at a device time: never later than it is.
    assert.ok(clock.earliest(2_000_000) <= 2_000_000 + ahead && 2_000_000 + ahead <= clock.latest(2_000_000));
  });

  it('starts again when the device clock was set, and ignores an answer without a Date', () => {
    const clock = new ServiceClock();
    clock.learn(date(10_000), 9_000, 9_100);
    clock.learn(date(10_000), 60_000, 60_100); // the device jumped ahead by a minute
    assert.ok(clock.offset < -40_000);
    const before = clock.offset;
    clock.learn(null, 0, 1);
    assert.equal(clock.offset, before);
  });
});

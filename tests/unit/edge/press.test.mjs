// edge/press.js: which presses the edge refuses, with what, and that it forwards
// everything else unchanged (docs/edge.md).
import assert from 'node:assert/strict';
import { statSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';

import { loadFunction, mapStore } from '../../../local/seckill_local/edge/cloudfront.mjs';
import { NOW, PRESS_JS, edge, request, state } from './harness.mjs';

const SKEW = 1000;
const MESSAGES = {
  NOT_STARTED: 'the sale has not started',
  ENDED: 'the sale has ended',
  SOLD_OUT: 'sold out',
};

function refusal(code) {
  return {
    statusCode: 409,
    statusDescription: 'Conflict',
    headers: { 'content-type': { value: 'application/json' }, 'x-seckill-edge': { value: '1' } },
    body: {
      encoding: 'text',
      data: `{"success": false, "data": null, "errorMsg": "${MESSAGES[code]}", "code": "${code}"}`,
    },
  };
}

// The answer for a press on voucher 42 whose published state is `fields`, at NOW.
async function press(fields, options = {}) {
  const { handler } = edge({ entries: { 42: state(fields) } });
  const event = request(options);
  return { answer: await handler(event), event };
}

async function assertForwarded(fields, options) {
  const { answer, event } = await press(fields, options);
  assert.equal(answer, event.request, 'the request itself goes on to the API');
  assert.deepEqual(answer, request(options).request, 'unchanged');
}

async function assertRefused(fields, code, options) {
  const { answer } = await press(fields, options);
  assert.deepEqual(answer, refusal(code));
}

describe('the sale window', () => {
  it('refuses NOT_STARTED well before the opening', async () => {
    await assertRefused({ begin: NOW + 60_000, end: NOW + 120_000 }, 'NOT_STARTED');
    await assertRefused({ begin: NOW + SKEW + 1 }, 'NOT_STARTED');
  });

  it('forwards within the skew of the opening, on both sides', async () => {
    for (const begin of [NOW + SKEW, NOW + 1, NOW, NOW - SKEW + 1]) {
      await assertForwarded({ begin, soldOut: true });
    }
  });

  it('forwards an open sale with stock', async () => {
    await assertForwarded({});
  });

  it('refuses SOLD_OUT inside the window', async () => {
    await assertRefused({ soldOut: true }, 'SOLD_OUT');
    await assertRefused({ begin: NOW - SKEW, soldOut: true }, 'SOLD_OUT');
    await assertRefused({ end: NOW + SKEW + 1, soldOut: true }, 'SOLD_OUT');
  });

  it('forwards a sold-out sale within the skew of its close, on both sides', async () => {
    for (const end of [NOW + SKEW, NOW, NOW - SKEW]) {
      await assertForwarded({ end, soldOut: true });
    }
  });

  it('refuses ENDED after the close, sold out or not', async () => {
    await assertRefused({ begin: NOW - 120_000, end: NOW - 60_000 }, 'ENDED');
    await assertRefused({ end: NOW - SKEW - 1 }, 'ENDED');
    await assertRefused({ end: NOW - SKEW - 1, soldOut: true }, 'ENDED');
  });

  it('refuses ENDED for a stopped voucher, whatever its window says', async () => {
    await assertRefused({ stopped: true }, 'ENDED');
    await assertRefused({ stopped: true, soldOut: true }, 'ENDED');
    await assertRefused({ stopped: true, end: NOW }, 'ENDED');
    await assertRefused({ stopped: true, begin: 0, end: 0 }, 'ENDED');
  });

  it('says NOT_STARTED before ENDED for a voucher stopped before its opening', async () => {
    await assertRefused({ stopped: true, begin: NOW + 60_000, end: NOW + 120_000 }, 'NOT_STARTED');
  });

  it('forwards a stopped voucher within the skew of its opening', async () => {
    await assertForwarded({ stopped: true, begin: NOW + SKEW });
  });

  it('reads the clock at each request', async () => {
    const { handler, clock } = edge({ entries: { 42: state({ begin: NOW + 5_000, end: NOW + 10_000, soldOut: true }) } });
    assert.deepEqual(await handler(request()), refusal('NOT_STARTED'));
    clock.ms = NOW + 4_500;
    assert.equal((await handler(request())).statusCode, undefined);
    clock.ms = NOW + 7_000;
    assert.deepEqual(await handler(request()), refusal('SOLD_OUT'));
    clock.ms = NOW + 10_500;
    assert.equal((await handler(request())).statusCode, undefined);
    clock.ms = NOW + 11_001;
    assert.deepEqual(await handler(request()), refusal('ENDED'));
  });
});

describe('when the edge cannot know, it forwards', () => {
  // Each would be refused if the edge took it for a sold-out voucher.
  const soldOut = JSON.parse(state({ soldOut: true }));
  const without = (field) => {
    const copy = { ...soldOut };
    delete copy[field];
    return JSON.stringify(copy);
  };
  const malformed = {
    'not JSON': '{"v":1,',
    'a bare word': 'sold out',
    'JSON null': 'null',
    'a JSON number': '42',
    'a JSON string': '"SOLD_OUT"',
    'a JSON array': '[1, 0, 0, true, false]',
    'an empty object': '{}',
    'no v': without('v'),
    'no begin': without('begin'),
    'no end': without('end'),
    'no soldOut': without('soldOut'),
    'no stopped': without('stopped'),
    'begin as text': JSON.stringify({ ...soldOut, begin: String(soldOut.begin) }),
    'end as null': JSON.stringify({ ...soldOut, end: null }),
    'v fractional': JSON.stringify({ ...soldOut, v: 1.5 }),
    'v as text': JSON.stringify({ ...soldOut, v: '1' }),
    'soldOut as text': JSON.stringify({ ...soldOut, soldOut: 'true' }),
    'soldOut as a number': JSON.stringify({ ...soldOut, soldOut: 1 }),
    'stopped as null': JSON.stringify({ ...soldOut, stopped: null }),
    'a negative begin': JSON.stringify({ ...soldOut, begin: -1 }),
    'a negative end': JSON.stringify({ ...soldOut, end: -5 }),
    'a negative v': JSON.stringify({ ...soldOut, v: -1 }),
    "a draw's close without draw": JSON.stringify({ ...soldOut, close: 1 }),
    "a draw's decided without draw": JSON.stringify({ ...soldOut, decided: 1 }),
  };
  for (const [name, value] of Object.entries(malformed)) {
    it(`a value with ${name}`, async () => {
      const { handler } = edge({ entries: { 42: value } });
      const event = request();
      assert.equal(await handler(event), event.request);
    });
  }

  it('a voucher the store has no key for', async () => {
    const { handler } = edge({ entries: { 43: state({ soldOut: true }) } });
    const event = request();
    assert.equal(await handler(event), event.request);
  });

  it('a store whose get throws', async () => {
    const { handler } = edge({ entries: { 42: state({ soldOut: true }) }, failing: true });
    const event = request();
    assert.equal(await handler(event), event.request);
  });

  it('a press without an authorization header (API Gateway answers 401)', async () => {
    await assertForwarded({ soldOut: true }, { token: null });
    await assertForwarded({ soldOut: true }, { token: '' });
  });
});

describe('the voucher id', () => {
  const BAD = ['0', '00', '042', '-1', '+1', '1.5', '1e3', 'abc', '42abc', ' 42', '12345678901234567890',
    '9223372036854775808', '9999999999999999999'];
  for (const id of BAD) {
    it(`forwards ${JSON.stringify(id)}, which the API answers itself`, async () => {
      // The store has a refusing state under that very key: only the id check forwards.
      const { handler } = edge({ entries: { [id]: state({ soldOut: true }) } });
      const event = request({ uri: `/voucher-order/seckill/${id}` });
      assert.equal(await handler(event), event.request);
    });
  }

  for (const id of ['1', '9', '10', '9223372036854775807', '999999999999999999', '1000000000000000000']) {
    it(`refuses for ${id}, a positive 64-bit id`, async () => {
      const { handler } = edge({ entries: { [id]: state({ soldOut: true }) } });
      assert.deepEqual(await handler(request({ uri: `/voucher-order/seckill/${id}` })), refusal('SOLD_OUT'));
    });
  }
});

describe('other requests pass unchanged', () => {
  const OTHERS = [
    { method: 'GET', uri: '/voucher-order/42' },
    { method: 'POST', uri: '/voucher-order/42/cancel' },
    { method: 'GET', uri: '/voucher-order/seckill/42' },
    { method: 'OPTIONS', uri: '/voucher-order/seckill/42' },
    { method: 'POST', uri: '/voucher-order/seckill/42/' },
    { method: 'POST', uri: '/voucher-order/seckill/42/extra' },
    { method: 'POST', uri: '/voucher-order/seckill/' },
    { method: 'POST', uri: '/v1/voucher-order/seckill/42' },
    { method: 'POST', uri: '/voucher/seckill/42/stop' },
    { method: 'GET', uri: '/voucher/list/1' },
  ];
  for (const options of OTHERS) {
    it(`${options.method} ${options.uri}`, async () => {
      await assertForwarded({ soldOut: true }, options);
    });
  }
});

describe('the answer', () => {
  it('is 409 with the JSON content type, x-seckill-edge: 1 and the Lambda body', async () => {
    for (const [fields, code] of [
      [{ begin: NOW + 60_000 }, 'NOT_STARTED'],
      [{ end: NOW - 60_000 }, 'ENDED'],
      [{ soldOut: true }, 'SOLD_OUT'],
    ]) {
      const { answer } = await press(fields);
      assert.deepEqual(answer, refusal(code));
      assert.deepEqual(JSON.parse(answer.body.data), {
        success: false,
        data: null,
        errorMsg: MESSAGES[code],
        code,
      });
    }
  });

  it('is a new object each time (CloudFront may change what it is handed)', async () => {
    const { handler } = edge({ entries: { 42: state({ soldOut: true }) } });
    const first = await handler(request());
    first.headers['x-seckill-edge'].value = 'changed';
    first.body.data = '';
    assert.deepEqual(await handler(request()), refusal('SOLD_OUT'));
  });

  it('is never 202: every state at every moment around its window forwards or refuses with 409', async () => {
    const begin = NOW;
    const end = NOW + 10_000;
    for (const soldOut of [false, true]) {
      for (const stopped of [false, true]) {
        const { handler, clock } = edge({ entries: { 42: state({ begin, end, soldOut, stopped }) } });
        for (let ms = begin - 3_000; ms <= end + 3_000; ms += 250) {
          clock.ms = ms;
          const event = request();
          const answer = await handler(event);
          assert.ok(answer === event.request || answer.statusCode === 409, `at ${ms - begin} ms: ${JSON.stringify(answer)}`);
        }
      }
    }
  });
});

describe('the deployable file', () => {
  it('fits the 10 KB a CloudFront function may weigh', () => {
    assert.ok(statSync(PRESS_JS).size <= 10 * 1024);
  });

  it('is refused by the loader without its one cloudfront import', () => {
    const dir = mkdtempSync(join(tmpdir(), 'edge-'));
    const path = join(dir, 'press.js');
    writeFileSync(path, 'async function handler(event) { return event.request; }\n');
    assert.throws(() => loadFunction(path, mapStore()), /import cf from 'cloudfront'/);
  });
});

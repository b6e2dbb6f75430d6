// The draw's audit, with WebCrypto only (crypto.subtle: the browser's own, or Node's in the
// tests): what seckill-draw verify checks, each check said in words (docs/page.md).

const HEX64 = /^[0-9a-f]{64}$/;
const TICKET = /^[0-9a-f]{17}$/;

const hex = (buffer) => [...new Uint8Array(buffer)].map((b) => b.toString(16).padStart(2, '0')).join('');
const bytes = (text) => Uint8Array.from(text.match(/../g), (pair) => parseInt(pair, 16));

// "0" + the first 16 hex of HMAC-SHA256(key = the seed's bytes, "<voucherId>:<userId>").
export async function earlyTicket(seedHex, voucherId, userId) {
  const key = await crypto.subtle.importKey('raw', bytes(seedHex), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  const mac = await crypto.subtle.sign('HMAC', key, new TextEncoder().encode(`${voucherId}:${userId}`));
  return `0${hex(mac).slice(0, 16)}`;
}

// The record (the draw route's data, its seed revealed) checked for one entrant:
// {ok, checks: [{ok, text}], steps: [{at, cursor, below}], admittedAt}. `ticket` and
// `userId` may be null (no entry: the seed alone is checked); `committed` is the commitment
// seen before the close, if any.
export async function auditDraw(record, { voucherId, userId, ticket, committed = null }) {
  const checks = [];
  const check = (ok, text) => checks.push({ ok, text });
  const history = record.cursorHistory ?? [];
  const formed =
    HEX64.test(record.commitment ?? '') && HEX64.test(record.seed ?? '') && history.every((m) => TICKET.test(m.cursor));
  check(
    formed,
    formed
      ? 'The record is well formed.'
      : 'The record is not well formed: its seed, commitment or cursors are not hex of the right length.',
  );
  if (!formed) return { ok: false, checks, steps: [], admittedAt: null };
  const back = history.findIndex((m, i) => i > 0 && m.cursor < history[i - 1].cursor);
  const moves = `${history.length} move${history.length === 1 ? '' : 's'}`;
  check(back < 0, back < 0 ? `The cursor never moved back (${moves}).` : `The cursor moved back at move ${back + 1}.`);
  const digest = hex(await crypto.subtle.digest('SHA-256', bytes(record.seed)));
  check(
    digest === record.commitment,
    digest === record.commitment
      ? `The revealed seed is the one committed to: its SHA-256 is ${digest}, the commitment published before the draw.`
      : `The revealed seed is NOT the one committed to: its SHA-256 is ${digest}, but the commitment is ${record.commitment}. ` +
          'The seed could have been chosen after the entries were seen: this draw cannot be trusted.',
  );
  if (committed) {
    check(
      committed === record.commitment,
      committed === record.commitment
        ? 'The commitment is the one this page saw before the draw closed.'
        : `The commitment changed: this page saw ${committed} before the draw closed, the record now says ${record.commitment}.`,
    );
  }
  if (ticket && userId) {
    await checkTicket(record, voucherId, userId, ticket, check);
  } else {
    check(true, 'You have no ticket in this draw: there is nothing of yours to check.');
  }
  const steps = ticket ? history.map((m) => ({ at: m.at, cursor: m.cursor, below: ticket < m.cursor })) : [];
  const first = steps.find((step) => step.below);
  return { ok: checks.every((c) => c.ok), checks, steps, admittedAt: first ? first.at : null };
}

async function checkTicket(record, voucherId, userId, ticket, check) {
  if (ticket[0] === '1') {
    const number = parseInt(ticket.slice(1), 16);
    check(
      number >= 1 && number <= record.lateEntrants,
      `Your ticket ${ticket} is late entry number ${number} of ${record.lateEntrants}: late entries queue after ` +
        'every early one, in order of entry, and do not come from the seed.',
    );
    return;
  }
  const derived = await earlyTicket(record.seed, voucherId, userId);
  const message = `HMAC-SHA256(seed, "${voucherId}:${userId}")`;
  check(
    derived === ticket,
    derived === ticket
      ? `Your ticket ${ticket} is "0" and the first 16 hex of ${message}: drawn from the seed, as everyone's.`
      : `Your ticket ${ticket} is NOT the one the seed gives you (${message} gives ${derived}).`,
  );
}

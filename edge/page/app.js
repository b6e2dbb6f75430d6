// The buyer's page for one seckill voucher (docs/page.md): sign in with a token, follow the
// sale by the service's clock, enter a draw, press at most as a person would, learn the
// order, and audit the draw with the browser's own WebCrypto once its seed is out.
// Plain JavaScript, no build step; the API is on the same origin. The token stays in
// memory and this tab's sessionStorage: never in the URL, never logged.
import { auditDraw } from './audit.js';
import { ServiceClock } from './clock.js';
import { admitted as below, ahead } from './tickets.js';

const ID = /^[1-9][0-9]{0,18}$/;
// <kid>.<voucherId>.<userId>.<th>.<ticket>.<exp>.<sig>: the signed-in user's id is the third part.
const PASS = /^[a-z0-9]{1,16}\.([1-9][0-9]*)\.([1-9][0-9]*)\./;
// What an open page asks of the service (docs/page.md#what-the-page-asks-of-the-service):
// docs/capacity.md's model assumes this schedule of the draw record's reads, per page, for a
// draw of millions of entrants; change them together. Nothing else is read while waiting.
const RECORD_WAIT_MS = 300000; // before the close: only the counts change, nobody is admitted
const RECORD_CLOSE_JITTER_MS = 5000; // the read at the close, spread so pages do not ask at once
// From the close until the seed is out. A move is recorded with every step's time, so the page
// sees its step take effect without a read; only a wave (every waveSeconds) is news.
const RECORD_EVERY_MS = 10000;
const ORDER_EVERY_MS = 1000;
const ORDER_TRIES = 60;
const ANSWER_TIMEOUT_MS = 10000;
const TRY_AGAIN_TIMES = 2; // after a 503 TRY_AGAIN: at most this many more presses, with jitter
const SOLD_OUT_PAUSE_MS = 10000; // a unit comes back only when a hold expires or is cancelled

const $ = (id) => document.getElementById(id);
const store = window.sessionStorage;

const sale = {
  token: null,
  shopId: null,
  voucherId: null,
  voucher: null, // the voucher list's entry
  isDraw: false,
  userId: null,
  entry: null, // {pass, ticket, late}
  record: null, // the draw record
  committed: null, // the commitment this page saw before the close
  order: null,
  pressing: false,
  done: false, // holds an order (or the sale is over for this user)
  refused: false, // a press was answered SOLD_OUT or ENDED: the chance is over
  pausedUntil: 0,
  retries: 0,
  audited: false,
  lastRecord: -Infinity, // when the record was last asked for, by the service's clock
  closeJitter: Math.random() * RECORD_CLOSE_JITTER_MS,
};

// ---- The service's clock -------------------------------------------------------------------

const clock = new ServiceClock();
const serviceNow = () => clock.now();

// ---- Calls ---------------------------------------------------------------------------------

// One request, no retry. Resolves with {status, result (the Result body, or null), body};
// rejects when no answer came (the network, or no answer within the timeout).
async function call(method, path, { auth = false, pass = null } = {}) {
  const headers = {};
  if (auth) headers.authorization = sale.token;
  if (pass) headers['x-seckill-pass'] = pass;
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), ANSWER_TIMEOUT_MS);
  const sentAt = Date.now();
  try {
    const response = await fetch(path, { method, headers, signal: abort.signal, cache: 'no-store', credentials: 'omit' });
    const text = await response.text();
    clock.learn(response.headers.get('date'), sentAt, Date.now());
    let body = null;
    try {
      body = JSON.parse(text);
    } catch {
      body = null; // not the API's (a gateway's page)
    }
    const result = body !== null && typeof body === 'object' && 'success' in body && 'code' in body ? body : null;
    return { status: response.status, result, body };
  } finally {
    clearTimeout(timer);
  }
}

const voucherPath = () => `/voucher-order/seckill/${sale.voucherId}`;

// ---- Words ---------------------------------------------------------------------------------

const REFUSALS = {
  SOLD_OUT: 'Sold out: every unit is taken. A unit comes back only if a buyer does not pay in time.',
  DUPLICATE_ORDER: 'You already hold an order on this voucher (one per buyer).',
  NOT_STARTED: 'The sale has not started yet by the service’s clock.',
  ENDED: 'The sale has ended.',
  NOT_ADMITTED: 'You are not admitted yet: the draw has not reached your ticket.',
  NO_PASS: 'Your pass is not valid for this sign-in: enter the draw again for a fresh one.',
  VOUCHER_NOT_FOUND: 'There is no such voucher.',
  NOT_A_DRAW: 'This sale is not a draw.',
  BAD_REQUEST: 'The voucher number is not valid.',
};

const STATES = {
  PENDING: 'being stored',
  CONFIRMED: 'held for you: pay before the deadline',
  PAID: 'paid',
  EXPIRED: 'expired unpaid: its unit went back on sale',
  CANCELLED: 'cancelled: its unit went back on sale',
  FAILED: 'not stored',
};

function refusal(answer) {
  if (answer.status === 401) return 'Your sign-in was refused: sign in again with a fresh token.';
  if (answer.status === 429) return 'Too many requests from here: wait a moment before pressing again.';
  const code = answer.result?.code;
  return REFUSALS[code] ?? answer.result?.errorMsg ?? `The service answered ${answer.status}.`;
}

function when(ms) {
  return new Date(ms).toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'long' });
}

function span(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = String(total % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${s}` : `${m}:${s}`;
}

function say(text) {
  $('answer').textContent = text;
}

// ---- Signing in and loading the sale --------------------------------------------------------

function signIn(event) {
  event.preventDefault();
  const shop = $('shop').value.trim();
  const voucher = $('voucher').value.trim();
  const token = $('token').value.trim();
  const wrong = !ID.test(shop) ? 'shop' : !ID.test(voucher) ? 'voucher' : token === '' ? 'token' : null;
  if (wrong) {
    $('signin-error').textContent =
      wrong === 'token' ? 'Give your sign-in token.' : `The ${wrong} number must be a whole number from 1.`;
    $(wrong).focus();
    return;
  }
  // Another user's pass and ticket must not outlive their sign-in.
  if (store.getItem('token') !== token) store.clear();
  store.setItem('token', token);
  $('token').value = '';
  // The sale in the address (to bookmark or share), never the token.
  history.replaceState(null, '', `?shop=${shop}&voucher=${voucher}`);
  // Signing in again (a refused token): start afresh, nothing of the last sign-in in memory.
  if (sale.token) location.reload();
  else start(token, shop, voucher);
}

async function start(token, shop, voucher) {
  Object.assign(sale, { token, shopId: shop, voucherId: voucher });
  $('signin-error').textContent = '';
  $('signin').hidden = true;
  $('sale').hidden = false;
  $('buy').hidden = false;
  $('state').textContent = 'Loading the sale…';
  try {
    sale.voucher = await findVoucher();
    sale.isDraw = sale.voucher ? sale.voucher.admission === 'draw' : await loadRecord();
    if (sale.isDraw) {
      $('draw').hidden = false;
      $('audit').hidden = false;
      sale.committed = store.getItem(`committed:${voucher}`);
      // The entry this tab made; without one, the Enter button (which, for a buyer who
      // entered elsewhere, answers the same ticket and a pass for this sign-in).
      const saved = store.getItem(`entry:${voucher}`);
      if (saved) setEntry(JSON.parse(saved));
      if (!sale.record) await loadRecord();
    }
    // No order can exist before the opening: a page opened in a draw's entry hour asks nothing
    // through the authorizer until it enters.
    const w = saleWindow();
    if (!w || clock.latest() >= w.begin) await checkMyOrder(true);
  } catch {
    $('state').textContent = 'The service did not answer: reload the page to try again.';
  }
  render();
  $('sale-heading').focus();
  setInterval(render, 250);
  poll();
}

// The voucher's entry in its shop's list (pages of 100), or null once it is no longer listed.
async function findVoucher() {
  let after = 0;
  for (let page = 0; page < 50; page++) {
    const answer = await call('GET', `/voucher/list/${sale.shopId}?limit=100${after ? `&after=${after}` : ''}`);
    const listed = answer.result?.data;
    if (!Array.isArray(listed)) return null;
    const found = listed.find((v) => String(v.id) === sale.voucherId);
    if (found) return found;
    if (listed.length < 100) return null;
    after = listed[listed.length - 1].id;
  }
  return null;
}

// The draw record; false when the voucher has none (not a draw).
async function loadRecord() {
  sale.lastRecord = serviceNow();
  const answer = await call('GET', `/voucher/seckill/${sale.voucherId}/draw`);
  if (answer.status !== 200 || !answer.result?.data) return false;
  sale.record = answer.result.data;
  // The commitment as published before the close: what the revealed seed must match.
  if (sale.record.cursor === null && sale.committed === null) {
    sale.committed = sale.record.commitment;
    store.setItem(`committed:${sale.voucherId}`, sale.committed);
  }
  return true;
}

function setEntry(entry) {
  sale.entry = entry;
  const user = entry.pass ? PASS.exec(entry.pass) : null;
  if (user) sale.userId = user[2];
  if (entry.pass) store.setItem(`entry:${sale.voucherId}`, JSON.stringify(entry));
}

async function enter() {
  $('enter').disabled = true;
  try {
    const answer = await call('POST', `${voucherPath()}/entry`, { auth: true });
    if (answer.status === 200) {
      setEntry(answer.result.data);
      say(answer.result.data.late ? 'You entered after the close: you queue behind every earlier entrant.' : 'You are in the draw.');
    } else {
      say(refusal(answer));
    }
  } catch {
    say('The entry got no answer: try again.');
  }
  render();
}

// ---- Polling while waiting ----------------------------------------------------------------------

async function poll() {
  try {
    if (recordDue(serviceNow())) await loadRecord();
    // The read that brought the seed is the audit's.
    if (sale.record?.seed && sale.entry && !sale.audited) await audit(false);
  } catch {
    // No answer this time; the next turn asks again.
  }
  render();
  setTimeout(poll, 500);
}

// Whether to read the draw record now (service time): every RECORD_WAIT_MS before the close
// (and before any record came), once at the close plus this page's jitter, then every
// RECORD_EVERY_MS until the seed is out; never on a race.
function recordDue(now) {
  if (!sale.isDraw || sale.record?.seed) return false;
  const since = now - sale.lastRecord;
  const atClose = Date.parse(sale.record?.closesAt ?? '') + sale.closeJitter;
  if (!(now >= atClose)) return since >= RECORD_WAIT_MS;
  return sale.lastRecord < atClose || since >= RECORD_EVERY_MS;
}

// ---- The draw's cursor ----------------------------------------------------------------------

// The cursor in effect at `now` (service time): the latest move whose time has come.
function cursorAt(now) {
  let cursor = null;
  for (const move of sale.record?.cursorHistory ?? []) {
    if (Date.parse(move.at) <= now) cursor = move.cursor;
  }
  return cursor;
}

function admitted(now) {
  return Boolean(sale.entry && below(sale.entry.ticket, cursorAt(now)));
}

// Where the entry stands, from its ticket and the public record alone (what the entry route
// would answer, save its "sold out with no hold outstanding", which only the service knows).
function chance(now, w) {
  if (!sale.entry) return null;
  if (!w || now >= w.end || recordRevealed() || sale.refused) return 'over';
  return admitted(now) ? 'admitted' : 'waiting';
}

function aheadOf(now) {
  const record = sale.record;
  if (!sale.entry || !record) return null;
  return ahead(sale.entry.ticket, cursorAt(now), record.entrants - record.lateEntrants, record.lateEntrants);
}

// ---- Pressing -------------------------------------------------------------------------------

function saleWindow() {
  const v = sale.voucher;
  return v ? { begin: Date.parse(v.beginTime), end: Date.parse(v.endTime) } : null;
}

// Only when it can succeed by the service's clock whatever the clock's margin: the opening
// and the move that admits the buyer surely past, the end surely not.
function canPress() {
  const w = saleWindow();
  if (!w || sale.pressing || sale.done || Date.now() < sale.pausedUntil) return false;
  const earliest = clock.earliest();
  if (earliest < w.begin || clock.latest() >= w.end) return false;
  if (!sale.isDraw) return true;
  return Boolean(sale.entry?.pass) && admitted(earliest) && !recordRevealed();
}

async function press() {
  if (!canPress()) return;
  sale.pressing = true;
  say('Pressing…');
  render();
  let answer = null;
  try {
    answer = await call('POST', voucherPath(), { auth: true, pass: sale.isDraw ? sale.entry.pass : null });
  } catch {
    answer = null;
  }
  sale.pressing = false;
  // No answer, or not the API's (a gateway's error page): the press may have taken an order.
  const definite = answer && (answer.result || answer.status === 401 || answer.status === 429);
  if (!definite) {
    await lostAnswer();
  } else if (answer.status === 202) {
    sale.retries = 0;
    sale.done = true;
    say('You got one! Your order is below.');
    await followOrder(answer.result.data);
  } else if (answer.result?.code === 'TRY_AGAIN' && sale.retries < TRY_AGAIN_TIMES) {
    // Nothing was taken; one more press after a random pause, so a crowd does not press in step.
    sale.retries += 1;
    const pause = 1000 + Math.random() * 2000;
    sale.pausedUntil = Date.now() + pause;
    say(`The service is busy and took no order: pressing once more in ${(pause / 1000).toFixed(1)} s.`);
    setTimeout(() => {
      sale.pausedUntil = 0;
      press();
    }, pause);
  } else {
    sale.retries = 0;
    settle(answer);
  }
  render();
}

function settle(answer) {
  const code = answer.result?.code;
  say(code === 'TRY_AGAIN' ? 'The service is busy and took no order: press again in a moment.' : refusal(answer));
  if (code === 'DUPLICATE_ORDER') {
    sale.done = true;
    checkMyOrder(true);
  } else if (code === 'ENDED') {
    sale.done = true;
    sale.refused = true;
  } else if (code === 'SOLD_OUT') {
    sale.refused = true;
    sale.pausedUntil = Date.now() + SOLD_OUT_PAUSE_MS;
  } else if (code === 'NO_PASS') {
    // The pass is bound to the token it was issued for: entering again gives a fresh one.
    sale.entry.pass = null;
    store.removeItem(`entry:${sale.voucherId}`);
  } else if (answer.status === 401) {
    $('signin').hidden = false;
    $('token').focus();
  }
}

async function lostAnswer() {
  say('The answer to your press was lost on the way. Checking whether it took an order…');
  render();
  const found = await checkMyOrder(false);
  if (found === false) say('The answer was lost, and the press took no order: you may press again.');
}

let myOrderAgain = null; // the next ask after a 503 TRY_AGAIN: one chain at a time

// "My order on this voucher": true (shown), false (none), null (no answer to tell yet). A 503
// TRY_AGAIN (a press still being placed, or, after Redis lost its data, an order maybe still on
// its way: docs/reservations.md) is asked again in the background, every 2 s for up to 2 minutes,
// so that a caller (signing in) does not wait on it.
async function checkMyOrder(quiet, triesLeft = ORDER_TRIES) {
  clearTimeout(myOrderAgain);
  let answer;
  try {
    answer = await call('GET', voucherPath(), { auth: true });
  } catch {
    answer = null;
  }
  if (answer?.status === 200 && answer.result?.data) {
    sale.done = true;
    showOrder(answer.result.data);
    if (!quiet) say('You hold an order on this voucher: it is below.');
    if (answer.result.data.status === 'PENDING') await followOrder(answer.result.data.orderId);
    return true;
  }
  if (answer?.result?.code === 'ORDER_NOT_FOUND') {
    if (!quiet) say('You hold no order on this voucher.');
    return false;
  }
  if (answer?.result?.code === 'TRY_AGAIN' && triesLeft > 0) {
    if (!quiet) say('Your order cannot be told yet: checking again in a moment…');
    myOrderAgain = setTimeout(() => {
      if (!sale.order) checkMyOrder(quiet, triesLeft - 1);
    }, 2 * ORDER_EVERY_MS);
    return null;
  }
  if (!quiet) say('Your order could not be checked now: try “Check my order” again in a moment.');
  return null;
}

// The order's state until it is decided (the persister stores it within seconds).
async function followOrder(orderId) {
  for (let i = 0; i < ORDER_TRIES; i++) {
    let answer = null;
    try {
      answer = await call('GET', `/voucher-order/${orderId}`, { auth: true });
    } catch {
      answer = null;
    }
    if (answer?.status === 200) {
      showOrder(answer.result.data);
      if (answer.result.data.status !== 'PENDING') return;
    }
    await new Promise((resolve) => setTimeout(resolve, ORDER_EVERY_MS));
  }
}

function showOrder(order) {
  sale.order = order;
  if (!sale.userId) sale.userId = String(order.userId);
  $('order').hidden = false;
  $('order-id').textContent = order.orderId;
  $('order-status').textContent = `${order.status}: ${STATES[order.status] ?? ''}${order.reason ? ` (${order.reason})` : ''}`;
  $('order-status').dataset.status = order.status;
}

// ---- The audit ------------------------------------------------------------------------------

// `reload`: read the record first (the button: a check now); the poll audits the record it
// has just read.
async function audit(reload) {
  sale.audited = true;
  $('audit-run').disabled = true;
  if (reload) await loadRecord();
  const record = sale.record;
  const verdict = $('audit-verdict');
  if (!record?.seed) {
    verdict.textContent = 'The seed is not revealed yet: it is once the sale is over or stopped.';
    sale.audited = false;
    render();
    return;
  }
  const ticket = sale.entry?.ticket ?? null;
  const { ok, checks, steps, admittedAt } = await auditDraw(record, {
    voucherId: sale.voucherId,
    userId: sale.userId,
    ticket,
    committed: sale.committed,
  });
  const item = (text, className = '') => {
    const li = document.createElement('li');
    li.className = className;
    li.textContent = text;
    return li;
  };
  $('audit-checks').replaceChildren(
    ...checks.map((c) => item(`${c.ok ? 'Passed' : 'FAILED'}: ${c.text}`, c.ok ? 'pass' : 'fail')),
    ...steps.map((step, i) =>
      item(
        `Move ${i + 1}, at ${when(Date.parse(step.at))}: the cursor became ${step.cursor}; your ticket was ` +
          `${step.below ? 'below it: admitted' : 'not below it: not admitted'}.`,
      ),
    ),
  );
  $('audit').dataset.ok = String(ok);
  $('audit').dataset.admittedAt = admittedAt ?? '';
  const place = !ticket ? '' : admittedAt ? ` You were admitted at ${when(Date.parse(admittedAt))}.` : ' You were not admitted.';
  verdict.className = ok ? 'pass' : 'fail';
  verdict.textContent = ok
    ? `The draw checks out: every check passed.${place}`
    : `The draw does NOT check out: ${checks.find((c) => !c.ok).text}`;
  $('audit-run').disabled = false;
}

// ---- Rendering ------------------------------------------------------------------------------

function render() {
  if (!sale.token) return;
  const now = serviceNow();
  const w = saleWindow();
  const v = sale.voucher;
  if (v) {
    $('title').textContent = v.title || `Voucher ${sale.voucherId}`;
    $('opens').textContent = when(w.begin);
    $('ends').textContent = when(w.end);
    $('stock').textContent = `${v.stock} when the page loaded`;
    $('state').textContent =
      now < w.begin ? `Opens in ${span(w.begin - now)}` : now < w.end ? `On sale now: ends in ${span(w.end - now)}` : 'The sale has ended.';
  } else if (sale.isDraw || sale.voucherId) {
    $('state').textContent = sale.isDraw ? 'The sale is over or withdrawn.' : 'This voucher is not on sale at this shop.';
  }
  const ahead = clock.offset >= 0 ? 'ahead of' : 'behind';
  const spread = clock.known ? ` (±${(clock.margin / 1000).toFixed(1)} s)` : '';
  $('clock').textContent =
    `The service’s clock is ${(Math.abs(clock.offset) / 1000).toFixed(1)} s ${ahead} this device’s${spread}; ` +
    `times are in your zone (${Intl.DateTimeFormat().resolvedOptions().timeZone}), counted by the service’s clock.`;
  if (sale.order) {
    const payBy = Date.parse(sale.order.payBy ?? '');
    const left = sale.order.status === 'CONFIRMED' && payBy > now ? ` (${span(payBy - now)} left)` : '';
    $('order-payby').textContent = Number.isNaN(payBy) ? '-' : `${when(payBy)}${left}`;
  }
  if (sale.isDraw) renderDraw(now, w);
  const can = canPress();
  const button = $('press');
  button.disabled = !can;
  button.textContent = can
    ? 'Buy now'
    : sale.pressing
      ? 'Pressing…'
      : Date.now() < sale.pausedUntil && !sale.done
        ? 'Buy (wait a moment)'
      : w && now < w.begin
        ? `Buy (opens in ${span(w.begin - now)})`
        : sale.isDraw && w && now < w.end && !sale.done && !admitted(now)
          ? 'Buy (not admitted yet)'
          : 'Buy';
  $('audit-run').disabled = !sale.record?.seed;
}

function renderDraw(now, w) {
  const record = sale.record;
  if (!record) return;
  const close = Date.parse(record.closesAt);
  $('closes').textContent = when(close);
  $('commitment').textContent = record.commitment;
  const cursor = cursorAt(now);
  $('cursor').textContent = cursor ?? 'none yet: the draw has not closed';
  const entry = sale.entry;
  $('ticket').textContent = entry ? `${entry.ticket}${entry.late ? ' (late entry)' : ''}` : 'not entered';
  // From the record's moves and counts, as of its last read; a move takes effect here at its
  // time by the service's clock, read or not.
  const standing = chance(now, w);
  const waiting = aheadOf(now);
  $('ahead').textContent =
    standing === 'admitted' ? 'nobody: you are admitted' : standing === 'waiting' && waiting !== null ? `about ${waiting}` : '-';
  $('chance').textContent = standing ?? '-';
  const over = !w || now >= w.end || record.seed !== null;
  $('enter').disabled = Boolean(entry?.pass) || over;
  $('enter').hidden = Boolean(entry?.pass);
  $('draw-next').textContent = nextStep(now, close, w, over);
}

function nextStep(now, close, w, over) {
  const entry = sale.entry;
  if (recordRevealed()) return 'The sale is over and its seed is out: check the draw below.';
  if (over || (sale.done && sale.refused)) return 'The sale is over for you: no unit can come back.';
  if (sale.done) return 'You hold an order on this voucher.';
  if (sale.refused) return 'Sold out when you pressed: a unit comes back only if a buyer does not pay in time.';
  if (!entry) {
    return now < close
      ? `Enter before the draw closes, in ${span(close - now)}: everyone who enters by then has the same chance.`
      : 'The draw has closed: entering now queues you behind every earlier entrant.';
  }
  if (now < close) return `You are in the draw. It closes in ${span(close - now)}; then the first move admits entrants in ticket order.`;
  if (admitted(now)) {
    return now < w.begin ? `You are admitted! The sale opens in ${span(w.begin - now)}: press Buy then.` : 'You are admitted: press Buy now.';
  }
  return 'Not admitted yet: waves admit more entrants while units remain. Keep this page open.';
}

function recordRevealed() {
  return Boolean(sale.record?.seed);
}

// ---- Start ----------------------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  const params = new URLSearchParams(location.search);
  $('shop').value = params.get('shop') ?? '';
  $('voucher').value = params.get('voucher') ?? '';
  $('signin-form').addEventListener('submit', signIn);
  $('enter').addEventListener('click', enter);
  $('press').addEventListener('click', press);
  $('my-order').addEventListener('click', () => checkMyOrder(false));
  $('audit-run').addEventListener('click', () => audit(true));
  $('sale-heading').tabIndex = -1;
  // Signed in already in this tab (a reload): go straight to the sale.
  const token = store.getItem('token');
  if (token && ID.test($('shop').value) && ID.test($('voucher').value)) start(token, $('shop').value, $('voucher').value);
});

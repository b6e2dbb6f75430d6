// The draw's arithmetic the page needs to say where a ticket stands from the public record
// alone (docs/page.md), ported from layers/seckill/draw/tickets.py so that it answers what
// the entry route would: tests/unit/test_page_tickets.py holds the two to the same answers.
// Tickets and cursors are 17 lowercase hex characters, compared character by character; the
// 64-bit numbers behind them are BigInts, the float steps Python's own (IEEE doubles).

const SPAN = 2 ** 64;

const number = (hex16) => BigInt(`0x${hex16}`);

// Python's round(): to the nearest integer, a tie to the even one (x >= 0 here).
function roundHalfEven(x) {
  const floor = Math.floor(x);
  const rest = x - floor; // exact: the fraction of a double is a double
  if (rest !== 0.5) return rest < 0.5 ? floor : floor + 1;
  return floor % 2 === 0 ? floor : floor + 1;
}

// An entrant is admitted while its ticket is below the cursor; nobody before the first move.
export function admitted(ticket, cursor) {
  return cursor !== null && ticket < cursor;
}

// About how many entrants not yet admitted hold a smaller ticket: early tickets are uniform
// over 16 hex digits, so the share of the `early` entrants between the cursor and the ticket
// is their distance over 2^64; late tickets count one by one (`late`: the late entrants so far).
export function ahead(ticket, cursor, early, late) {
  if (admitted(ticket, cursor)) return 0;
  const low = cursor === null || cursor[0] !== '0' ? 0n : number(cursor.slice(1));
  // Number(BigInt) rounds to the nearest double as Python's int / int does; over 2^64 is exact.
  if (ticket[0] === '0') return roundHalfEven((Number(number(ticket.slice(1)) - low) / SPAN) * early);
  const own = number(ticket.slice(1));
  const sequence = own < BigInt(late) + 1n ? own : BigInt(late) + 1n;
  if (cursor !== null && cursor[0] === '1') {
    const passed = sequence - number(cursor.slice(1));
    return passed > 0n ? Number(passed) : 0;
  }
  return roundHalfEven((Number(2n ** 64n - low) / SPAN) * early) + Number(sequence) - 1;
}

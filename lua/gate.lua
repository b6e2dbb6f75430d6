-- The seckill gate: every check and the reservation in one atomic step.
-- KEYS[1] seckill:stock:{v}   string, remaining stock
-- KEYS[2] seckill:order:{v}   set, user ids holding an order
-- KEYS[3] seckill:window:{v}  hash, begin/end in epoch milliseconds; "provisional" while the
--         voucher's creation has not committed in MySQL
-- KEYS[4] seckill:pending:{v} hash, user id -> reservation mark (see docs/reservations.md):
--         "<acceptedMs>:<requestToken>:<orderId>[:promised]"
-- KEYS[5] seckill:cursor:{v} zset, a draw's cursor moves (member cursor, score at in ms)
-- ARGV[1] user id, ARGV[2] request token (identifies this reservation), ARGV[3] the order
--         id this press brings (from its container's block: seckill.ids.OrderIds)
-- ARGV[4] the ticket of the press's valid pass ('' without one): read on a draw voucher only
-- Returns {code, nowMs, orderId, stockLeft}:
--   0 OK: a unit reserved for orderId; stockLeft 0 when this call took the last unit
--   1 VOUCHER_NOT_FOUND, 2 NOT_STARTED, 3 ENDED, 4 SOLD_OUT, 5 DUPLICATE_ORDER
--   6 RESUMED: the user's reservation, which no client was told 202 for, is taken over
--     by this request with its own order id (returned; ARGV[3] is unused)
--   7 ENDED while the user's reservation is one no client was told 202 for: the
--     caller fails that order, then releases it (docs/reservations.md); the reply is then
--     {7, acceptedMs, orderId, requestToken} of that reservation.
--   On a draw voucher (the window's "draw" field) also 8 NO_PASS and 9 NOT_ADMITTED
--   (docs/draw.md), and 10 NOT_ADMITTED because the draw has closed (the window's "close",
--   epoch ms) and no move is recorded yet: the reply is then {10, nowMs, close, 0}, so
--   the caller can wake the draw clock.
-- Only OK with orderId = ARGV[3] uses the id brought; every other answer leaves it unused.
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
local window = redis.call('HMGET', KEYS[3], 'begin', 'end', 'provisional', 'draw', 'close')
local begin_ms, end_ms = tonumber(window[1] or ''), tonumber(window[2] or '')
-- A missing, half-written or uncommitted voucher is "not found", never a script error.
if not stock or not begin_ms or not end_ms or window[3] then
  return {1, 0, '', 0}
end

-- The Redis server's clock, so every function instance judges the window alike.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The draw check: no pass, no press; then (ENDED first, below) a ticket not below
-- the cursor in effect is not admitted, before the window opens as after a sell-out.
if window[4] then
  local ticket = ARGV[4] or ''
  if ticket == '' then
    return {8, now_ms, '', 0}
  end
  if now_ms <= end_ms then
    local move = redis.call('ZREVRANGEBYSCORE', KEYS[5], now_ms, '-inf', 'LIMIT', 0, 1)[1]
    if move then
      if not ticket_below(ticket, move) then
        return {9, now_ms, '', 0}
      end
    elseif window[5] and now_ms >= tonumber(window[5]) then
      -- Closed, and the first move not recorded yet (its tick late, lost or failed, or
      -- Redis rebuilt before it): a missing cursor never admits anyone.
      return {10, now_ms, window[5], 0}
    end
  end
end

if now_ms < begin_ms then
  return {2, now_ms, '', 0}
end

local accepted, token, order_id, promised = parse_mark(redis.call('HGET', KEYS[4], ARGV[1]))
if accepted and token == ARGV[2] then
  -- A retry of this very request (its reply was lost on the way), accepted inside the
  -- window by its first run: the same answer, even after the close.
  return {0, tonumber(accepted), order_id, stock}
end
if now_ms > end_ms then
  -- Closed (or stopped): no order is created or resumed any more. A reservation no
  -- client was told 202 for is resolved as reconciliation would, before its age.
  if accepted and not promised then
    return {7, tonumber(accepted), order_id, token}
  end
  return {3, now_ms, '', 0}
end

if accepted and not promised then
  -- No client was told 202 for this reservation: the request that made it gave up
  -- (its reply was lost, it answered 503) or is still running. The user's new
  -- press takes it over, order id and all, so a retry succeeds at once instead of
  -- waiting for reconciliation; the old request's release fails on the token.
  redis.call('HSET', KEYS[4], ARGV[1], make_mark(now_ms, ARGV[2], order_id))
  return {6, now_ms, order_id, stock}
end

if stock <= 0 then
  return {4, now_ms, '', 0}
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return {5, now_ms, '', 0}
end

redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], make_mark(now_ms, ARGV[2], ARGV[3]))
return {0, now_ms, ARGV[3], stock - 1}

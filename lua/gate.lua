-- The seckill gate: every check and the reservation in one atomic step.
-- KEYS[1] seckill:stock:{v}   string, remaining stock
-- KEYS[2] seckill:order:{v}   set, user ids holding an order
-- KEYS[3] seckill:window:{v}  hash, begin/end in epoch milliseconds
-- KEYS[4] seckill:pending:{v} hash, user id -> "<acceptedMs>:<requestToken>[:<orderId>]"
-- ARGV[1] user id, ARGV[2] request token (identifies this reservation)
-- Returns {code, nowMs}: 0 OK, 1 VOUCHER_NOT_FOUND, 2 NOT_STARTED, 3 ENDED,
-- 4 SOLD_OUT, 5 DUPLICATE_ORDER.
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
local window = redis.call('HMGET', KEYS[3], 'begin', 'end')
local begin_ms, end_ms = tonumber(window[1] or ''), tonumber(window[2] or '')
-- A missing or half-written voucher is "not found", never a script error.
if not stock or not begin_ms or not end_ms then
  return {1, 0}
end

-- A retry of this very request (its reply was lost on the way) gets the same answer.
local mine = redis.call('HGET', KEYS[4], ARGV[1])
if mine then
  local accepted, token = string.match(mine, '^(%d+):([^:]+)')
  if token == ARGV[2] then
    return {0, tonumber(accepted)}
  end
end

-- The Redis server's clock, so every function instance judges the window alike.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now_ms < begin_ms then
  return {2, now_ms}
end
if now_ms > end_ms then
  return {3, now_ms}
end
if stock <= 0 then
  return {4, now_ms}
end
if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 then
  return {5, now_ms}
end

redis.call('DECR', KEYS[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], now_ms .. ':' .. ARGV[2])
return {0, now_ms}

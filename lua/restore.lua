-- Brings one voucher's Redis state in line with MySQL, atomically with the gate.
-- KEYS[1] seckill:stock:{v}, KEYS[2] seckill:order:{v}, KEYS[3] seckill:window:{v}, KEYS[4] seckill:pending:{v},
-- KEYS[5] seckill:returned:{v}, KEYS[6] seckill:cursor:{v}
-- ARGV[1] mode: "missing" (only if the stock key is gone: a lost cache), "repair" (always), "check" (write nothing)
-- ARGV[2] MySQL stock, ARGV[3] window begin (ms), ARGV[4] window end (ms)
-- ARGV[5] JSON array of the user ids holding an order, whatever its fate (paid,
--         payable, expired, cancelled: one order per user per voucher), and of those
--         whose order was failed NOT_ADMITTED (a draw's re-check)
-- ARGV[6] JSON array of the order ids MySQL has decided (confirmed or failed)
-- ARGV[7] JSON array of [userId, orderId, acceptedMs] of orders waiting in the
--         dead-letter queue: accepted, not yet in MySQL, their marks maybe lost
--         with Redis. A user without a mark gets one back (promised: the client
--         was told 202), so they count as outstanding.
-- ARGV[8] JSON array of the order ids MySQL has closed (expired or cancelled) or failed
--         NOT_ADMITTED: MySQL's stock counts their units back already (or never took
--         them), so each joins the returned set and a give_back still on its way for it
--         adds nothing.
-- ARGV[9] a draw's fields, JSON {"close": ms, "decided": ms, "moves": [[atMs, cursor], ...]}, or ''
--         for a race: the window's draw, close and decided (never moving back) and every
--         recorded move come back with the rest.
-- Reservations still pending and undecided in MySQL are outstanding: they keep
-- their stock and their user. So the expected state is
--   stock  = max(0, MySQL stock - outstanding)
--   buyers = confirmed users + outstanding users
-- A voucher whose stock key was gone (its state lost with Redis, marks included) is stamped
-- with the window's "rebuilt" field, the Redis server's time (ms) of this rebuild: an order
-- accepted before the loss may still be on its way, without a mark (seckill.press.orders.my_order).
-- Returns {applied (0/1), old stock (-1 if missing), expected stock, buyers to add, buyers to remove,
--          returns to record}.
local mode = ARGV[1]
local stored = redis.call('GET', KEYS[1])
local old_stock = tonumber(stored or '-1')
if redis.call('HEXISTS', KEYS[3], 'provisional') == 1 then
  old_stock = -1 -- preloaded by a creation that had not committed: not the gate's yet
end
if mode == 'missing' and old_stock >= 0 then
  return {0, old_stock, old_stock, 0, 0, 0}
end

local decided = {}
for _, id in ipairs(cjson.decode(ARGV[6])) do
  decided[tostring(id)] = true
end
local expected = {}
for _, user in ipairs(cjson.decode(ARGV[5])) do
  expected[tostring(user)] = true
end
local marks = {}
local pending = redis.call('HGETALL', KEYS[4])
for i = 1, #pending, 2 do
  marks[pending[i]] = pending[i + 1]
end
local remarked = {}
for _, order in ipairs(cjson.decode(ARGV[7] or '[]')) do
  local user, order_id, accepted = tostring(order[1]), tostring(order[2]), tostring(order[3])
  if not marks[user] and not decided[order_id] then
    marks[user] = make_mark(accepted, 'dlq', order_id, true)
    remarked[#remarked + 1] = user
  end
end
local outstanding = 0
for user, mark in pairs(marks) do
  local _, _, order_id = parse_mark(mark)
  if not (order_id and decided[order_id]) then
    outstanding = outstanding + 1
    expected[user] = true
  end
end
local new_stock = math.max(0, tonumber(ARGV[2]) - outstanding)

local to_add, to_remove = {}, {}
for user in pairs(expected) do
  if redis.call('SISMEMBER', KEYS[2], user) == 0 then
    to_add[#to_add + 1] = user
  end
end
for _, user in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if not expected[user] then
    to_remove[#to_remove + 1] = user
  end
end
local returns = {}
for _, id in ipairs(cjson.decode(ARGV[8] or '[]')) do
  if redis.call('SISMEMBER', KEYS[5], tostring(id)) == 0 then
    returns[#returns + 1] = tostring(id)
  end
end
if mode == 'check' then
  return {0, old_stock, new_stock, #to_add, #to_remove, #returns}
end

redis.call('SET', KEYS[1], new_stock)
for _, user in ipairs(remarked) do
  redis.call('HSET', KEYS[4], user, marks[user])
end
redis.call('HSET', KEYS[3], 'begin', ARGV[3], 'end', ARGV[4])
if not stored then
  local t = redis.call('TIME')
  redis.call('HSET', KEYS[3], 'rebuilt', string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
end
if (ARGV[9] or '') ~= '' then
  local draw = cjson.decode(ARGV[9])
  local decided = math.max(tonumber(redis.call('HGET', KEYS[3], 'decided') or '0'), draw.decided)
  redis.call('HSET', KEYS[3], 'draw', 1, 'close', tostring(draw.close), 'decided', string.format('%.0f', decided))
  for _, move in ipairs(draw.moves) do
    redis.call('ZADD', KEYS[6], tostring(move[1]), move[2])
  end
end
redis.call('HDEL', KEYS[3], 'provisional')
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[3])
-- In slices: Lua's unpack has a limit on the number of arguments.
for i = 1, #to_add, 1000 do
  redis.call('SADD', KEYS[2], unpack(to_add, i, math.min(i + 999, #to_add)))
end
for i = 1, #to_remove, 1000 do
  redis.call('SREM', KEYS[2], unpack(to_remove, i, math.min(i + 999, #to_remove)))
end
for i = 1, #returns, 1000 do
  redis.call('SADD', KEYS[5], unpack(returns, i, math.min(i + 999, #returns)))
end
return {1, old_stock, new_stock, #to_add, #to_remove, #returns}

-- Elects the one publisher of a change of a voucher's state at the edge (docs/edge.md).
-- KEYS[1] seckill:stock:{v}, KEYS[2] seckill:window:{v}, KEYS[3] seckill:edge:{v} (hash:
-- v the last version handed out, state the last state claimed), KEYS[4] seckill:cursor:{v}
-- (a draw's moves: member the cursor, score the ms it takes effect)
-- ARGV[1] voucher id, ARGV[2] '1' to get the claimed state back even when it has not
-- changed (the reconciler's sweep sends it again), else ''
-- Returns the message for the queue, the KVS value plus "voucherId", when this call
-- claimed a new state (or ARGV[2] asked for it); nil when nothing changed, or the gate
-- does not sell the voucher (missing, or provisional: its creation has not committed).
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
local window = redis.call('HMGET', KEYS[2], 'begin', 'end', 'provisional', 'draw')
local begin_ms, end_ms = tonumber(window[1] or ''), tonumber(window[2] or '')
if not stock or not begin_ms or not end_ms or window[3] then
  return nil
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Built by hand, not by cjson: the text is compared with the stored one, so its keys
-- must always come in the same order.
local state = string.format(
  '"begin":%.0f,"end":%.0f,"soldOut":%s,"stopped":%s',
  begin_ms, end_ms, tostring(stock <= 0), tostring(begin_ms == 0 and end_ms == 0))
if window[4] == '1' then
  -- A draw: the move in effect now and the later ones already decided, at most 8 (the
  -- edge needs no older one, and a KVS value holds at most 1 KB).
  local moves = redis.call('ZREVRANGEBYSCORE', KEYS[4], now_ms, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local later = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, #moves == 0 and 8 or 7)
  for i = 1, #later do
    moves[#moves + 1] = later[i]
  end
  local listed = {}
  for i = 1, #moves, 2 do
    listed[#listed + 1] = string.format('[%.0f,"%s"]', tonumber(moves[i + 1]), moves[i])
  end
  state = state .. ',"draw":true,"moves":[' .. table.concat(listed, ',') .. ']'
end
local claimed = redis.call('HMGET', KEYS[3], 'v', 'state')
local version = tonumber(claimed[1] or '')
if claimed[2] == state then
  if ARGV[2] ~= '1' then
    return nil
  end
else
  -- At least the Redis clock's milliseconds: a version handed out before Redis lost
  -- this hash is smaller, so the KVS still takes the new one.
  version = math.max((version or 0) + 1, now_ms)
  redis.call('HSET', KEYS[3], 'v', string.format('%.0f', version), 'state', state)
end
return string.format('{"v":%.0f,%s,"voucherId":%s}', version, state, ARGV[1])

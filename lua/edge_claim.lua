-- Elects the one publisher of a change of a voucher's state at the edge (docs/edge.md).
-- KEYS[1] seckill:stock:{v}, KEYS[2] seckill:window:{v} (a draw's also close and decided:
-- every move taking effect before it has been decided), KEYS[3] seckill:edge:{v} (hash:
-- v the last version handed out, state the last state claimed), KEYS[4] seckill:cursor:{v}
-- (a draw's moves: member the cursor, score the ms it takes effect)
-- ARGV[1] voucher id, ARGV[2] '1' to claim the state under a new version even when it has
-- not changed (the reconciler's sweep: a version above every one handed out before, so the
-- publisher can tell the store's entry older than this truth), else ''
-- ARGV[3] how long the hash outlives the sale's end, in ms (a stopped sale's: from now)
-- Returns the message for the queue, the KVS value plus "voucherId", when this call
-- claimed a state; nil when nothing changed (and ARGV[2] is ''), or the gate does not
-- sell the voucher (missing, or provisional: its creation has not committed).
local stock = tonumber(redis.call('GET', KEYS[1]) or '')
local window = redis.call('HMGET', KEYS[2], 'begin', 'end', 'provisional', 'draw', 'close', 'decided')
local begin_ms, end_ms = tonumber(window[1] or ''), tonumber(window[2] or '')
if not stock or not begin_ms or not end_ms or window[3] then
  return nil
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Built by hand, not by cjson: the text is compared with the stored one, so its keys
-- must always come in the same order.
local stopped = begin_ms == 0 and end_ms == 0
local state = string.format(
  '"begin":%.0f,"end":%.0f,"soldOut":%s,"stopped":%s',
  begin_ms, end_ms, tostring(stock <= 0), tostring(stopped))
if window[4] == '1' then
  -- A draw: the move in effect now and the later ones already decided, at most 16 (the
  -- edge needs no older one, and a KVS value holds at most 1 KB: 16 take about 800
  -- bytes). Past the 16th, the entry's decided stops at the first move it leaves out: it
  -- holds every move before (a paced move's later steps come with the clock's relays).
  local decided = tonumber(window[6] or '0')
  local moves = redis.call('ZREVRANGEBYSCORE', KEYS[4], now_ms, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local room = #moves == 0 and 16 or 15
  local later = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. now_ms, '+inf', 'WITHSCORES', 'LIMIT', 0, room + 1)
  if #later > 2 * room then
    decided = math.min(decided, tonumber(later[2 * room + 2]))
  end
  for i = 1, math.min(#later, 2 * room) do
    moves[#moves + 1] = later[i]
  end
  local listed = {}
  for i = 1, #moves, 2 do
    listed[#listed + 1] = string.format('[%.0f,"%s"]', tonumber(moves[i + 1]), moves[i])
  end
  state = state .. string.format(',"draw":true,"close":%.0f,"decided":%.0f,"moves":[', tonumber(window[5] or '0'), decided)
    .. table.concat(listed, ',') .. ']'
end
local claimed = redis.call('HMGET', KEYS[3], 'v', 'state')
if claimed[2] == state and ARGV[2] ~= '1' then
  return nil
end
-- At least the Redis clock's milliseconds: a version handed out before Redis lost this
-- hash (or rewound it) is smaller, so the KVS still takes the new one.
local version = math.max(tonumber(claimed[1] or '0') + 1, now_ms)
redis.call('HSET', KEYS[3], 'v', string.format('%.0f', version), 'state', state)
-- Long after its end nothing claims the sale again: the hash goes on its own.
redis.call('PEXPIREAT', KEYS[3], string.format('%.0f', (stopped and now_ms or end_ms) + tonumber(ARGV[3])))
return string.format('{"v":%.0f,%s,"voucherId":%s}', version, state, ARGV[1])

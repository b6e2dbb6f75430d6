-- Publishes a draw's recorded moves to the gate, and how far they are decided (docs/draw.md).
-- KEYS[1] seckill:cursor:{v} (member the cursor, score the ms it takes effect),
-- KEYS[2] seckill:window:{v}
-- ARGV[1] decided, epoch ms: every move taking effect before it is among the moves given
-- ARGV[2..] the moves: at, cursor, at, cursor, ...
-- In one script, so the window never says decided past a move the cursor lacks; decided
-- never moves back (a publish that read MySQL earlier may run later). A window Redis has
-- lost gets nothing: recovery brings it back, decided too. Returns the decided held, or nil.
for i = 2, #ARGV, 2 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  return nil
end
local decided = math.max(tonumber(redis.call('HGET', KEYS[2], 'decided') or '0'), tonumber(ARGV[1]))
redis.call('HSET', KEYS[2], 'decided', string.format('%.0f', decided))
return string.format('%.0f', decided)

-- Clears the pending mark once the database has decided an order, if the mark
-- is still that order's (a later reservation of the same user is left alone).
-- KEYS[1] seckill:pending:{v}
-- ARGV[1] user id, ARGV[2] order id
-- Returns 1 when cleared, 0 otherwise.
local accepted, _, order_id = parse_mark(redis.call('HGET', KEYS[1], ARGV[1]))
if not accepted or order_id ~= ARGV[2] then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1

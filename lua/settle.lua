-- Clears the pending marks of orders the database has decided, each only if the
-- mark is still that order's (a later reservation of the same user is left alone).
-- KEYS[1] seckill:pending:{v}
-- ARGV user id, order id, then more such pairs: one per decided order of voucher v
-- Returns how many marks were cleared.
local cleared = 0
for i = 1, #ARGV - 1, 2 do
  local accepted, _, order_id = parse_mark(redis.call('HGET', KEYS[1], ARGV[i]))
  if accepted and order_id == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
    cleared = cleared + 1
  end
end
return cleared

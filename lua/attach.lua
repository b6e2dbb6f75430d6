-- Records the order id on a reservation, if the reservation is still this request's.
-- KEYS[1] seckill:pending:{v}
-- ARGV[1] user id, ARGV[2] request token, ARGV[3] order id
-- Returns 1 when attached (or already attached to this id), 0 when the reservation
-- is gone, 2 when another request of the same user has taken it over.
local accepted, token, order_id = parse_mark(redis.call('HGET', KEYS[1], ARGV[1]))
if not accepted then
  return 0
end
if token ~= ARGV[2] then
  return 2
end
if order_id ~= '' then
  -- Attached already: true for a retry of the same call, false for any other id.
  return order_id == ARGV[3] and 1 or 0
end
redis.call('HSET', KEYS[1], ARGV[1], make_mark(accepted, token, ARGV[3]))
return 1

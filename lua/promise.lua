-- Marks a reservation's order as promised to the client (it is answered 202): from
-- then on reconciliation re-queues the order if it never reached the database,
-- instead of failing it. Whichever request of the user holds the mark, the order
-- id decides: a retry that resumed the same order promises the same thing.
-- KEYS[1] seckill:pending:{v}
-- ARGV[1] user id, ARGV[2] order id
-- Returns 1 when the mark carries this order (now promised), 0 when it does not
-- (already decided and cleared by the persister, or gone).
local accepted, token, order_id, promised = parse_mark(redis.call('HGET', KEYS[1], ARGV[1]))
if not accepted or order_id ~= ARGV[2] then
  return 0
end
if not promised then
  redis.call('HSET', KEYS[1], ARGV[1], make_mark(accepted, token, order_id, true))
end
return 1

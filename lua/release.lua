-- Gives a reservation back (stock +1, user out of the buyers set), idempotently
-- and only while the reservation still belongs to the request that made it.
-- KEYS[1] seckill:stock:{v}, KEYS[2] seckill:order:{v}, KEYS[3] seckill:pending:{v}
-- ARGV[1] user id, ARGV[2] request token
-- Returns 1 when released, 0 when there was nothing of this request's to release.
local accepted, token = parse_mark(redis.call('HGET', KEYS[3], ARGV[1]))
if not accepted or token ~= ARGV[2] then
  return 0
end
unreserve(KEYS[1], KEYS[2], KEYS[3], ARGV[1])
return 1

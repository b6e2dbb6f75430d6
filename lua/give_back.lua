-- Puts the unit of an expired or cancelled order back on sale, once per order:
-- MySQL has committed the return; this may run again (a retry, a lost reply).
-- KEYS[1] seckill:stock:{v}, KEYS[2] seckill:returned:{v}, KEYS[3] seckill:window:{v}
-- ARGV[1] order id
-- Returns 1 given back, 0 already back, -1 Redis does not hold the voucher (lost, or
-- provisional): its rebuild reads MySQL's stock, which counts the return already.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[3], 'provisional') == 1 then
  return -1
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('INCR', KEYS[1])
return 1

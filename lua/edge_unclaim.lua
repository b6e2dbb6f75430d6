-- Gives a claimed state up when its message could not be sent, so that the next
-- notice claims it again; only while the claim is still this one (same version).
-- KEYS[1] seckill:edge:{v}; ARGV[1] the version claimed
-- Returns 1 given up, 0 claimed again since (that claim's notice sends it).
if redis.call('HGET', KEYS[1], 'v') ~= ARGV[1] then
  return 0
end
redis.call('HDEL', KEYS[1], 'state')
return 1

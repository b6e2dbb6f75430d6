-- Raises the day's order-id counter to at least a floor, never lowers it.
-- After Redis lost its data, the counter starts again at 1; ids made in the same
-- second as ids already handed out would then repeat them.
-- KEYS[1] icr:order:<yyyy:MM:dd>
-- ARGV[1] the floor (the largest sequence MySQL holds for that day)
-- Returns the counter's value afterwards.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(ARGV[1])
if current < floor then
  redis.call('SET', KEYS[1], floor)
  return floor
end
return current

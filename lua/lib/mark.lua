-- Prepended to every script (seckill.infra.lua_scripts): the one builder and the one
-- parser of a reservation mark (docs/reservations.md):
-- "<acceptedMs>:<requestToken>:<orderId>[:promised]".

local function make_mark(accepted, token, order_id, promised)
  return accepted .. ':' .. token .. ':' .. order_id .. (promised and ':promised' or '')
end

-- Returns accepted, token, order id and whether promised; nil for a missing mark
-- (HGET's false) or anything else.
local function parse_mark(mark)
  if not mark then
    return nil
  end
  local accepted, token, order_id, state = string.match(mark, '^(%d+):([^:]+):(%d+)(.*)$')
  if not accepted or (state ~= '' and state ~= ':promised') then
    return nil
  end
  return accepted, token, order_id, state == ':promised'
end

-- Undoes the user's reservation: the mark deleted, the user out of
-- the buyers set, stock +1. The caller has checked that the mark is the one to release.
local function unreserve(stock_key, buyers_key, pending_key, user)
  redis.call('HDEL', pending_key, user)
  redis.call('SREM', buyers_key, user)
  redis.call('INCR', stock_key)
end

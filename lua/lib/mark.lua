-- Prepended to every script (seckill.infra.lua_scripts): the one builder and the one
-- parser of a reservation mark (docs/reservations.md):
-- "<acceptedMs>:<requestToken>[:<orderId>[:promised]]".

-- The mark of a reservation; order_id nil or '' for none (then never promised).
local function make_mark(accepted, token, order_id, promised)
  if not order_id or order_id == '' then
    return accepted .. ':' .. token
  end
  return accepted .. ':' .. token .. ':' .. order_id .. (promised and ':promised' or '')
end

-- Returns accepted, token, order id ('' when none) and whether promised; nil for
-- a missing mark (HGET's false) or anything else.
local function parse_mark(mark)
  if not mark then
    return nil
  end
  local accepted, token, rest = string.match(mark, '^(%d+):([^:]+)(.*)$')
  if not accepted then
    return nil
  end
  if rest == '' then
    return accepted, token, '', false
  end
  local order_id, state = string.match(rest, '^:(%d+)(.*)$')
  if not order_id or (state ~= '' and state ~= ':promised') then
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

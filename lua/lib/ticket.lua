-- Prepended to every script (seckill.infra.lua_scripts): a draw's tickets and cursors
-- are 17 lowercase hex characters (docs/draw.md). Compared as two exact numbers (9 and
-- 8 hex digits: 36 and 32 bits, exact in Lua's doubles), not with Lua's <, which
-- compares strings by the server's locale.
local function ticket_below(ticket, cursor)
  local high, cursor_high = tonumber(string.sub(ticket, 1, 9), 16), tonumber(string.sub(cursor, 1, 9), 16)
  if high ~= cursor_high then
    return high < cursor_high
  end
  return tonumber(string.sub(ticket, 10), 16) < tonumber(string.sub(cursor, 10), 16)
end

-- One health transition, atomically: the rule of health::apply (spec/decisions.md),
-- transcribed. KEYS[1]: the route's record (a hash under its provider's hash tag).
-- ARGV: kind (succeeded | cool | retire | restore), until (ms, for cool), reason.
-- Fields: s = cooling | retired (absent: ready), u = until, r = reason; the breaker's
-- field b is left alone. Returns {old s, u, r, new s, u, r}, '' for absent.
local k = KEYS[1]
local kind, until_, reason = ARGV[1], ARGV[2], ARGV[3]
local v = redis.call('HMGET', k, 's', 'u', 'r')
local os, ou, orr = v[1] or '', v[2] or '', v[3] or ''
local ns, nu, nr = os, ou, orr
if kind == 'restore' then
  ns, nu, nr = '', '', ''
elseif kind == 'retire' then
  ns, nu, nr = 'retired', '', reason
elseif os == 'retired' then
  -- a success never un-retires; a cooling never shortens a retirement
elseif kind == 'succeeded' then
  ns, nu, nr = '', '', ''
elseif kind == 'cool' then
  if not (os == 'cooling' and tonumber(ou) and tonumber(ou) > tonumber(until_)) then
    -- the later until wins
    ns, nu, nr = 'cooling', until_, reason
  end
else
  return redis.error_reply('unknown transition ' .. kind)
end
if ns ~= os or nu ~= ou or nr ~= orr then
  if ns == '' then
    redis.call('HDEL', k, 's', 'u', 'r')
  elseif ns == 'retired' then
    redis.call('HDEL', k, 'u')
    redis.call('HSET', k, 's', ns, 'r', nr)
  else
    redis.call('HSET', k, 's', ns, 'u', nu, 'r', nr)
  end
end
return {os, ou, orr, ns, nu, nr}

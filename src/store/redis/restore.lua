-- Writes back what a process knows of one route after the store lost its data, only
-- where the record is missing it (another process may have written it back already).
-- KEYS[1]: the route's record. ARGV: retired reason ('' for not retired), the breaker's
-- encoded state ('' for none). Returns how many fields were written back.
local k = KEYS[1]
local reason, breaker = ARGV[1], ARGV[2]
local n = 0
if reason ~= '' and redis.call('HEXISTS', k, 's') == 0 then
  redis.call('HSET', k, 's', 'retired', 'r', reason)
  n = n + 1
end
if breaker ~= '' and redis.call('HEXISTS', k, 'b') == 0 then
  redis.call('HSET', k, 'b', breaker)
  n = n + 1
end
return n

-- One settle, atomically: admission::Bucket's true_up then lower_to over the buckets of
-- one reservation, transcribed, and the per-minute usage counters. KEYS[1]: the
-- provider's bucket hash; KEYS[2]: its usage hash for the minute of `now` (same hash
-- tag), field NAME|DIM, what was actually spent.
-- A bucket missing here that the caller has seen (a view) was lost by the store: it is
-- re-created at the view refilled to `now`, never full (see acquire.lua).
-- ARGV: now, headroom, usage ttl (s), then per bucket: field, capacity, reserved,
-- actual, remaining (-1: the provider sent no count for this dimension), view level,
-- view at (empty strings: never seen).
-- Returns, as strings: lost (1 when a bucket seen before was missing), then per bucket
-- its level and at as this call leaves them.
local k, usage = KEYS[1], KEYS[2]
local now, headroom, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function f(x) return string.format('%.17g', x) end
local n = (#ARGV - 3) / 7
local lost = 0
local out = {}
for i = 0, n - 1 do
  local b = 4 + 7 * i
  local field = ARGV[b]
  local capacity, reserved_cost = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local actual, remaining = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local view_level, view_at = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local v = redis.call('HMGET', k, field .. ':l', field .. ':a', field .. ':r')
  local level, at, reserved = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) or 0
  local rate = capacity / 60000.0
  if level == nil or at == nil then
    if view_level ~= nil and view_at ~= nil then
      level = math.min(view_level + math.max(now - view_at, 0) * rate, capacity)
      lost = 1
    else
      level = capacity
    end
    at = now
  end
  -- true_up: refill, refund the unused part (or charge the overrun), never above capacity
  if now > at then
    level = math.min(level + (now - at) * rate, capacity)
    at = now
  end
  level = math.min(level + reserved_cost - actual, capacity)
  -- lower_to: the provider's own count, times headroom, never raising
  if remaining >= 0 then level = math.min(level, remaining * headroom) end
  redis.call('HSET', k, field .. ':l', f(level), field .. ':a', f(at), field .. ':r', f(math.max(reserved - reserved_cost, 0)))
  if actual > 0 then redis.call('HINCRBYFLOAT', usage, field, f(actual)) end
  table.insert(out, f(level))
  table.insert(out, f(at))
end
redis.call('EXPIRE', usage, ttl)
table.insert(out, 1, tostring(lost))
return out

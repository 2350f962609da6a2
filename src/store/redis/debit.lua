-- What a process admitted from its local share while the store failed, taken off the
-- shared buckets once it answers again, atomically: so the fleet's buckets reflect the
-- outage's spend, and the refill after it is not handed out a second time. KEYS[1]: the
-- provider's bucket hash. A bucket missing that the caller has seen was lost by the
-- store: re-created at the view refilled to `now` (see acquire.lua), then debited.
-- ARGV: now, then per bucket: field, capacity, amount, view level, view at (empty
-- strings: never seen).
-- Returns, as strings: lost, then per bucket its level and at as this call leaves them.
local k = KEYS[1]
local now = tonumber(ARGV[1])
local function f(x) return string.format('%.17g', x) end
local n = (#ARGV - 1) / 5
local lost = 0
local out = {}
for i = 0, n - 1 do
  local b = 2 + 5 * i
  local field = ARGV[b]
  local capacity, amount = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local view_level, view_at = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local v = redis.call('HMGET', k, field .. ':l', field .. ':a')
  local level, at = tonumber(v[1]), tonumber(v[2])
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
  if now > at then
    level = math.min(level + (now - at) * rate, capacity)
    at = now
  end
  level = level - amount
  redis.call('HSET', k, field .. ':l', f(level), field .. ':a', f(at))
  table.insert(out, f(level))
  table.insert(out, f(at))
end
table.insert(out, 1, tostring(lost))
return out

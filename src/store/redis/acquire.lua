-- One acquire, atomically: admission::Bucket's admits / take / wait_ms over every bucket
-- that covers a route, transcribed. All of them belong to one provider: KEYS[1] is that
-- provider's bucket hash (under its hash tag). A bucket's fields: NAME|DIM:l (level),
-- NAME|DIM:a (at, ms), NAME|DIM:r (reserved by calls in flight). A bucket never stored
-- starts full at `now`.
-- ARGV: now, reserve share (0 for interactive, else the interactive floor), take (1: take
-- the cost when it fits; 0: only say whether and when it would), then per bucket: field,
-- capacity, cost.
-- Returns {1} when admitted (every bucket taken), {2} when it would be admitted now (take
-- 0, nothing written), else {0, wait_ms} (-1: never fits).
local k = KEYS[1]
local now, share, take = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function f(x) return string.format('%.17g', x) end
local n = (#ARGV - 3) / 3
local rows = {}
local admits = true
for i = 0, n - 1 do
  local field = ARGV[4 + 3 * i]
  local capacity, cost = tonumber(ARGV[5 + 3 * i]), tonumber(ARGV[6 + 3 * i])
  local v = redis.call('HMGET', k, field .. ':l', field .. ':a', field .. ':r')
  local level, at, reserved = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]) or 0
  if level == nil or at == nil then level, at = capacity, now end
  local rate = capacity / 60000.0
  local dt = math.max(now - at, 0)
  local level_at = math.min(level + dt * rate, capacity)
  local reserve = share * capacity
  if not (level_at - cost >= reserve) then admits = false end
  rows[i + 1] = {field, capacity, cost, level, at, reserved, level_at, reserve, rate}
end
if admits and take == 0 then return {2} end
if admits then
  for _, r in ipairs(rows) do
    local field, cost, level, at, reserved, level_at = r[1], r[3], r[4], r[5], r[6], r[7]
    if now > at then level, at = level_at, now end
    level = level - cost
    redis.call('HSET', k, field .. ':l', f(level), field .. ':a', f(at), field .. ':r', f(reserved + cost))
  end
  return {1}
end
local longest = 0
for _, r in ipairs(rows) do
  local capacity, cost, level_at, reserve, rate = r[2], r[3], r[7], r[8], r[9]
  local need = cost + reserve
  if need > capacity then return {0, -1} end
  local short = need - level_at
  if short > 0 then
    if rate <= 0 then return {0, -1} end
    longest = math.max(longest, math.ceil(short / rate))
  end
end
return {0, longest}

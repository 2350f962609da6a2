-- One acquire, atomically: admission::Bucket's admits / take / wait_ms over every bucket
-- that covers a route, transcribed. All of them belong to one provider: KEYS[1] is that
-- provider's bucket hash (under its hash tag). A bucket's fields: NAME|DIM:l (level),
-- NAME|DIM:a (at, ms), NAME|DIM:r (reserved by calls in flight).
-- A bucket never stored starts full at `now`, unless the caller has seen it before (a
-- view: level and at, else two empty strings): then the store lost it (a restart
-- without persistence, a failover to a replica that lagged, FLUSHALL), and it starts at
-- the caller's view refilled to `now`, never full, and the reply says so (`lost`).
-- ARGV: now, reserve share (0 for interactive, else the interactive floor), take (1: take
-- the cost when it fits; 0: only say whether and when it would), then per bucket: field,
-- capacity, cost, view level, view at.
-- Returns, as strings (a Lua number would be truncated to an integer): code (1 admitted,
-- every bucket taken; 2 it would be admitted now, take 0, nothing written; 0 refused),
-- wait_ms (refused: -1 never fits), lost (1 when a bucket seen before was missing), then
-- per bucket its level and at as this call leaves them.
local k = KEYS[1]
local now, share, take = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local function f(x) return string.format('%.17g', x) end
local n = (#ARGV - 3) / 5
local rows = {}
local admits = true
local lost = 0
for i = 0, n - 1 do
  local b = 4 + 5 * i
  local field = ARGV[b]
  local capacity, cost = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local view_level, view_at = tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
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
  local dt = math.max(now - at, 0)
  local level_at = math.min(level + dt * rate, capacity)
  local reserve = share * capacity
  if not (level_at - cost >= reserve) then admits = false end
  rows[i + 1] = {field, capacity, cost, level, at, reserved, level_at, reserve, rate}
end
local function levels(out, taken)
  for _, r in ipairs(rows) do
    local level_at, cost = r[7], r[3]
    if taken then level_at = level_at - cost end
    table.insert(out, f(level_at))
    table.insert(out, f(math.max(now, r[5])))
  end
  return out
end
if admits and take == 0 then return levels({'2', '0', tostring(lost)}, false) end
if admits then
  for _, r in ipairs(rows) do
    local field, cost, level, at, reserved, level_at = r[1], r[3], r[4], r[5], r[6], r[7]
    if now > at then level, at = level_at, now end
    level = level - cost
    redis.call('HSET', k, field .. ':l', f(level), field .. ':a', f(at), field .. ':r', f(reserved + cost))
  end
  return levels({'1', '0', tostring(lost)}, true)
end
local longest = 0
for _, r in ipairs(rows) do
  local capacity, cost, level_at, reserve, rate = r[2], r[3], r[7], r[8], r[9]
  local need = cost + reserve
  if need > capacity then return levels({'0', '-1', tostring(lost)}, false) end
  local short = need - level_at
  if short > 0 then
    if rate <= 0 then return levels({'0', '-1', tostring(lost)}, false) end
    longest = math.max(longest, math.ceil(short / rate))
  end
end
return levels({'0', string.format('%d', longest), tostring(lost)}, false)

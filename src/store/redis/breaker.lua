-- One breaker step, atomically: breaker::step (admit or record), transcribed. KEYS[1]:
-- the route's record; its field b holds breaker::State::encode's form
-- (c:CONSECUTIVE:RECENT, o:UNTIL:OPEN_MS, h:TRIALS:OPEN_MS; absent: c:0:).
-- ARGV: op (admit | record), now, trial (0/1), ok (0/1), consecutive_failures,
-- failure_rate ('' for none), window, open_ms, max_open_ms, half_open_trials.
-- Returns {answer, instant}: yes | trial | busy | open UNTIL (admit); opened UNTIL |
-- none (record).
local k = KEYS[1]
local op, now = ARGV[1], tonumber(ARGV[2])
local trial, ok = ARGV[3] == '1', ARGV[4] == '1'
local cf, rate = tonumber(ARGV[5]), tonumber(ARGV[6])
local window = math.max(tonumber(ARGV[7]), 1)
local open_ms, max_open = tonumber(ARGV[8]), tonumber(ARGV[9])
local trials_max = math.max(tonumber(ARGV[10]), 1)
local function n(x) return string.format('%d', x) end
local function save(text)
  if text == 'c:0:' then redis.call('HDEL', k, 'b') else redis.call('HSET', k, 'b', text) end
end
local kind, a, b = string.match(redis.call('HGET', k, 'b') or '', '^(%a):(%-?%d+):(.*)$')
if not kind or (kind == 'c' and string.find(b, '[^01]')) or (kind ~= 'c' and not tonumber(b)) then
  -- unreadable or absent: a fresh breaker (health still guards the route)
  kind, a, b = 'c', '0', ''
end
a = tonumber(a)
if op == 'admit' then
  if kind == 'o' then
    if now < a then return {'open', n(a)} end
    kind, a = 'h', 0
  end
  if kind == 'c' then return {'yes', '0'} end
  if a < trials_max then
    save('h:' .. n(a + 1) .. ':' .. b)
    return {'trial', '0'}
  end
  return {'busy', '0'}
elseif op == 'record' then
  if kind == 'h' and trial then
    if ok then
      save('c:0:')
      return {'none', '0'}
    end
    local nxt = math.min(tonumber(b) * 2, max_open)
    local u = now + nxt
    save('o:' .. n(u) .. ':' .. n(nxt))
    return {'opened', n(u)}
  elseif kind == 'c' then
    local consecutive = 0
    if not ok then consecutive = a + 1 end
    local bits = b .. (ok and '1' or '0')
    if #bits > window then bits = string.sub(bits, #bits - window + 1) end
    local _, failures = string.gsub(bits, '0', '0')
    local by_count = cf > 0 and consecutive >= cf
    local by_rate = rate ~= nil and #bits >= window and failures / #bits >= rate
    if by_count or by_rate then
      local u = now + open_ms
      save('o:' .. n(u) .. ':' .. n(open_ms))
      return {'opened', n(u)}
    end
    save('c:' .. n(consecutive) .. ':' .. bits)
    return {'none', '0'}
  end
  -- a non-trial result while open or half-open changes nothing
  return {'none', '0'}
end
return redis.error_reply('unknown breaker op ' .. op)

-- Stores one conversation of the Responses API (store/conversations.rs), bounded.
-- KEYS[1]: the conversation's key; KEYS[2]: the index of every stored conversation (a
-- sorted set, scored by the instant it was stored); KEYS[3]: each stored conversation's
-- size in bytes (a hash), whose field `total` is their sum. All carry one hash tag, so
-- on a cluster they share a slot and this script runs on one node.
-- ARGV: body, ttl_ms, now_ms, max (conversations kept), max_total (their bytes).
local ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3])
local max, max_total = tonumber(ARGV[4]), tonumber(ARGV[5])
local function forget(key)
  local size = tonumber(redis.call('HGET', KEYS[3], key) or '0')
  redis.call('HDEL', KEYS[3], key)
  redis.call('HINCRBY', KEYS[3], 'total', -size)
  redis.call('ZREM', KEYS[2], key)
  redis.call('DEL', key)
end
-- A conversation stored again (the same id) is counted once.
if redis.call('ZSCORE', KEYS[2], KEYS[1]) then
  forget(KEYS[1])
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now, KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], #ARGV[1])
redis.call('HINCRBY', KEYS[3], 'total', #ARGV[1])
-- Conversations Redis has already expired.
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - ttl)) do
  forget(key)
end
-- Past either bound the oldest go first.
while redis.call('ZCARD', KEYS[2]) > max
  or tonumber(redis.call('HGET', KEYS[3], 'total') or '0') > max_total do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  forget(oldest)
end
-- The index lives as long as its newest conversation.
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return redis.call('ZCARD', KEYS[2])

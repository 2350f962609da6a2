-- Stores one conversation of the Responses API (store/conversations.rs), bounded.
-- KEYS[1]: the conversation's key; KEYS[2]: the index of every stored conversation
-- (a sorted set, scored by the instant it was stored). Both carry one hash tag, so
-- on a cluster they share a slot and this script runs on one node.
-- ARGV: body, ttl_ms, now_ms, max (how many conversations the fleet keeps).
local ttl, now, max = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now, KEYS[1])
-- Entries whose conversation Redis has already expired.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - ttl)
local n = redis.call('ZCARD', KEYS[2])
if n > max then
  -- Past the bound the oldest go first.
  local oldest = redis.call('ZRANGE', KEYS[2], 0, n - max - 1)
  for _, key in ipairs(oldest) do
    redis.call('DEL', key)
  end
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - max - 1)
end
-- The index lives as long as its newest conversation.
redis.call('PEXPIRE', KEYS[2], ttl)
return n

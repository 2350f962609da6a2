-- The epoch of one provider's keys: a value that changes only when the store loses its
-- data. KEYS[1]: poolctl:{PROVIDER}:epoch. ARGV[1]: a fresh value, stored when there is
-- none (the first process to look, or the first after a loss). Returns the epoch.
local v = redis.call('GET', KEYS[1])
if v then return v end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]

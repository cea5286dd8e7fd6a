-- Acquire (or re-enter) a reentrant lock. Redisson-compatible.
-- KEYS[1]  lock name (a hash: field = owner, value = hold count)
-- ARGV[1]  lease in milliseconds (the key's new TTL)
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- Returns nil when the caller now holds the lock, otherwise the holder's PTTL
-- in milliseconds (-1 when the holder's key has no TTL).
if (redis.call('exists', KEYS[1]) == 0)
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])

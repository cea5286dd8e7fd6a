-- Acquire (or re-enter) the read lock of a read-write lock. Redisson-
-- compatible (RedissonReadLock). Uses lua/rw_lib.lua, prepended when loaded.
-- KEYS[1]  lock name N
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  reader field "<client-id>:<thread-id>" (its write field is
--          "<ARGV[2]>:write")
-- ARGV[3]  "1" when the caller holds no read hold of its own yet: the count
--          is set to 1 rather than incremented (as lua/acquire.lua).
-- Granted in read mode, on a free lock, or in write mode to the writer
-- itself (a downgrade). Each hold gets its lease key (see rw_lib.lua); the
-- hash's TTL only grows.
-- Returns nil when the caller now holds a read hold, else the PTTL of the
-- holder's key (-1: no TTL). A key that is not a read-write lock (a plain
-- lock, anything else) is never written: it answers as held.
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == false and redis.call('exists', KEYS[1]) == 1 then
  return redis.call('pttl', KEYS[1])
end
if mode == false or mode == 'read' or (mode == 'write' and
    redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1) then
  if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
  end
  local index = 1
  if ARGV[3] == '1' then
    redis.call('hset', KEYS[1], ARGV[2], 1)
  else
    index = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  end
  redis.call('set', read_timeout_key(KEYS[1], ARGV[2], index), 1,
      'px', ARGV[1])
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  return nil
end
return redis.call('pttl', KEYS[1])

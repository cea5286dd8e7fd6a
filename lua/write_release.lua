-- Release one write hold of a read-write lock. Redisson-compatible. Uses
-- lua/lock_lib.lua and lua/rw_lib.lua, prepended when loaded.
-- KEYS[1]  lock name N
-- KEYS[2]  channel "redisson_rwlock:{N}"
-- ARGV[1]  read-unlock message ("1": wakes every waiter)
-- ARGV[2]  lease in milliseconds to set when write holds remain; "0" keeps
--          the TTL
-- ARGV[3]  writer field "<client-id>:<thread-id>:write"
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller holds no write hold, 0 when it still holds
-- some, 1 when that was its last: the lock is then free, or in read mode
-- when the caller still has read holds (a downgrade), and either way the
-- message is published, since readers may now enter (Redisson publishes on
-- a free lock only); an UNPUBLISHED error when Redis refused that.
local publish = publish_command(ARGV[4])  -- raises before any write
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or count == nil then
  return nil
end
-- Never refused for memory: each path starts with a write that Redis lets
-- through at maxmemory (see release_one() in lua/lock_lib.lua).
if count > 1 then
  if tonumber(ARGV[2]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
  else
    keep_ttl(KEYS[1])
  end
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  return 0
end
write_drop(KEYS[1], ARGV[3])  -- HDEL first
return publish_unlock(KEYS[2], ARGV[1], publish) or 1

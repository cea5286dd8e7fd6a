-- Release one write hold of a read-write lock. Redisson-compatible. Uses
-- lua/lock_lib.lua and lua/rw_lib.lua, inserted at the "-- @helpers" line
-- when loaded.
-- KEYS[1]  lock name N
-- KEYS[2]  channel "redisson_rwlock:{N}"
-- ARGV[1]  read-unlock message ("1": wakes every waiter)
-- ARGV[2]  lease in milliseconds to raise the TTL to when write holds
--          remain (never cut: see below); "0" keeps the TTL
-- ARGV[3]  writer field "<client-id>:<thread-id>:write"
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller holds no write hold, 0 when it still holds
-- some, 1 when that was its last: the lock is then free, or in read mode
-- when the caller still has read holds (a downgrade), and either way the
-- message is published, since readers may now enter (Redisson publishes on
-- a free lock only); an UNPUBLISHED error when Redis refused that.
-- The fast path, before the helpers are defined (so that it creates no Lua
-- closures): the writer's last write hold with no read hold of its own
-- (HMGET of its count and 'mode', HLEN: 'mode' and the writer's field
-- alone). The general path below (the specification) would delete the field
-- and then the hash (write_drop()): here one DEL (a write Redis never refuses
-- for memory), then the message (as publish_unlock()). Anything else falls
-- through, nothing written.
if ARGV[4] == 'publish' or ARGV[4] == 'spublish' then
  local held = redis.call('hmget', KEYS[1], ARGV[3], 'mode')
  if held[1] == '1' and held[2] == 'write'
      and redis.call('hlen', KEYS[1]) == 2 then
    redis.call('del', KEYS[1])
    local published = redis.pcall(ARGV[4], KEYS[2], ARGV[1])
    if type(published) == 'table' then
      return redis.error_reply('UNPUBLISHED ' .. published.err)
    end
    return 1
  end
end

-- @helpers

-- The general path.
local publish = publish_command(ARGV[4])  -- raises before any write
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or count == nil then
  return nil
end
-- Never refused for memory: each path starts with a write that Redis lets
-- through at maxmemory (see release_one() in lua/lock_lib.lua).
if count > 1 then
  -- Only raised: in write mode the hash's TTL is also the lease of the
  -- writer's own read holds (a downgrade), which may end later.
  if tonumber(ARGV[2]) > 0
      and redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('pexpire', KEYS[1], ARGV[2])
  else
    keep_ttl(KEYS[1])
  end
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  return 0
end
write_drop(KEYS[1], ARGV[3])  -- HDEL first
return publish_unlock(KEYS[2], ARGV[1], publish) or 1

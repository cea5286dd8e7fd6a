-- Release one read hold of a read-write lock. Redisson-compatible. Uses
-- lua/lock_lib.lua and lua/rw_lib.lua, inserted at the "-- @helpers" line
-- when loaded.
-- KEYS[1]  lock name N
-- KEYS[2]  channel "redisson_rwlock:{N}"
-- ARGV[1]  unlock message ("0": wakes one waiter per client)
-- ARGV[2]  lease in milliseconds for the caller's remaining read holds; "0"
--          keeps their leases (the released hold's, if longer, passing to
--          the hold left on top: see below)
-- ARGV[3]  reader field "<client-id>:<thread-id>"
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller holds no read hold, 0 when it still holds
-- some, 1 when that was its last (the lock may still be held by other
-- readers or by the caller's write hold). When the lock became free (see
-- read_settle()), the unlock message is published; when it now ends earlier
-- (the released hold had the longest lease), the read-unlock message "1",
-- which wakes every waiter to re-check; an UNPUBLISHED error when Redis
-- refused that.
-- The fast path, before the helpers are defined (so that it creates no Lua
-- closures): the last read hold of the only reader in read mode (HMGET of
-- its count and 'mode', HLEN: 'mode' and the reader's field alone). The
-- general path below (the specification) would delete the hold's lease key,
-- the field, and then, no read lease being left, the hash: here one DEL of
-- the lease key and the hash (a write Redis never refuses for memory), then
-- the unlock message (as publish_unlock()). Anything else falls through,
-- nothing written.
if ARGV[4] == 'publish' or ARGV[4] == 'spublish' then
  local held = redis.call('hmget', KEYS[1], ARGV[3], 'mode')
  if held[1] == '1' and held[2] == 'read'
      and redis.call('hlen', KEYS[1]) == 2 then
    local prefix = KEYS[1]
    if not string.find(prefix, '{', 1, true) then
      prefix = '{' .. prefix .. '}'
    end
    redis.call('del', prefix .. ':' .. ARGV[3] .. ':rwlock_timeout:1',
        KEYS[1])
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
-- Not a read-write lock (no "mode"): not a read hold of ours either.
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if redis.call('hget', KEYS[1], 'mode') == false or count == nil then
  return nil
end
local released = read_timeout_key(KEYS[1], ARGV[3], count)
local left = count - 1
-- With the leases kept, the released hold's lease may outlast every one
-- left (a re-entry with a longer lease: the client keeps the later end, and
-- read_settle() below cuts the hash to the longest lease key): hold `left`
-- then takes it over, made again should its own have expired. (Redisson's
-- unlock deletes key `count` too; the keys left are as it writes them.)
local carried = -2
if left > 0 and tonumber(ARGV[2]) <= 0 then
  carried = redis.call('pttl', released)
end
-- The released hold's lease key goes first: a write that Redis never
-- refuses for memory (see release_one() in lua/lock_lib.lua).
redis.call('del', released)
if left <= 0 then
  redis.call('hdel', KEYS[1], ARGV[3])
else
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  if tonumber(ARGV[2]) > 0 then
    for j = left, 1, -1 do
      redis.call('set', read_timeout_key(KEYS[1], ARGV[3], j), 1,
          'px', ARGV[2])
    end
  elseif carried > 0 then
    local kept = read_timeout_key(KEYS[1], ARGV[3], left)
    if redis.call('pttl', kept) < carried then
      redis.call('set', kept, 1, 'px', carried)
    end
  end
end
local result = 0
if left <= 0 then
  result = 1
end
local settled = read_settle(KEYS[1])
if settled == 'shortened' then
  return publish_unlock(KEYS[2], '1', publish) or result  -- every waiter
elseif settled then
  return publish_unlock(KEYS[2], ARGV[1], publish) or result
end
return result

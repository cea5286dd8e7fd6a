-- Acquire (or re-enter) the read lock of a read-write lock. Redisson-
-- compatible (RedissonReadLock). Uses lua/shape_lib.lua and lua/rw_lib.lua,
-- inserted at the "-- @helpers" line when loaded.
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
-- holder's key (-1: no TTL). A NOTALOCK error, and nothing written, when the
-- key holds anything but a read-write lock (a plain or fair lock included:
-- one name is one lock type). A failed call leaves nothing behind: the hold's
-- lease key is written first, the hash's lease before its count where the
-- hash exists, and a hash this script made is deleted again (with the lease
-- key) should its lease fail (e.g. PEXPIRE refused by an ACL).
-- The fast path, before the helpers are defined (so that it creates no Lua
-- closures): a free name (EXISTS) is taken as the general path below (the
-- specification) takes it: the hold's lease key (read_timeout_key(), SET PX),
-- then the hash (HSET), then its lease (PEXPIRE; should that fail, both keys
-- are deleted again, as lease_new_lock() does). Anything else falls through,
-- nothing written. (Not for a re-entry: see NOTHELD.)
-- A NOTHELD error, and nothing written, for a re-entry (ARGV[3] "0") that
-- finds no read hold of this owner: the hold was lost (its lease ran out,
-- or the key was deleted or force-released); taking the lock anew would
-- hide that (see lua/acquire.lua).
-- A free name whose fair lock has a queue goes to the general path (see
-- fair_queue_waits() in lua/shape_lib.lua).
if ARGV[3] ~= '0' then
  local prefix = KEYS[1]
  if not string.find(prefix, '{', 1, true) then
    prefix = '{' .. prefix .. '}'
  end
  if redis.call('exists', KEYS[1], 'redisson_lock_queue:' .. prefix) == 0 then
    local lease_key = prefix .. ':' .. ARGV[2] .. ':rwlock_timeout:1'
    redis.call('set', lease_key, 1, 'px', ARGV[1])
    redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
    local set = redis.pcall('pexpire', KEYS[1], ARGV[1])
    if type(set) == 'table' then
      redis.call('del', KEYS[1], lease_key)
      return set
    end
    return nil
  end
end

-- @helpers

-- The general path.
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) == 'table' then
  return not_this_type(KEYS[1], 'read-write lock')  -- a string, a list...
end
if ARGV[3] == '0' and (mode == false or
    redis.call('hexists', KEYS[1], ARGV[2]) == 0) then
  return redis.error_reply('NOTHELD this owner no longer holds the lock ' ..
      '(its lease ran out, or it was deleted or force-released): the ' ..
      're-entry found it lost; nothing was written')
end
if mode == false then
  if redis.call('exists', KEYS[1]) == 1 then
    return not_this_type(KEYS[1], 'read-write lock')
  end
  if fair_queue_waits(KEYS[1]) then
    return fair_queue_refusal()
  end
  local lease_key = read_timeout_key(KEYS[1], ARGV[2], 1)
  redis.call('set', lease_key, 1, 'px', ARGV[1])
  redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
  return lease_new_lock(KEYS[1], ARGV[1], lease_key)
end
if mode == 'read' or (mode == 'write' and
    redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1) then
  local index = 1
  if ARGV[3] ~= '1' then
    index = tonumber(redis.call('hget', KEYS[1], ARGV[2]) or '0') + 1
  end
  redis.call('set', read_timeout_key(KEYS[1], ARGV[2], index), 1,
      'px', ARGV[1])
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  redis.call('hset', KEYS[1], ARGV[2], index)
  return nil
end
return redis.call('pttl', KEYS[1])

-- Acquire (or re-enter) the write lock of a read-write lock. Redisson-
-- compatible (RedissonWriteLock). Uses lua/shape_lib.lua, inserted at the
-- "-- @helpers" line when loaded.
-- KEYS[1]  lock name N
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  writer field "<client-id>:<thread-id>:write"
-- ARGV[3]  "1" when the caller holds no write hold of its own yet: the count
--          is set to 1 rather than incremented (as lua/acquire.lua).
-- Granted on a free lock, or to the writer itself (re-entry); never in read
-- mode, not even to a reader that is the only one (no upgrade). The hash's
-- TTL only grows.
-- Returns nil when the caller now holds the write lock, else the PTTL of the
-- holder's key (-1: no TTL). A NOTALOCK error, and nothing written, when the
-- key holds anything but a read-write lock (a plain or fair lock included:
-- one name is one lock type). A failed call leaves nothing behind: the lease
-- goes before the count where the hash exists, and a hash this script made
-- is deleted again should its lease fail (e.g. PEXPIRE refused by an ACL).
-- A NOTHELD error, and nothing written, for a re-entry (ARGV[3] "0") that
-- finds no write hold of this owner: the hold was lost (its lease ran out,
-- or the key was deleted or force-released); taking the lock anew would
-- hide that (see lua/acquire.lua).
-- The fast path, before the helpers are defined (so that it creates no Lua
-- closures): a free name (EXISTS) is taken as the general path below (the
-- specification) takes it: HSET, then PEXPIRE (should that fail, the hash is
-- deleted again, as lease_new_lock() does). Anything else falls through,
-- nothing written. (Not for a re-entry: see NOTHELD.)
-- A free name whose fair lock has a queue goes to the general path (see
-- fair_queue_waits() in lua/shape_lib.lua).
if ARGV[3] ~= '0' then
  local queue = KEYS[1]
  if not string.find(queue, '{', 1, true) then
    queue = '{' .. queue .. '}'
  end
  if redis.call('exists', KEYS[1], 'redisson_lock_queue:' .. queue) == 0 then
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
    local set = redis.pcall('pexpire', KEYS[1], ARGV[1])
    if type(set) == 'table' then
      redis.call('del', KEYS[1])
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
if ARGV[3] == '0' and not (mode == 'write' and
    redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
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
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  return lease_new_lock(KEYS[1], ARGV[1])
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
    redis.call('pexpire', KEYS[1], ARGV[1])
  end
  if ARGV[3] == '1' then
    redis.call('hset', KEYS[1], ARGV[2], 1)
  else
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
  end
  return nil
end
return redis.call('pttl', KEYS[1])

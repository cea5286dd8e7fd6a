-- Release one hold of a fair lock. Redisson-compatible (RFairLock): when the
-- lock becomes free, the unlock message goes to the waiter at the head of
-- the queue only, on its own channel "<channel>:<owner>", so one release
-- wakes one waiter, in whichever process it waits.
-- Uses lua/lock_lib.lua and lua/fair_lib.lua, inserted at the "-- @helpers"
-- line when loaded.
-- KEYS[1]  lock name
-- KEYS[2]  queue "redisson_lock_queue:{N}"
-- KEYS[3]  deadlines "redisson_lock_timeout:{N}"
-- KEYS[4]  unlock channel "redisson_lock__channel:{N}" (the waiters' channels
--          are "<KEYS[4]>:<owner>")
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  lease in milliseconds to set when holds remain; "0" keeps the TTL
-- ARGV[3]  owner field "<client-id>:<thread-id>"
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller does not hold the lock (should the lock be
-- free, the head waiter is woken all the same: its holder's lease ran out),
-- 0 when holds remain, 1 when the lock became free; an UNPUBLISHED error when
-- it became free but the unlock message could not be published.
-- The fast path, before the helpers are defined (so that it creates no Lua
-- closures): with nobody queued (LINDEX of the queue's head), there is no
-- stale waiter to drop and nobody to wake, so the release is release_one()'s
-- (HGET, then DEL, or the lease and HINCRBY) and the answer the general path
-- below (the specification) gives. Anything else falls through, nothing
-- written.
if (ARGV[4] == 'publish' or ARGV[4] == 'spublish')
    and not redis.call('lindex', KEYS[2], 0) then
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  if count == nil then
    return nil
  end
  if count <= 1 then
    redis.call('del', KEYS[1])
    return 1
  end
  if tonumber(ARGV[2]) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
  else
    redis.call('hdel', KEYS[1], '')  -- keep_ttl()
  end
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  return 0
end

-- @helpers

-- The general path.
local publish = publish_command(ARGV[4])  -- raises before any write
drop_stale(KEYS[2], KEYS[3], now_ms())
local released = release_one(KEYS[1], ARGV[3], ARGV[2])
if released == 0 then
  return 0
end
if released == nil and redis.call('exists', KEYS[1]) == 1 then
  return nil
end
local unpublished = wake_next(KEYS[2], KEYS[4], ARGV[1], publish)
if released == nil then
  return nil
end
return unpublished or 1

-- Free a read-write lock's read or write side whoever holds it
-- (administrative unlock, Redisson's forceUnlock()). Uses lua/lock_lib.lua
-- and lua/shape_lib.lua, prepended when loaded.
-- KEYS[1]  lock name N
-- KEYS[2]  channel "redisson_rwlock:{N}"
-- ARGV[1]  the mode freed: "read" (every reader) or "write" (the writer)
-- ARGV[2]  message: "0" for read, "1" for write (Redisson's)
-- ARGV[3]  publish command: "publish" (also when absent) or "spublish"
-- Returns 1 when the lock was in that mode and is now free (waiters told),
-- else 0; a NOTALOCK error (nothing deleted) when the key holds anything but
-- a read-write lock; an UNPUBLISHED error when the waiters could not be told.
local publish = publish_command(ARGV[3])  -- raises before any write
local shape = is_rwlock(KEYS[1])
if shape == 'free' then
  return 0
end
if shape ~= 'rwlock' then
  return redis.error_reply('NOTALOCK the key holds a ' ..
      redis.call('type', KEYS[1]).ok .. ' that is not a read-write lock; ' ..
      'not deleted')
end
if redis.call('hget', KEYS[1], 'mode') ~= ARGV[1] then
  return 0
end
redis.call('del', KEYS[1])
return publish_unlock(KEYS[2], ARGV[2], publish) or 1

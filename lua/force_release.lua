-- Free a lock whoever holds it (administrative unlock). Uses is_lock() from
-- lua/shape_lib.lua (a hash whose fields are not owner fields is not
-- deleted), publish_command() and publish_unlock() from lua/lock_lib.lua,
-- prepended when the script is loaded.
-- KEYS[1]  lock name
-- KEYS[2]  unlock channel
-- KEYS[3]  optional: the fair lock's queue (see lua/release.lua)
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  publish command: "publish" (also when absent) or "spublish"
-- Returns 1 when a held lock was freed (waiters notified), 0 when it was
-- free; a NOTALOCK error (nothing deleted) when the key holds anything but a
-- lock; an UNPUBLISHED error when the lock was freed but the unlock message
-- could not be published (e.g. the ACL user may not publish on the channel).
local publish = publish_command(ARGV[2])  -- raises before any write
local shape = is_lock(KEYS[1])
if shape == 'free' then
  return 0
end
if shape ~= 'lock' then
  return redis.error_reply('NOTALOCK the key holds a ' ..
      redis.call('type', KEYS[1]).ok .. ' that is not a lock; not deleted')
end
redis.call('del', KEYS[1])
local unpublished = publish_unlock(KEYS[2], ARGV[1], publish)
return wake_fair_waiter(KEYS[3], KEYS[2], ARGV[1], publish) or unpublished or 1

-- Release every hold of one owner at once (used when a client shuts down while
-- its threads still hold locks).
-- Uses publish_command() and publish_unlock() from lock_lib.lua, prepended
-- when loaded.
-- KEYS[1]  lock name
-- KEYS[2]  unlock channel
-- KEYS[3]  optional: the fair lock's queue (see lua/release.lua)
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  owner field
-- ARGV[3]  publish command: "publish" (also when absent) or "spublish"
-- Returns 1 when the owner held the lock (now free, waiters notified), else 0;
-- an UNPUBLISHED error when it was freed but the unlock message could not be
-- published.
local publish = publish_command(ARGV[3])  -- raises before any write
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return 0
end
redis.call('del', KEYS[1])
local unpublished = publish_unlock(KEYS[2], ARGV[1], publish)
return wake_fair_waiter(KEYS[3], KEYS[2], ARGV[1], publish) or unpublished or 1

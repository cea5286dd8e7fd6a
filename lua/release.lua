-- Release one hold of a reentrant lock. Redisson-compatible.
-- Uses publish_command(), publish_unlock() and release_one() from
-- lock_lib.lua, prepended when loaded.
-- KEYS[1]  lock name
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}" (or
--          "redisson_lock__channel:<name>" when the name contains "{")
-- KEYS[3]  optional: the fair lock's queue "redisson_lock_queue:{N}", whose
--          head waiter is woken too (see wake_fair_waiter()); relock passes
--          it, Redisson's own release has none
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  lease in milliseconds to set when holds remain; "0" keeps the TTL
-- ARGV[3]  owner field "<client-id>:<thread-id>"
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller does not hold the lock, 0 when holds remain,
-- 1 when the lock became free (the key is deleted and waiters are notified);
-- an UNPUBLISHED error when the lock became free but the unlock message could
-- not be published (e.g. the ACL user may not publish on the channel).
local publish = publish_command(ARGV[4])  -- raises before any write
local released = release_one(KEYS[1], ARGV[3], ARGV[2])
if released ~= 1 then
  return released
end
local unpublished = publish_unlock(KEYS[2], ARGV[1], publish)
return wake_fair_waiter(KEYS[3], KEYS[2], ARGV[1], publish) or unpublished or 1

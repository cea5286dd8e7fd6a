-- Set a semaphore's permits or a count-down latch's count if it has none
-- (TrySetPermits(), TrySetCount()), and tell the waiters. Uses
-- lua/counter_lib.lua and lua/lock_lib.lua's publish_command() and
-- publish_unlock().
-- KEYS[1]  semaphore or latch name
-- KEYS[2]  its channel
-- ARGV[1]  the count
-- ARGV[2]  publish command: "publish", "spublish" or "none"
-- ARGV[3]  the message: the count (a semaphore, as Redisson's) or "1"
--          (a latch: Redisson's new-count message)
-- ARGV[4]  the error code for a key of another kind: NOTASEMAPHORE or
--          NOTALATCH
-- Returns 1 when set, 0 when the key already held a count (unchanged); the
-- error of count_at(); UNPUBLISHED after the write when the publish was
-- refused.
-- ('none': no pub/sub, nothing is published.)
local command = ARGV[2] ~= 'none' and publish_command(ARGV[2]) or nil
if count_at(KEYS[1], ARGV[4]) ~= nil then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
return command and publish_unlock(KEYS[2], ARGV[3], command) or 1

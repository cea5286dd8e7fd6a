-- Set a semaphore's permits or a count-down latch's count if it has none
-- (TrySetPermits(), TrySetCount()), and tell the waiters. Uses
-- lua/counter_lib.lua.
-- KEYS[1]  semaphore or latch name
-- KEYS[2]  its channel
-- ARGV[1]  the count
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  the message: the count (a semaphore, as Redisson's) or "1"
--          (a latch: Redisson's new-count message)
-- ARGV[4]  the error code for a key of another kind: NOTASEMAPHORE or
--          NOTALATCH
-- ARGV[5]  a refused publish: "report" or "ignore" (see tell())
-- Returns 1 when set, 0 when the key already held a count (unchanged); the
-- error of count_at(); UNPUBLISHED after the write when the publish was
-- refused (and reported).
local count, bad = count_to_publish(KEYS[1], ARGV[4], ARGV[2])
if bad then
  return bad
end
if count ~= nil then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
return tell(KEYS[2], ARGV[3], ARGV[2], ARGV[5]) or 1

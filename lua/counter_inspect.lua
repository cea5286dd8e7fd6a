-- What is at a semaphore's or a count-down latch's key, for the queries
-- (AvailablePermits(), GetCount()) and for a waiter whose key has no TTL.
-- Uses lua/counter_lib.lua.
-- KEYS[1]  semaphore or latch name
-- ARGV[1]  the error code for a key of another kind: NOTASEMAPHORE or
--          NOTALATCH
-- Returns {exists, pttl, count}, the shape of lua/inspect.lua's answer, the
-- count as its text (exact beyond 2^53): {0, -2, 0} when the key does not
-- exist; the error of count_at().
local count, bad, text = count_at(KEYS[1], ARGV[1])
if bad then
  return bad
end
if count == nil then
  return {0, -2, 0}
end
return {1, redis.call('pttl', KEYS[1]), text}

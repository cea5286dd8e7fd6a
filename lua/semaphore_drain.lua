-- Take every available permit of a semaphore (Drain()), as Redisson's
-- drainPermits: the count becomes 0 (its TTL, if any, stays). Uses
-- lua/counter_lib.lua.
-- KEYS[1]  semaphore name
-- Returns the count before, as its text (exact beyond 2^53: see count_at();
-- 0 when the key does not exist, which stays so); NOTASEMAPHORE as
-- count_at().
local permits, bad, text = count_at(KEYS[1], 'NOTASEMAPHORE')
if bad then
  return bad
end
if permits == nil then
  return 0
end
redis.call('set', KEYS[1], '0', 'KEEPTTL')
return text

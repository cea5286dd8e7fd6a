-- Whether a count-down latch is open (Redisson's RCountDownLatch: a string
-- key holding the count; no key: count 0). Uses count_at() of
-- lua/counter_lib.lua.
-- KEYS[1]  latch name
-- Returns nil when the count is 0 (or less, or the key is gone); else the
-- key's PTTL (-1 no TTL), the answer of a lock acquire that found the lock
-- held (lua/acquire.lua), so that the shared acquire machine waits for the
-- zero message. A NOTALATCH error when the key holds anything but a count.
local count, bad = count_at(KEYS[1], 'NOTALATCH')
if bad then
  return bad
end
if count == nil or count <= 0 then
  return nil
end
return redis.call('pttl', KEYS[1])

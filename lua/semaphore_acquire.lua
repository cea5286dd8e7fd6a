-- Take permits of a semaphore (Redisson's RSemaphore: a string key holding
-- the number of available permits). Uses count_at() of lua/counter_lib.lua.
-- KEYS[1]  semaphore name
-- ARGV[1]  permits to take (>= 1)
-- Returns nil when taken; else the key's PTTL (-2 absent, -1 no TTL), the
-- answer of a lock acquire that found the lock held (lua/acquire.lua), so
-- the shared acquire machine waits for a release's message. A NOTASEMAPHORE
-- error, nothing changed, when the key holds anything but a permit count.
local permits, bad = count_at(KEYS[1], 'NOTASEMAPHORE')
if bad then
  return bad
end
if permits ~= nil and permits >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])

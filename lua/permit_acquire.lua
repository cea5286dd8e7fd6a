-- Take one permit of a permit-expirable semaphore (lua/permit_lib.lua),
-- after giving back the expired ones, as Redisson's tryAcquire does.
-- KEYS[1]  semaphore name N (the available permits)
-- KEYS[2]  "{N}:timeout" (the permits handed out)
-- KEYS[3]  channel "redisson_sc:{N}"
-- ARGV[1]  the permit's id, hex
-- ARGV[2]  its lease in ms
-- ARGV[3]  publish command: "publish" or "spublish"
-- Returns nil when taken (the timeouts key takes N's TTL, if any); else
-- the ms until the earliest leased permit expires, or (none leased) N's
-- PTTL (-2 absent, -1 no TTL): the answer of a lock acquire that found the
-- lock held, so the shared acquire machine wakes at that lease end as well
-- as on a message. NOTASEMAPHORE, nothing changed, for keys of other kinds.
local bad = permit_checks(KEYS[1], KEYS[2], ARGV[3])
if bad then
  return bad
end
local now = now_ms()
reclaim(KEYS[1], KEYS[2], KEYS[3], now, ARGV[3])
local permits = count_at(KEYS[1], 'NOTASEMAPHORE')
if permits ~= nil and permits >= 1 then
  redis.call('decr', KEYS[1])
  redis.call('zadd', KEYS[2], score_of(now, ARGV[2]), permit_id(ARGV[1]))
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return nil
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
if first[1] ~= nil and tonumber(first[2]) < NO_LEASE then
  return math.max(0, tonumber(first[2]) - now)
end
return redis.call('pttl', KEYS[1])

-- Set a new lease on a permit of a permit-expirable semaphore
-- (lua/permit_lib.lua), after giving back the expired ones, as Redisson's
-- updateLeaseTime.
-- KEYS[1]  semaphore name N
-- KEYS[2]  "{N}:timeout"
-- KEYS[3]  channel "redisson_sc:{N}"
-- ARGV[1]  the permit's id, hex
-- ARGV[2]  the new lease in ms (from now)
-- ARGV[3]  publish command: "publish" or "spublish"
-- Returns 1 when set; 0 when no such permit is out (or it had expired and
-- was reclaimed now); NOTASEMAPHORE as permit_checks().
local bad = permit_checks(KEYS[1], KEYS[2], ARGV[3])
if bad then
  return bad
end
local now = now_ms()
reclaim(KEYS[1], KEYS[2], KEYS[3], now, ARGV[3])
local id = permit_id(ARGV[1])
if not redis.call('zscore', KEYS[2], id) then
  return 0
end
redis.call('zadd', KEYS[2], score_of(now, ARGV[2]), id)
return 1

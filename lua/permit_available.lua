-- The available permits of a permit-expirable semaphore
-- (lua/permit_lib.lua), after giving back the expired ones, as Redisson's
-- availablePermits.
-- KEYS[1]  semaphore name N
-- KEYS[2]  "{N}:timeout"
-- KEYS[3]  channel "redisson_sc:{N}"
-- ARGV[1]  publish command: "publish" or "spublish"
-- Returns the count (0 when N does not exist); NOTASEMAPHORE as
-- permit_checks().
local bad = permit_checks(KEYS[1], KEYS[2], ARGV[1])
if bad then
  return bad
end
reclaim(KEYS[1], KEYS[2], KEYS[3], now_ms(), ARGV[1])
local _, _, text = count_at(KEYS[1], 'NOTASEMAPHORE')
return text or 0  -- the count's text: exact beyond 2^53

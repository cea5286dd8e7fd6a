-- Give back one permit of a permit-expirable semaphore by its id
-- (lua/permit_lib.lua) and publish the new count, as Redisson's tryRelease.
-- KEYS[1]  semaphore name N
-- KEYS[2]  "{N}:timeout"
-- KEYS[3]  channel "redisson_sc:{N}"
-- ARGV[1]  the permit's id, hex
-- ARGV[2]  publish command: "publish" or "spublish"
-- ARGV[3]  a refused publish: "report" or "ignore" (see tell())
-- Returns 1 when given back; 2 when given back but its lease had ended
-- (nobody had reclaimed it yet); 0 when no such permit is out (nothing
-- changed); NOTASEMAPHORE as permit_checks(); UNPUBLISHED after the write
-- when the publish was refused (and reported).
local bad = permit_checks(KEYS[1], KEYS[2], ARGV[2])
if bad then
  return bad
end
local id = permit_id(ARGV[1])
local expires = redis.call('zscore', KEYS[2], id)
if not expires then
  return 0
end
redis.call('zrem', KEYS[2], id)
local value = redis.call('incrby', KEYS[1], 1)
local result = 1
if tonumber(expires) <= now_ms() then
  result = 2
end
return tell(KEYS[3], value, ARGV[2], ARGV[3]) or result

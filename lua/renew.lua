-- Renew the leases of many locks in one call (the watchdog's batch).
-- KEYS[i]  lock name i
-- ARGV[1]  lease in milliseconds
-- ARGV[i+1] owner field for KEYS[i]
-- Returns an array: element i is 1 when lock i is still held by its owner
-- and its lease was renewed, 0 when the owner field is gone (lock lost).
local renewed = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed

-- Renew the leases of many permits of permit-expirable semaphores in one
-- call (the watchdog's batch; lua/renew.lua's calling convention).
-- KEYS[i]  the "{N}:timeout" key of permit i
-- ARGV[1]  lease in milliseconds
-- ARGV[i+1] permit i's id, hex
-- Returns an array: element i is 1 when permit i was still out and
-- unexpired and its lease was renewed (or is already longer), else 0 (the
-- permit is lost). A lease is only raised, never cut: a renewal collected
-- before an UpdateLeaseTime() to a longer lease may reach Redis after it,
-- and the holder counts on that longer lease, which the watchdog no longer
-- renews.
local renewed = {}
local now = now_ms()
local lease = tonumber(ARGV[1])
for i = 1, #KEYS do
  local score = redis.pcall('zscore', KEYS[i], permit_id(ARGV[i + 1]))
  if type(score) == 'string' and tonumber(score) > now and
      tonumber(score) < NO_LEASE then
    if tonumber(score) < now + lease then
      redis.call('zadd', KEYS[i], 'XX', score_of(now, ARGV[1]),
          permit_id(ARGV[i + 1]))
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed

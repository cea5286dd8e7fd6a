-- Renew the leases of many locks in one call (the watchdog's batch), or set
-- one lock's lease (Redlock's Extend).
-- KEYS[i]  lock name i
-- ARGV[1]  lease in milliseconds
-- ARGV[i+1] owner field for KEYS[i]
-- ARGV[#KEYS+2]  optional "set": set each lease to ARGV[1], shorter or not
--          (an explicit extension). Without it (the watchdog's renewal) a
--          lease is only raised to ARGV[1], never cut: a renewal collected
--          before an extension to a longer lease may reach Redis after it,
--          and the holder counts on that longer lease, which the watchdog no
--          longer renews.
-- Returns an array: element i is 1 when lock i is still held by its owner
-- and its lease was renewed (or is already longer), 0 when the owner field
-- is gone (lock lost; also when the key now holds another type: a pcall,
-- so that one overwritten key does not fail the batch and leave every
-- other lock in it unrenewed).
local set = ARGV[#KEYS + 2] == 'set'
local lease = tonumber(ARGV[1])
local renewed = {}
for i = 1, #KEYS do
  if redis.pcall('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    -- (A key without a TTL has a PTTL of -1: it gets the lease.)
    if set or redis.call('pttl', KEYS[i]) < lease then
      redis.call('pexpire', KEYS[i], ARGV[1])
    end
    renewed[i] = 1
  else
    renewed[i] = 0
  end
end
return renewed

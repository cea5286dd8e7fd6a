-- Renew the leases of many read holds in one call (the watchdog's batch for
-- read locks). Uses lua/rw_lib.lua, prepended when loaded.
-- KEYS[i]  lock name i
-- ARGV[1]  lease in milliseconds
-- ARGV[i+1] reader field for KEYS[i]
-- Per reader: the leases of its read holds are set to ARGV[1] (a lease key
-- that expired meanwhile is made again: the reader's field is still there,
-- so no writer entered) and the hash's TTL grows to at least that.
-- (Redisson renews every reader's holds, with PEXPIRE; a dead reader's
-- holds here end with their own leases.)
-- Returns an array: element i is 1 when reader i still holds lock i, 0 when
-- its field is gone (the hold is lost; also when the key now holds another
-- type: a pcall, whose error tonumber() makes nil, so that one overwritten
-- key does not fail the batch).
local renewed = {}
for i = 1, #KEYS do
  local count = tonumber(redis.pcall('hget', KEYS[i], ARGV[i + 1]))
  if count == nil then
    renewed[i] = 0
  else
    -- The hash's TTL first (it only grows): a write that Redis never
    -- refuses for memory, so the lease keys' SETs after it go through at
    -- maxmemory too (see release_one() in lua/lock_lib.lua).
    redis.call('pexpire', KEYS[i],
        math.max(redis.call('pttl', KEYS[i]), tonumber(ARGV[1])))
    for j = count, 1, -1 do
      redis.call('set', read_timeout_key(KEYS[i], ARGV[i + 1], j), 1,
          'px', ARGV[1])
    end
    renewed[i] = 1
  end
end
return renewed

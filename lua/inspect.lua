-- What is at a lock's key, for the queries (IsLocked, HoldCount,
-- RemainingLease) and for a waiter that found a holder without a lease.
-- Uses is_lock() from lua/shape_lib.lua, prepended when the script is loaded.
-- KEYS[1]  lock name
-- ARGV[1]  owner field "<client-id>:<thread-id>" of the caller
-- Returns {held, pttl, count}: held 0 (free) or 1 (a lock), the key's PTTL
-- in milliseconds (-2 free, -1 no TTL), and the caller's hold count; a
-- NOTALOCK error when the key holds anything but a lock.
local shape = is_lock(KEYS[1])
if shape == 'free' then
  return {0, -2, 0}
end
if shape ~= 'lock' then
  return redis.error_reply('NOTALOCK the key holds a ' ..
      redis.call('type', KEYS[1]).ok .. ' that is not a lock')
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0')
return {1, redis.call('pttl', KEYS[1]), count}

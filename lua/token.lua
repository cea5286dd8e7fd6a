-- The last fencing token of a fenced lock (Redisson's RFencedLock.getToken):
-- the value of its token counter.
-- KEYS[1]  the token counter "redisson_lock_token:{N}"
-- Returns the counter as an integer, 0 when it does not exist yet; a
-- NOTATOKEN error when the key holds a string that is not an integer (a
-- key of another type fails GET with WRONGTYPE).
local value = redis.call('get', KEYS[1])
if not value then
  return 0
end
local n = tonumber(value)
if not n then
  return redis.error_reply('NOTATOKEN the key holds "' .. value ..
      '", not a fencing token')
end
return n

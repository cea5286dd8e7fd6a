-- The last fencing token of a fenced lock (Redisson's RFencedLock.getToken):
-- the value of its token counter.
-- KEYS[1]  the token counter "redisson_lock_token:{N}"
-- Returns the counter as a decimal string (a Lua number, a double, would
-- round anything above 2^53), 0 when it does not exist yet; a NOTATOKEN
-- error when the key holds anything but a count in [0, 2^63 - 1] (a
-- negative number, text; a key of another type fails GET with WRONGTYPE).
local value = redis.call('get', KEYS[1])
if not value then
  return 0
end
if value ~= '0' and not (string.find(value, '^[1-9]%d*$')
    and (#value < 19 or (#value == 19 and value <= '9223372036854775807')))
then
  return redis.error_reply('NOTATOKEN the fencing token counter ' ..
      KEYS[1] .. ' holds "' .. string.sub(value, 1, 40) ..
      '", not a count in [0, 9223372036854775807]')
end
return value

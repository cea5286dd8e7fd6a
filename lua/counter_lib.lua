-- Helpers of the counter synchronizers, prepended to their scripts by
-- lib/lock/lock_scripts.cc: a semaphore's permits and a count-down latch's
-- count (Redisson's RSemaphore and RCountDownLatch) are a string key holding
-- a decimal integer. (The scripts that publish use lua/lock_lib.lua's
-- publish_command() and publish_unlock() too.)
local COUNT = '^%-?%d+$'

-- count_at(key, code): the integer at `key`, or nil when the key does not
-- exist. Anything else at the key (another type, a string that is no
-- integer) raises the error reply "<code> ..." (NOTASEMAPHORE, NOTALATCH),
-- before the script writes anything.
local function count_at(key, code)
  local value = redis.pcall('get', key)
  if value == false then
    return nil
  end
  if type(value) == 'string' and string.find(value, COUNT) then
    return tonumber(value)
  end
  local kind = redis.call('type', key).ok
  if kind == 'string' then
    error({err = code .. ' the key holds a string that is not an integer'})
  end
  error({err = code .. ' the key holds a ' .. kind .. ', not a count'})
end

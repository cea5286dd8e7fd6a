-- Helpers of the counter synchronizers, prepended to their scripts by
-- lib/lock/lock_scripts.cc: a semaphore's permits and a count-down latch's
-- count (Redisson's RSemaphore and RCountDownLatch) are a string key holding
-- a decimal integer, and every change that may let a waiter through is
-- published on the object's channel.
--
-- Failures are error replies that the helpers return and the scripts
-- return in turn (redis.error_reply), never raised with error(): Redis
-- before 7 turns a raised error table into a generic "Error running script"
-- message, which would lose the code the client maps to a status.
local INT64_MAX = '9223372036854775807'
local INT64_MIN_DIGITS = '9223372036854775808'

-- is_count(value): whether string `value` is an integer as Redis reads one
-- (INCRBY, DECR): "0", or an optional "-" and digits without a leading
-- zero, within 64 bits. What Redis refuses ("007", "-0", "+5", " 5", 2^64)
-- is no count: taken for one, a script would fail in its INCRBY or DECR
-- (an error without a code), or a drain would overwrite it.
local function is_count(value)
  if value == '0' then
    return true
  end
  local digits = string.match(value, '^%-?([1-9]%d*)$')
  if digits == nil or #digits > #INT64_MAX then
    return false
  end
  if #digits < #INT64_MAX then
    return true
  end
  -- As long as the bound: compared as strings, in the order of numbers.
  if string.sub(value, 1, 1) == '-' then
    return digits <= INT64_MIN_DIGITS
  end
  return digits <= INT64_MAX
end

-- count_at(key, code): the integer at `key`, or nil when the key does not
-- exist; for anything else at the key (another type, a string that is no
-- integer), nil and the error reply "<code> ..." (NOTASEMAPHORE,
-- NOTALATCH), for the script to return before it writes anything. Third,
-- the count's own text: a Lua number (a double) is exact only within 2^53,
-- so what goes back to the client is the text (a Redisson latch may count
-- up to 2^63 - 1).
local function count_at(key, code)
  local value = redis.pcall('get', key)
  if value == false then
    return nil, nil, nil
  end
  if type(value) == 'string' and is_count(value) then
    return tonumber(value), nil, value
  end
  local kind = redis.call('type', key).ok
  if kind == 'string' then
    return nil, redis.error_reply(code ..
        ' the key holds a string that is not an integer')
  end
  return nil, redis.error_reply(code .. ' the key holds a ' .. kind ..
      ', not a count')
end

-- bad_publish(command): nil for "publish" or "spublish" (sharded pub/sub,
-- Redis >= 7, where the cluster backend's waiters listen); else the error
-- reply, for the script to return before it writes anything.
local function bad_publish(command)
  if command == 'publish' or command == 'spublish' then
    return nil
  end
  return redis.error_reply('ERR publish command must be publish or ' ..
      'spublish, not ' .. tostring(command))
end

-- count_to_publish(key, code, command): count_at(key, code), for a script
-- that will publish with `command`: also nil and the error reply of
-- bad_publish(), checked first, before the script writes anything.
local function count_to_publish(key, code, command)
  local bad = bad_publish(command)
  if bad then
    return nil, bad
  end
  return count_at(key, code)
end

-- tell(channel, message, command, refused): publishes `message` with
-- `command`. Returns nil, or (when Redis refused the publish, e.g. an ACL
-- user without the channel, and `refused` is "report") the error reply
-- "UNPUBLISHED <why>" for the script to return after its write: the caller
-- learns that the change was made but the waiters were not told. With
-- `refused` "ignore" (a client without pub/sub, whose own waiters re-check
-- on their own) a refusal is no error.
local function tell(channel, message, command, refused)
  local published = redis.pcall(command, channel, message)
  if type(published) == 'table' and published.err and refused == 'report' then
    return redis.error_reply('UNPUBLISHED ' .. published.err)
  end
  return nil
end

-- Acquire (or re-enter) a reentrant lock. Redisson-compatible: other owners
-- see exactly Redisson's behaviour.
-- KEYS[1]  lock name (a hash: field = owner, value = hold count)
-- KEYS[2]  optional: the fencing token counter ("redisson_lock_token:{N}",
--          Redisson's RFencedLock). When given, every acquisition (re-entries
--          included, as in Redisson) increments it and returns the new value.
-- ARGV[1]  lease in milliseconds (the key's new TTL)
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  "1" when the caller holds no hold of its own yet: the count is set
--          to 1 rather than incremented, so a count left by an earlier
--          attempt whose reply was lost (timeout, dropped connection) is
--          absorbed instead of turning into a hold nobody releases.
--          Anything else: increment (re-entry). A re-entry never shortens
--          the lease in force: the TTL only grows to ARGV[1].
-- Returns, without KEYS[2]: nil when the caller now holds the lock, otherwise
-- the holder's PTTL in milliseconds (-1 when the holder's key has no TTL).
-- With KEYS[2] (Redisson's fenced reply, the token as a decimal string):
-- {-1, "token"} when the caller now holds the lock, otherwise {PTTL, -1}.
-- A read-write lock of the same name (its hash has a "mode" field) is
-- another owner's, even where its reader field is ours.
if (redis.call('exists', KEYS[1]) == 0)
    or (redis.call('hexists', KEYS[1], ARGV[2]) == 1
        and redis.call('hexists', KEYS[1], 'mode') == 0) then
  -- The token first, so that a counter that cannot give one fails the
  -- script before it wrote anything: a key of another type fails GET
  -- (WRONGTYPE); a value that is not a count in [0, 2^63 - 2] (a negative
  -- number, text, the int64 limit) is a NOTATOKEN error. The token goes back
  -- as the counter's own string: a Lua number (a double) is exact only up to
  -- 2^53.
  local token
  if KEYS[2] then
    local last = redis.call('get', KEYS[2])
    if last and last ~= '0' and not (string.find(last, '^[1-9]%d*$')
        and (#last < 19 or (#last == 19 and last < '9223372036854775807')))
    then
      return redis.error_reply('NOTATOKEN the fencing token counter ' ..
          KEYS[2] .. ' holds "' .. string.sub(last, 1, 40) ..
          '", not a count in [0, 9223372036854775806]')
    end
    redis.call('incr', KEYS[2])
    token = redis.call('get', KEYS[2])
  end
  if ARGV[3] == '1' then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
  else
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    -- Shorter than the lease, or no TTL at all (-1: the key was gone, e.g.
    -- after FLUSHALL or a restart, and HINCRBY made it anew): set the lease.
    local left = redis.call('pttl', KEYS[1])
    if left < tonumber(ARGV[1]) then
      redis.call('pexpire', KEYS[1], ARGV[1])
    end
  end
  if token then
    return {-1, token}
  end
  return nil
end
if KEYS[2] then
  return {redis.call('pttl', KEYS[1]), -1}
end
return redis.call('pttl', KEYS[1])

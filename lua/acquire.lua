-- Acquire (or re-enter) a reentrant lock. Redisson-compatible: other owners
-- see exactly Redisson's behaviour. Uses lua/shape_lib.lua, prepended when
-- loaded.
-- KEYS[1]  lock name (a hash: field = owner, value = hold count)
-- KEYS[2]  the fair lock's queue "redisson_lock_queue:{N}" and
-- KEYS[3]  its deadlines "redisson_lock_timeout:{N}" (see lua/fair_lib.lua):
--          read only, to refuse a name whose fair lock has waiters
-- KEYS[4]  optional: the fencing token counter ("redisson_lock_token:{N}",
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
-- Returns, without KEYS[4]: nil when the caller now holds the lock, otherwise
-- the holder's PTTL in milliseconds (-1 when the holder's key has no TTL).
-- With KEYS[4] (Redisson's fenced reply, the token as a decimal string):
-- {-1, "token"} when the caller now holds the lock, otherwise {PTTL, -1}.
-- A NOTALOCK error, and nothing written, when the name is not this lock
-- type's: the key holds a read-write lock (a "mode" field, even where its
-- reader field is ours) or anything but a lock, or the name's fair lock has
-- waiters in time (a plain acquire would take the lock past them, and its
-- release would not wake them). A failed call leaves nothing behind: the
-- lease is set before the count where the key exists, and a key this script
-- made is deleted again should its lease fail (e.g. PEXPIRE refused by an
-- ACL); the error is returned.
local exists = redis.call('exists', KEYS[1])
local own = exists == 1 and redis.call('hexists', KEYS[1], ARGV[2]) == 1
    and redis.call('hexists', KEYS[1], 'mode') == 0
if not own then
  -- A fair lock's waiter at the head of its queue, still in time (see
  -- drop_stale() in lua/fair_lib.lua)?
  local head = redis.call('lindex', KEYS[2], 0)
  if head then
    local deadline = tonumber(redis.call('zscore', KEYS[3], head))
    local t = redis.call('time')
    if deadline and deadline > tonumber(t[1]) * 1000 +
        math.floor(tonumber(t[2]) / 1000) then
      return redis.error_reply('NOTALOCK the name is a fair lock\'s (its ' ..
          'queue has waiters); a lock of that name cannot be acquired ' ..
          '(one name is one lock type); nothing was written')
    end
  end
end
if exists == 0 or own then
  -- The token first, so that a counter that cannot give one fails the
  -- script before it wrote anything: a key of another type fails GET
  -- (WRONGTYPE); a value that is not a count in [0, 2^63 - 2] (a negative
  -- number, text, the int64 limit) is a NOTATOKEN error. The token goes back
  -- as the counter's own string: a Lua number (a double) is exact only up to
  -- 2^53. (Should the lease below fail, the token is spent: tokens only
  -- need to grow.)
  local token
  if KEYS[4] then
    local last = redis.call('get', KEYS[4])
    if last and last ~= '0' and not (string.find(last, '^[1-9]%d*$')
        and (#last < 19 or (#last == 19 and last < '9223372036854775807')))
    then
      return redis.error_reply('NOTATOKEN the fencing token counter ' ..
          KEYS[4] .. ' holds "' .. string.sub(last, 1, 40) ..
          '", not a count in [0, 9223372036854775806]')
    end
    redis.call('incr', KEYS[4])
    token = redis.call('get', KEYS[4])
  end
  if exists == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    local failed = lease_new_lock(KEYS[1], ARGV[1])
    if failed then
      return failed
    end
  elseif ARGV[3] == '1' then
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('hset', KEYS[1], ARGV[2], 1)
  else
    -- Shorter than the lease, or no TTL at all (-1, set by hand): set it.
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
      redis.call('pexpire', KEYS[1], ARGV[1])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
  end
  if token then
    return {-1, token}
  end
  return nil
end
if is_lock(KEYS[1]) ~= 'lock' then
  return not_this_type(KEYS[1], 'lock')
end
if KEYS[4] then
  return {redis.call('pttl', KEYS[1]), -1}
end
return redis.call('pttl', KEYS[1])

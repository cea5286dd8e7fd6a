-- Release one hold of a reentrant lock. Redisson-compatible.
-- Does what release_one() and publish_unlock() of lua/lock_lib.lua do,
-- written out so that the call defines no helper (a Lua closure per call);
-- lock_lib.lua is inserted at the "-- @helpers" line, for a publish command
-- in another form, and for a last hold with a fair lock's waiters queued at
-- the name (wake_fair_waiter()).
-- KEYS[1]  lock name
-- KEYS[2]  unlock channel "redisson_lock__channel:{<name>}" (or
--          "redisson_lock__channel:<name>" when the name contains "{")
-- KEYS[3]  optional: the fair lock's queue "redisson_lock_queue:{N}", whose
--          next waiter is woken too (see wake_fair_waiter()). relock passes
--          it with a release it expects to free the lock, and leaves it out
--          of one that should leave holds (each key costs every call): should
--          that one free the lock all the same, the script finds the queue
--          under the name PrefixName() gives (in N's cluster slot).
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  lease in milliseconds to set when holds remain; "0" keeps the TTL
-- ARGV[3]  owner field "<client-id>:<thread-id>"
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller does not hold the lock, 0 when holds remain,
-- 1 when the lock became free (the key is deleted and waiters are notified);
-- an UNPUBLISHED error when the lock became free but the unlock message could
-- not be published (e.g. the ACL user may not publish on the channel).
-- Never refused for memory (see release_one()): a last hold goes with DEL
-- alone, and a count that goes down starts with keep_ttl()'s HDEL of the
-- field '', which changes nothing. A count that is not an integer (only a
-- hand edit makes one) is no hold: nil, nothing changed.
local publish = ARGV[4]
if publish ~= 'publish' and publish ~= 'spublish' then
  publish = nil  -- another form: publish_command() below checks it
else
  -- (Arguments are strings: Redis turns a Lua number into text with sprintf.)
  local count = redis.call('hget', KEYS[1], ARGV[3])
  if not count then
    return nil
  end
  if count ~= '1' then
    -- Holds remain, if the count is one: keep_ttl()'s HDEL of the field ''
    -- first (it changes nothing), then HINCRBY, which also tells a count
    -- from anything else (hand-edited: taken for no hold, nothing changed)
    -- without a tonumber() (strtod) per call, then the lease.
    redis.call('hdel', KEYS[1], '')
    local left = redis.pcall('hincrby', KEYS[1], ARGV[3], '-1')
    if type(left) ~= 'number' then
      return nil
    end
    if left >= 1 then
      if ARGV[2] ~= '0' and tonumber(ARGV[2]) > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
      end
      return 0
    end
    -- It was 0 or less (hand-edited): freed, as release_one() frees it.
  end
  -- The last hold. Should a fair lock's waiters queue at the name, the
  -- general path frees it and wakes the next of them still in time
  -- (wake_fair_waiter()); nothing is written here before that choice.
  local queue = KEYS[3]
  if not queue then
    queue = 'redisson_lock_queue:' .. KEYS[1]
    if not string.find(KEYS[1], '{', 1, true) then
      queue = 'redisson_lock_queue:{' .. KEYS[1] .. '}'
    end
  end
  if not redis.pcall('lindex', queue, '0') then
    redis.call('del', KEYS[1])
    local published = redis.pcall(publish, KEYS[2], ARGV[1])
    if type(published) == 'number' then
      return 1
    end
    return redis.error_reply('UNPUBLISHED ' .. published.err)
  end
end

-- @helpers

-- The same with the publish command in another form (upper case, absent:
-- Redisson's callers), or an error for a command that is neither.
publish = publish_command(ARGV[4])  -- raises before any write
local released = release_one(KEYS[1], ARGV[3], ARGV[2])
if released ~= 1 then
  return released
end
local unpublished = publish_unlock(KEYS[2], ARGV[1], publish)
local queue = KEYS[3]
if not queue then
  queue = 'redisson_lock_queue:' .. KEYS[1]
  if not string.find(KEYS[1], '{', 1, true) then
    queue = 'redisson_lock_queue:{' .. KEYS[1] .. '}'
  end
end
return wake_fair_waiter(queue, KEYS[2], ARGV[1], publish) or unpublished or 1

-- Acquire (or re-enter) a reentrant lock. Redisson-compatible: other owners
-- see exactly Redisson's behaviour. Uses lua/shape_lib.lua, inserted at the
-- "-- @helpers" line when loaded.
-- KEYS[1]  lock name (a hash: field = owner, value = hold count)
-- KEYS[2]  a fresh acquire's (see ARGV[3]): the fair lock's queue
--          "redisson_lock_queue:{N}" (see lua/fair_lib.lua), read only, to
--          refuse a name whose fair lock has waiters
-- KEYS[3]  a fresh acquire's, optional: the fencing token counter
--          ("redisson_lock_token:{N}", Redisson's RFencedLock). When given,
--          every acquisition (re-entries included, as in Redisson)
--          increments it and returns the new value.
--          A re-entry passes no queue: its token counter, if any, is KEYS[2].
--          Every key passed costs every call, so a key that a call's fast
--          path does not read is not passed: the general path reads the
--          queue's deadlines "redisson_lock_timeout:{N}" (and a re-entry's
--          queue) under the names PrefixName() gives, in N's cluster slot (as
--          the read-write lock's lease keys are).
-- ARGV[1]  lease in milliseconds (the key's new TTL)
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  absent (or "1") when the caller holds no hold of its own yet: the
--          count is set to 1 rather than incremented, so a count left by an
--          earlier attempt whose reply was lost (timeout, dropped connection)
--          is absorbed instead of turning into a hold nobody releases.
--          Anything else ("0"): increment (re-entry). A re-entry never
--          shortens the lease in force: the TTL only grows to ARGV[1]. (A
--          fresh acquire, the common call, passes two arguments, as
--          Redisson's does: every argument costs every call.)
-- Returns, without a token counter: nil when the caller now holds the lock,
-- otherwise the holder's PTTL in milliseconds (-1 when the holder's key has
-- no TTL). With one (Redisson's fenced reply): {-1, token} when the caller now
-- holds the lock, the token an integer below 2^53 and beyond that the
-- counter's own decimal string (a Lua number, a double, is exact only up to
-- 2^53), otherwise {PTTL, -1}.
-- A NOTHELD error, and nothing written, for a re-entry (ARGV[3] "0") that
-- finds no count of this owner: the hold was lost (see below).
-- A NOTALOCK error, and nothing written, when the name is not this lock
-- type's: the key holds a read-write lock (a "mode" field, even where its
-- reader field is ours) or anything but a lock, or the name's fair lock has
-- waiters in time (a plain acquire would take the lock past them, and its
-- release would not wake them). A failed call leaves nothing behind: the
-- lease is set before the count where the key exists, and a key this script
-- made is deleted again should its lease fail (e.g. PEXPIRE refused by an
-- ACL); the error is returned. (A negative token counter is an exception
-- of form only: the fast path's INCR of it is undone by a DECR before the
-- NOTATOKEN error, so the counter holds its old value again.)

-- The fast paths, before the helpers are defined (so that they create no Lua
-- closures): a fresh acquire of a free name whose fair lock has no queue
-- (EXISTS of both keys, [INCR,] HSET, PEXPIRE), and a re-entry (HMGET of the
-- owner's count and 'mode', [INCR,] PTTL, PEXPIRE when the lease grows,
-- HINCRBY). They do what the general path below (the specification) does
-- in those cases; anything else falls through to it with nothing written.
-- (Arguments are strings: Redis turns a Lua number into text with sprintf.)
local fresh = ARGV[3] == nil or ARGV[3] == '1'
local token_key = KEYS[2]  -- a re-entry's
if fresh then
  token_key = KEYS[3]
end
local fast = false  -- 'free' or 'own'
if fresh then
  if redis.call('exists', KEYS[1], KEYS[2]) == 0 then
    fast = 'free'
  end
else
  local held = redis.pcall('hmget', KEYS[1], ARGV[2], 'mode')
  if held[1] and not held[2] then  -- (an error reply: not a hash)
    fast = 'own'
  end
end
if fast then
  -- The token by INCR alone. It fails, writing nothing, on a counter that
  -- is not an integer or at the int64 limit, and a negative one is undone at
  -- once: either way the general path then says why (NOTATOKEN, WRONGTYPE,
  -- OOM). A Lua number is exact below 2^53; beyond, the counter's string.
  local token = nil
  if token_key then
    token = redis.pcall('incr', token_key)
    if type(token) ~= 'number' then
      fast = false
    elseif token < 1 then
      redis.call('decr', token_key)
      fast = false
    elseif token >= 9007199254740992 then
      token = redis.call('get', token_key)
    end
  end
  if fast == 'free' then
    redis.call('hset', KEYS[1], ARGV[2], '1')
    local set = redis.pcall('pexpire', KEYS[1], ARGV[1])  -- lease_new_lock()
    if set ~= 1 and type(set) == 'table' then
      redis.call('del', KEYS[1])
      return set
    end
  elseif fast == 'own' then
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
      redis.call('pexpire', KEYS[1], ARGV[1])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], '1')
  end
  if fast and token then
    return {-1, token}
  elseif fast then
    return nil
  end
end

-- @helpers

-- The general path.
local braced = KEYS[1]  -- PrefixName()'s suffix
if not string.find(braced, '{', 1, true) then
  braced = '{' .. braced .. '}'
end
local queue = KEYS[2]
if not fresh then
  queue = 'redisson_lock_queue:' .. braced
end
local deadlines = 'redisson_lock_timeout:' .. braced
local exists = redis.call('exists', KEYS[1])
local has_field, bad = false, nil
if exists == 1 then
  has_field, bad = lock_field(KEYS[1], ARGV[2])
  if bad then
    return bad
  end
end
local own = has_field and redis.call('hexists', KEYS[1], 'mode') == 0
if not fresh and not has_field then
  -- A re-entry whose hold is gone (its lease ran out, or the key was
  -- deleted or force-released, and maybe taken and freed by another owner
  -- since): taking the lock anew with count 1 would hide the loss, and the
  -- caller's inner release would then free the lock while it believes it
  -- still holds the outer level.
  return redis.error_reply('NOTHELD this owner no longer holds the lock ' ..
      '(its lease ran out, or it was deleted or force-released): the ' ..
      're-entry found it lost; nothing was written')
end
if not own and fair_waiter_in_time(queue, deadlines) then
  -- A fair lock's waiter still in time (lua/shape_lib.lua).
  return fair_queue_refusal()
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
  if token_key then
    local last = redis.call('get', token_key)
    if last and last ~= '0' and not (string.find(last, '^[1-9]%d*$')
        and (#last < 19 or (#last == 19 and last < '9223372036854775807')))
    then
      return redis.error_reply('NOTATOKEN the fencing token counter ' ..
          token_key .. ' holds "' .. string.sub(last, 1, 40) ..
          '", not a count in [0, 9223372036854775806]')
    end
    redis.call('incr', token_key)
    token = redis.call('get', token_key)
  end
  if exists == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    local failed = lease_new_lock(KEYS[1], ARGV[1])
    if failed then
      return failed
    end
  elseif fresh then
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
if token_key then
  return {redis.call('pttl', KEYS[1]), -1}
end
return redis.call('pttl', KEYS[1])

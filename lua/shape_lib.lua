-- What a key holds, for the scripts that must not touch anything but a lock,
-- and the lease of a lock an acquire makes (prepended to the scripts that use
-- them by lib/lock/lock_scripts.cc).
--
-- An owner field is "<client-id>:<thread-id>" (a read-write lock's writer
-- adds ":write"): the client id a UUID in its text form, 8-4-4-4-12 hex
-- digits (relock's client ids, ClientOptions::client_id, and Redisson's are
-- UUIDs), the thread id a decimal number (Redisson's is any Java long its
-- caller passes, negative ones too). Its value is a positive hold
-- count. A hash whose fields merely end in ":<digits>" (a user's "x:1") is
-- not a lock: nothing that frees or inspects locks touches it.
local OWNER_FIELD = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-' ..
    '%x%x%x%x%x%x%x%x%x%x%x%x:%-?%d+$'
local WRITER_FIELD = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-' ..
    '%x%x%x%x%x%x%x%x%x%x%x%x:%-?%d+:write$'
local HOLD_COUNT = '^[1-9]%d*$'

-- is_count(value): whether `value` is a hold count: a positive integer that
-- HINCRBY can count (at most 2^63 - 1).
local function is_count(value)
  return string.find(value, HOLD_COUNT) ~= nil and (#value < 19 or
      (#value == 19 and value <= '9223372036854775807'))
end

-- hash_at(key): 'free' when the key does not exist, 'other' when it is not
-- a hash, else the hash's fields and values (HGETALL).
local function hash_at(key)
  local kind = redis.call('type', key).ok
  if kind == 'none' then
    return 'free'
  end
  if kind ~= 'hash' then
    return 'other'
  end
  return redis.call('hgetall', key)
end

-- is_lock(key): 'free' when the key does not exist, 'lock' when it holds a
-- lock-shaped hash (every field an owner field with a hold count: relock's
-- and Redisson's lock model), else 'other' (a string, list, set, a
-- read-write lock, or a hash that is not a lock).
local function is_lock(key)
  local fields = hash_at(key)
  if type(fields) ~= 'table' then
    return fields
  end
  for i = 1, #fields, 2 do
    if not string.find(fields[i], OWNER_FIELD)
        or not is_count(fields[i + 1]) then
      return 'other'
    end
  end
  return 'lock'
end

-- is_rwlock(key): 'free' when the key does not exist, 'rwlock' when it holds
-- a read-write lock (a 'mode' of read or write, and owner fields, readers'
-- or the writer's, with hold counts), else 'other'.
local function is_rwlock(key)
  local fields = hash_at(key)
  if type(fields) ~= 'table' then
    return fields
  end
  local mode = nil
  for i = 1, #fields, 2 do
    local field, value = fields[i], fields[i + 1]
    if field == 'mode' then
      if value ~= 'read' and value ~= 'write' then
        return 'other'
      end
      mode = value
    elseif not (string.find(field, OWNER_FIELD) or
                string.find(field, WRITER_FIELD))
        or not is_count(value) then
      return 'other'
    end
  end
  if mode == nil then
    return 'other'
  end
  return 'rwlock'
end

-- not_this_type(key, wanted): the NOTALOCK error reply of an acquire of a
-- `wanted` lock ('lock' or 'read-write lock') that found the existing `key`
-- to be something else: another lock type (one name is one lock type: the
-- types' waiters listen on different channels, so a mix would lose
-- wake-ups) or not a lock at all. Nothing is written.
local function not_this_type(key, wanted)
  local what
  if is_rwlock(key) == 'rwlock' then
    what = 'read-write lock'
  elseif is_lock(key) == 'lock' then
    what = 'lock (plain, fenced or fair)'
  else
    what = redis.call('type', key).ok .. ' that is not a lock'
  end
  return redis.error_reply('NOTALOCK the key holds a ' .. what .. '; a ' ..
      wanted .. ' of that name cannot be acquired (one name is one lock ' ..
      'type); nothing was written')
end

-- lock_field(key, field): whether the existing `key`, a lock's hash, has
-- `field`; for a key of another type (a string, a list...), false and the
-- NOTALOCK error reply of not_this_type(), for the acquire script to return
-- before it writes anything (HEXISTS alone would raise Redis's WRONGTYPE).
local function lock_field(key, field)
  local has = redis.pcall('hexists', key, field)
  if type(has) == 'table' then
    return false, not_this_type(key, 'lock')
  end
  return has == 1, nil
end

-- fair_waiter_in_time(queue, deadlines): whether the fair lock whose queue
-- and deadlines are `queue` and `deadlines` has a waiter still in time (see
-- drop_stale() in lua/fair_lib.lua). Not only its head: a waiter that died
-- there keeps its place until a fair lock's script drops it, and must not
-- hide the live waiters behind it (each waiter's deadline is later than
-- those ahead of it). One LINDEX when nobody queues.
local function fair_waiter_in_time(queue, deadlines)
  local head = redis.call('lindex', queue, 0)
  if not head then
    return false
  end
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local deadline = tonumber(redis.call('zscore', deadlines, head))
  if deadline and deadline > now then
    return true
  end
  return redis.call('zcount', deadlines, '(' .. now, '+inf') > 0
end

-- fair_queue_waits(key): whether the fair lock of the free name `key` has a
-- waiter still in time (fair_waiter_in_time()): the name is then the fair
-- lock's, and another lock type may not take it (one name is one lock
-- type). The queue and its deadlines are "redisson_lock_queue:{N}" and
-- "redisson_lock_timeout:{N}" (without the braces when N contains "{"), in
-- N's cluster slot.
local function fair_queue_waits(key)
  local braced = key
  if not string.find(braced, '{', 1, true) then
    braced = '{' .. braced .. '}'
  end
  return fair_waiter_in_time('redisson_lock_queue:' .. braced,
      'redisson_lock_timeout:' .. braced)
end

-- The NOTALOCK error reply of an acquire refused by fair_queue_waits().
local function fair_queue_refusal()
  return redis.error_reply('NOTALOCK the name is a fair lock\'s (its ' ..
      'queue has waiters); a lock of that name cannot be acquired ' ..
      '(one name is one lock type); nothing was written')
end

-- lease_new_lock(key, lease_ms, ...): sets the lease of the lock `key` that
-- the calling acquire script has just made. Should Redis refuse (PEXPIRE
-- denied by an ACL, renamed away), deletes `key` and the other keys given
-- (what the script wrote with it) and returns the error reply for the script
-- to return: a failed acquire leaves no lock without a lease. Else nil.
local function lease_new_lock(key, lease_ms, ...)
  local set = redis.pcall('pexpire', key, lease_ms)
  if type(set) == 'table' and set.err then
    redis.call('del', key, ...)
    return set
  end
  return nil
end

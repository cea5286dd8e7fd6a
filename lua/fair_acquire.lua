-- Acquire (or re-enter) a fair lock: the lock goes to its waiters in the
-- order they arrived. Redisson's RFairLock model (see lua/fair_lib.lua,
-- inserted with lua/lock_lib.lua and lua/shape_lib.lua at the "-- @helpers"
-- line when the script is loaded): Redisson fair lock clients and relock
-- share one queue.
-- KEYS[1]  lock name (a hash: field = owner, value = hold count)
-- KEYS[2]  queue "redisson_lock_queue:{N}" (a list of owners)
-- KEYS[3]  deadlines "redisson_lock_timeout:{N}" (a sorted set)
-- KEYS[4]  unlock channel (the waiters' channels are "<KEYS[4]>:<owner>")
-- ARGV[1]  lease in milliseconds
-- ARGV[2]  owner field "<client-id>:<thread-id>"
-- ARGV[3]  queue wait in milliseconds (Redisson's threadWaitTime)
-- ARGV[4]  "1" when the caller holds no hold of its own yet (as in
--          lua/acquire.lua: the count is set to 1, absorbing a count left by
--          an attempt whose reply was lost); else a re-entry
-- ARGV[5]  "1": join the queue (or keep the caller's place in it) when the
--          lock is not the caller's to take; anything else: one attempt that
--          leaves no trace (try-lock without waiting)
-- ARGV[6]  publish command: "publish" (also when absent) or "spublish"
-- Returns nil when the caller now holds the lock. Otherwise how long, in
-- milliseconds, the caller may sleep before it re-checks should no unlock
-- message reach it: at the head of the queue, the holder's PTTL; further
-- back, the time until the deadline of the waiter ahead; -1 when there is
-- nothing to wait for (no TTL, or the waiter ahead is overdue). A NOTALOCK
-- error, with nothing queued, when the key holds a read-write lock or
-- anything but a lock. A failed call leaves no lock without a lease (see
-- lua/acquire.lua) and the queue as it was (but for stale waiters dropped).
-- A NOTHELD error, and nothing written, for a re-entry (ARGV[4] not "1")
-- that finds no count of this owner: the hold was lost (see lua/acquire.lua).
-- The fast path, before the helpers are defined (so that it creates no Lua
-- closures): a free name without a queue or deadlines (EXISTS of the three
-- keys) is the caller's, HSET and PEXPIRE, as the general path below (the
-- specification) takes it: there is nothing stale to drop, no head to pop
-- and no deadline to move. Anything else falls through, nothing written.
-- (Not for a re-entry: see NOTHELD.)
if (ARGV[6] == 'publish' or ARGV[6] == 'spublish') and ARGV[4] == '1'
    and redis.call('exists', KEYS[1], KEYS[2], KEYS[3]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], 1)
  local set = redis.pcall('pexpire', KEYS[1], ARGV[1])  -- lease_new_lock()
  if type(set) == 'table' then
    redis.call('del', KEYS[1])
    return set
  end
  return nil
end

-- @helpers

-- The general path.
local publish = publish_command(ARGV[6])  -- raises before any write
if ARGV[4] ~= '1' and redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then
  return redis.error_reply('NOTHELD this owner no longer holds the lock ' ..
      '(its lease ran out, or it was deleted or force-released): the ' ..
      're-entry found it lost; nothing was written')
end
local now = now_ms()
local wait = tonumber(ARGV[3])
local dropped = drop_stale(KEYS[2], KEYS[3], now)

local exists = redis.call('exists', KEYS[1])
local has_field, bad = false, nil
if exists == 1 then
  has_field, bad = lock_field(KEYS[1], ARGV[2])
  if bad then
    return bad
  end
end
if exists == 0 then
  local head = redis.call('lindex', KEYS[2], 0)
  if (not head) or head == ARGV[2] then
    -- The caller's turn. The lock first, with its lease (a key this script
    -- made is deleted again should its lease fail: nothing is left without
    -- one, and nothing changed in the queue); at maxmemory the HSET is
    -- refused, as a plain acquire's. Then the caller leaves the queue, and
    -- everyone behind moves up.
    redis.call('hset', KEYS[1], ARGV[2], 1)
    local failed = lease_new_lock(KEYS[1], ARGV[1])
    if failed then
      return failed
    end
    if head then
      redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    local waiters = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #waiters do
      redis.call('zincrby', KEYS[3], -wait, waiters[i])
    end
    return nil
  end
  if dropped then
    -- Free, and a waiter that was not at the head a moment ago is now: it
    -- may be asleep until the deadline of the one dropped; wake it.
    wake_next(KEYS[2], KEYS[4], '0', publish)
  end
elseif has_field and redis.call('hexists', KEYS[1], 'mode') == 0 then
  -- A re-entry: the lease (which only grows) before the count.
  if ARGV[4] == '1' then
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('hset', KEYS[1], ARGV[2], 1)
  else
    if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then
      redis.call('pexpire', KEYS[1], ARGV[1])
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
  end
  return nil
elseif is_lock(KEYS[1]) ~= 'lock' then
  -- A read-write lock, or not a lock: never queued for.
  return not_this_type(KEYS[1], 'fair lock')
end

-- Not the caller's turn. The hint: the holder's PTTL at the head (it is held:
-- a free lock with the caller at the head was taken above), else the time
-- until the deadline of the waiter ahead.
local function hint(ahead)
  local left
  if ahead then
    left = tonumber(redis.call('zscore', KEYS[3], ahead) or '0') - now
  else
    left = redis.call('pttl', KEYS[1])
  end
  if left <= 0 then
    return -1
  end
  return left
end

if ARGV[5] ~= '1' then
  if exists == 1 then
    return hint(nil)
  end
  return hint(redis.call('lindex', KEYS[2], -1) or nil)
end

local place = redis.call('lpos', KEYS[2], ARGV[2])
if place and redis.call('zscore', KEYS[3], ARGV[2]) then
  -- Queued already: keep the place.
  if place == 0 then
    return hint(nil)
  end
  return hint(redis.call('lindex', KEYS[2], place - 1))
end
-- Join at the tail, with the deadline of the waiter ahead (or the holder's
-- lease end) plus the queue wait.
leave(KEYS[2], KEYS[3], ARGV[2], nil)  -- a half entry, should there be one
local last = redis.call('lindex', KEYS[2], -1)
local expected = now + math.max(redis.call('pttl', KEYS[1]), 0)
if last then
  expected = tonumber(redis.call('zscore', KEYS[3], last) or now)
end
redis.call('zadd', KEYS[3], expected + wait, ARGV[2])
redis.call('rpush', KEYS[2], ARGV[2])
return hint(last or nil)

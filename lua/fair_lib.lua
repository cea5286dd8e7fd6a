-- Helpers prepended to the fair lock's scripts (with lua/lock_lib.lua before
-- them; lib/lock/lock_scripts.cc does the prepending).
--
-- The fair lock's queue is Redisson's RFairLock model: a list of waiting
-- owners in arrival order, "redisson_lock_queue:{N}", and a sorted set,
-- "redisson_lock_timeout:{N}", holding each waiter's deadline in Unix
-- milliseconds: the time by which it is expected to have had its turn (the
-- deadline of the waiter ahead of it, or the lock's lease end, when it
-- joined) plus the queue wait (Redisson's threadWaitTime). A waiter still at
-- the head of the queue after its deadline is presumed dead and dropped, so
-- that a crashed waiter cannot stall the queue for longer than that. Whenever
-- the head waiter takes the lock, every deadline left moves one queue wait
-- earlier (everyone moved up a place).

-- now_ms(): the Redis server's clock in Unix milliseconds. (Redisson passes
-- its client's clock instead; on hosts kept in sync the two agree.)
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- drop_stale(queue, timeouts, now): removes the waiters at the head of the
-- queue whose deadline has passed (or that have none, a queue out of step
-- with its set), until the head is a waiter still in time. Returns whether
-- it removed any (a new waiter is at the head: wake it if the lock is free).
local function drop_stale(queue, timeouts, now)
  local dropped = false
  while true do
    local first = redis.call('lindex', queue, 0)
    if not first then
      return dropped
    end
    local deadline = tonumber(redis.call('zscore', timeouts, first))
    if deadline and deadline > now then
      return dropped
    end
    redis.call('zrem', timeouts, first)
    redis.call('lpop', queue)
    dropped = true
  end
end

-- leave(queue, timeouts, owner, wait): removes `owner` from the queue; when
-- `wait` is given, the waiters behind it move up a place (their deadlines one
-- queue wait earlier). Returns whether it was queued.
local function leave(queue, timeouts, owner, wait)
  local timed = redis.call('zrem', timeouts, owner) == 1
  if timed and wait then
    local waiters = redis.call('lrange', queue, 0, -1)
    local behind = false
    for i = 1, #waiters do
      if behind then
        redis.call('zincrby', timeouts, -wait, waiters[i])
      elseif waiters[i] == owner then
        behind = true
      end
    end
  end
  return redis.call('lrem', queue, 0, owner) > 0 or timed
end

-- wake_next(queue, channel, message, command): publishes the unlock message
-- on the channel of the waiter at the head of the queue ("<channel>:<owner>",
-- Redisson's), if any. Returns nil or an UNPUBLISHED error reply (see
-- publish_unlock()).
local function wake_next(queue, channel, message, command)
  local next_owner = redis.call('lindex', queue, 0)
  if not next_owner then
    return nil
  end
  return publish_unlock(channel .. ':' .. next_owner, message, command)
end

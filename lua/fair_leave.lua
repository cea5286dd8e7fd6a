-- A waiter of a fair lock gives up (its wait ran out, its client closed):
-- it leaves the queue at once, and the waiters behind it move up a place
-- (Redisson's RFairLock acquireFailed). Should it have been next in line
-- for a free lock (an unlock message may have been meant for it), the new
-- head waiter is woken instead. Uses lua/lock_lib.lua and lua/fair_lib.lua,
-- prepended when loaded.
-- KEYS[1]  lock name
-- KEYS[2]  queue "redisson_lock_queue:{N}"
-- KEYS[3]  deadlines "redisson_lock_timeout:{N}"
-- KEYS[4]  unlock channel (the waiters' channels are "<KEYS[4]>:<owner>")
-- ARGV[1]  owner field
-- ARGV[2]  queue wait in milliseconds
-- ARGV[3]  unlock message ("0")
-- ARGV[4]  publish command: "publish" (also when absent) or "spublish"
-- ARGV[5]  "1" when the owner held no hold of its own before the failed
--          acquire: a field of its own at the lock was left by an attempt
--          whose reply was lost, and is removed (the lock freed), as
--          lua/fair_release_all.lua does; anything else: the hold stays
-- Returns 1 when the owner was queued (and has left) or its field was
-- removed, else 0; an UNPUBLISHED error when the next waiter could not be
-- woken.
local publish = publish_command(ARGV[4])  -- raises before any write
local was_head = redis.call('lindex', KEYS[2], 0) == ARGV[1]
local left = leave(KEYS[2], KEYS[3], ARGV[1], tonumber(ARGV[2]))
local freed = false
if ARGV[5] == '1' and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('del', KEYS[1])
  freed = true
end
local dropped = drop_stale(KEYS[2], KEYS[3], now_ms())
if (was_head or freed or dropped) and redis.call('exists', KEYS[1]) == 0 then
  local unpublished = wake_next(KEYS[2], KEYS[4], ARGV[3], publish)
  if unpublished then
    return unpublished
  end
end
if left or freed then
  return 1
end
return 0

-- Release every hold of one owner of a fair lock at once (a closing client's
-- holds; the undo of an attempt whose outcome is unknown), and take the owner
-- out of the queue should it be there. Uses lua/lock_lib.lua and
-- lua/fair_lib.lua, prepended when loaded.
-- KEYS[1]  lock name
-- KEYS[2]  queue "redisson_lock_queue:{N}"
-- KEYS[3]  deadlines "redisson_lock_timeout:{N}"
-- KEYS[4]  unlock channel (the waiters' channels are "<KEYS[4]>:<owner>")
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  owner field
-- ARGV[3]  publish command: "publish" (also when absent) or "spublish"
-- Returns 1 when the owner held the lock (now free, the head waiter woken),
-- else 0; an UNPUBLISHED error when it was freed but the unlock message could
-- not be published.
local publish = publish_command(ARGV[3])  -- raises before any write
local was_head = redis.call('lindex', KEYS[2], 0) == ARGV[2]
leave(KEYS[2], KEYS[3], ARGV[2], nil)
local dropped = drop_stale(KEYS[2], KEYS[3], now_ms())
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  -- Not a holder. Should it have been next in line for a free lock (a
  -- release may have woken it), the new head waiter is woken instead.
  if (was_head or dropped) and redis.call('exists', KEYS[1]) == 0 then
    local unpublished = wake_next(KEYS[2], KEYS[4], ARGV[1], publish)
    if unpublished then
      return unpublished
    end
  end
  return 0
end
redis.call('del', KEYS[1])
return wake_next(KEYS[2], KEYS[4], ARGV[1], publish) or 1

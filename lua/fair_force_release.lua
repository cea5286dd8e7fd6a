-- Free a fair lock whoever holds it (administrative unlock) and wake the
-- waiter at the head of its queue; the queue stays. Uses lua/lock_lib.lua,
-- lua/shape_lib.lua and lua/fair_lib.lua, prepended when loaded.
-- KEYS[1]  lock name
-- KEYS[2]  queue "redisson_lock_queue:{N}"
-- KEYS[3]  deadlines "redisson_lock_timeout:{N}"
-- KEYS[4]  unlock channel (the waiters' channels are "<KEYS[4]>:<owner>")
-- ARGV[1]  unlock message ("0")
-- ARGV[2]  publish command: "publish" (also when absent) or "spublish"
-- Returns 1 when a held lock was freed, 0 when it was free (the head waiter
-- is woken either way); a NOTALOCK error (nothing deleted) when the key
-- holds anything but a lock; an UNPUBLISHED error when the head waiter could
-- not be woken.
local publish = publish_command(ARGV[2])  -- raises before any write
local shape = is_lock(KEYS[1])
if shape == 'other' then
  return redis.error_reply('NOTALOCK the key holds a ' ..
      redis.call('type', KEYS[1]).ok .. ' that is not a lock; not deleted')
end
drop_stale(KEYS[2], KEYS[3], now_ms())
redis.call('del', KEYS[1])
local unpublished = wake_next(KEYS[2], KEYS[4], ARGV[1], publish)
if unpublished then
  return unpublished
end
if shape == 'free' then
  return 0
end
return 1

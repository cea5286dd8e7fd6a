-- Free a lock whoever holds it (administrative unlock).
-- KEYS[1]  lock name
-- KEYS[2]  unlock channel
-- ARGV[1]  unlock message ("0")
-- Returns 1 when a held lock was freed (waiters notified), 0 when it was free.
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0
